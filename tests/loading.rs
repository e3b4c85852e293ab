//! Reading real model files: the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) and its
//! tokenizer against ids made by transformers, tiny GGUF files that must fail with clear
//! messages, and Hugging Face directories (made here, and the committed fixtures).
//!
//! The SmolLM2 GGUF is `$SPROUT_TEST_MODEL` when set, else the default model, which
//! `sprout::model::default_model::path()` fetches once and caches.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sprout::formats::gguf::writer::GgufWriter;
use sprout::formats::gguf::{GgmlType, GgufValue};
use sprout::formats::{WeightFormat, quantize};
use sprout::gpu::kernels::rope::RopeLayout;
use sprout::model::config::Architecture;
use sprout::model::gguf_model::GgufModel;
use sprout::model::names::TensorName;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;
use sprout::tokenizer::Tokenizer;

fn smollm2_path() -> PathBuf {
    if let Some(path) = std::env::var_os("SPROUT_TEST_MODEL").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    sprout::model::default_model::path().unwrap_or_else(|e| {
        panic!(
            "these tests need SmolLM2-135M-Instruct.Q4_1.gguf: set SPROUT_TEST_MODEL to its \
             path, or let the default-model fetch get it (`sprout::model::default_model::path()`, \
             which failed: {e})"
        )
    })
}

fn smollm2() -> GgufModel {
    let path = smollm2_path();
    GgufModel::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

#[test]
fn smollm2_config_matches_its_metadata() {
    let model = smollm2();
    let c = model.config();
    assert_eq!(c.architecture, Architecture::Llama);
    assert_eq!(c.hidden_size, 576);
    assert_eq!(c.n_layers, 30);
    assert_eq!(c.n_heads, 9);
    assert_eq!(c.n_kv_heads, 3);
    assert_eq!(c.head_dim, 64);
    assert_eq!(c.intermediate_size, 1536);
    assert_eq!(c.vocab_size, 49152);
    assert!(c.tied_embeddings);
    assert_eq!(c.rope_theta, 100000.0);
    assert_eq!(c.rope_layout, RopeLayout::Interleaved);
    assert_eq!(c.rms_norm_eps, 1e-5);
    assert_eq!(c.max_positions, 8192);
    assert_eq!(c.bos_token_id, Some(1));
    // eos (<|im_end|>), then <|endoftext|>, the other end-of-turn token in the vocabulary.
    assert_eq!(c.eos_token_ids, vec![2, 0]);
    let meta = model.metadata();
    assert_eq!(meta.str("tokenizer.ggml.pre").unwrap(), Some("smollm"));
    assert_eq!(
        meta.bool("tokenizer.ggml.add_bos_token").unwrap(),
        Some(false)
    );
    let template = model.chat_template().expect("SmolLM2 has a chat template");
    assert!(template.contains("<|im_start|>"), "{template}");
}

#[test]
fn smollm2_has_every_tensor_in_its_format() {
    let model = smollm2();
    let c = model.config().clone();
    let names = TensorName::all(&c);
    assert_eq!(names.len(), 1 + 30 * 9 + 1);
    assert!(!model.has("lm_head") && !model.has("layers.0.q_bias"));
    for name in names {
        assert!(model.has(&name.to_string()), "{name}");
        let info = model
            .gguf()
            .tensor(&sprout::model::gguf_model::gguf_name(name))
            .unwrap();
        assert_eq!(info.shape().unwrap(), name.shape(&c), "{name}");
        let want = match name {
            TensorName::Embed => WeightFormat::Q8_0,
            TensorName::FinalNorm => WeightFormat::F32,
            TensorName::Layer(_, t) if t.suffix().ends_with("norm") => WeightFormat::F32,
            _ => WeightFormat::Q4_1,
        };
        assert_eq!(info.format().unwrap(), want, "{name}");
    }
}

/// Opening and reading every tensor once: each byte is copied once, from the file into
/// the tensor's own buffer. Prints the time (a measurement, not an assertion).
#[test]
fn smollm2_reads_every_tensor_at_its_size() {
    let path = smollm2_path();
    let start = Instant::now();
    let mut model = GgufModel::open(&path).unwrap();
    let opened = start.elapsed();
    let mut bytes = 0usize;
    for name in TensorName::all(&model.config().clone()) {
        let t = model.read(&name.to_string()).unwrap();
        assert_eq!(
            t.bytes.len(),
            t.format.row_bytes(t.cols).unwrap() * t.rows,
            "{name}"
        );
        bytes += t.bytes.len();
    }
    let total = start.elapsed();
    let file_len = std::fs::metadata(&path).unwrap().len() as usize;
    assert!(
        bytes <= file_len && bytes > file_len * 9 / 10,
        "{bytes} of {file_len}"
    );
    eprintln!(
        "SmolLM2: opened in {:.1} ms, read {:.1} MB of tensors in {:.1} ms ({:.2} GB/s)",
        opened.as_secs_f64() * 1e3,
        bytes as f64 / 1e6,
        total.as_secs_f64() * 1e3,
        bytes as f64 / total.as_secs_f64() / 1e9
    );
    // The norms decode to sensible values: the GGUF is read at the right offsets.
    let norm = model.read("final_norm").unwrap().to_f32().unwrap();
    assert!(norm.iter().all(|v| v.is_finite() && v.abs() < 100.0));
    assert!(norm.iter().any(|&v| v != 0.0));
}

#[derive(serde::Deserialize)]
struct TokenizerFixture {
    cases: Vec<TokenizerCase>,
}

#[derive(serde::Deserialize)]
struct TokenizerCase {
    name: String,
    text: String,
    ids: Vec<u32>,
    ids_qwen2_pre: Vec<u32>,
}

/// Ids from transformers (scripts/tokenizer_fixture.py) for the tokenizer that SmolLM2's
/// GGUF describes; sprout builds its own from the same vocabulary.
#[test]
fn smollm2_tokenizer_gives_transformers_ids() {
    let fixture: TokenizerFixture = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("tokenizer_smollm2.json")).unwrap(),
    )
    .unwrap();
    assert!(fixture.cases.len() >= 10);
    let model = smollm2();
    let start = Instant::now();
    let tokenizer = model.tokenizer().unwrap();
    eprintln!(
        "SmolLM2: built the tokenizer from the GGUF vocabulary in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(tokenizer.vocab_size(), 49152);
    let mut failures = Vec::new();
    for case in &fixture.cases {
        let ids = tokenizer.encode(&case.text).unwrap();
        if ids != case.ids {
            failures.push(format!(
                "{}: {:?}\n  sprout       {ids:?}\n  transformers {:?}",
                case.name, case.text, case.ids
            ));
        }
        assert_eq!(
            tokenizer.decode(&case.ids).unwrap(),
            case.text,
            "{}",
            case.name
        );
        let mut stream = tokenizer.stream(false);
        let mut text = String::new();
        for &id in &case.ids {
            text.extend(stream.push(&tokenizer, id).unwrap());
        }
        text.push_str(&stream.finish(&tokenizer).unwrap());
        assert_eq!(text, case.text, "{} (streamed)", case.name);
    }
    // The same vocabulary with the Qwen2 pre-tokenizer (NFC, Qwen2's split regex).
    let mut qwen2_meta = model.metadata().clone();
    qwen2_meta.insert("tokenizer.ggml.pre", GgufValue::String("qwen2".into()));
    let qwen2 = Tokenizer::from_gguf(&qwen2_meta).unwrap();
    for case in &fixture.cases {
        let ids = qwen2.encode(&case.text).unwrap();
        if ids != case.ids_qwen2_pre {
            failures.push(format!(
                "{} (qwen2 pre): {:?}\n  sprout       {ids:?}\n  transformers {:?}",
                case.name, case.text, case.ids_qwen2_pre
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "ids differ from transformers':\n{}",
        failures.join("\n")
    );
    assert_eq!(tokenizer.token_to_id("<|im_end|>"), Some(2));
    assert_eq!(
        tokenizer
            .decode_with(&[1, 9690, 198, 19556, 2], true)
            .unwrap(),
        "system\nHello"
    );
}

fn open_err(w: &GgufWriter) -> String {
    match GgufModel::from_reader(Cursor::new(w.to_bytes())) {
        Ok(_) => panic!("a bad GGUF opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn tiny_gguf_models_open_and_bad_ones_are_named() {
    let mut m =
        GgufModel::from_reader(Cursor::new(GgufWriter::tiny_model("llama").to_bytes())).unwrap();
    assert_eq!(m.config().n_layers, 2);
    assert_eq!(m.read("layers.0.q").unwrap().format, WeightFormat::Q8_0);

    // Q3_K (ggml type 11): 256 values per 110-byte block, not read by sprout.
    let q3k = GgufWriter::tiny_model("llama").tensor(
        "blk.0.ffn_down.weight",
        &[96, 64],
        GgmlType(11),
        vec![0; 64 * 110],
    );
    assert_eq!(
        open_err(&q3k),
        "tensor blk.0.ffn_down.weight has type Q3_K, which sprout does not support yet \
         (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"
    );
    // Q6_K (ggml type 14) is read, but its rows are whole super-blocks of 256 values: a
    // row of 96 is refused when the tensor is read (as every tensor's size is checked on
    // use), naming it.
    let q6k = GgufWriter::tiny_model("llama").tensor(
        "blk.0.ffn_down.weight",
        &[96, 64],
        GgmlType(14),
        vec![0; 64 * 210],
    );
    let mut m = GgufModel::from_reader(Cursor::new(q6k.to_bytes())).unwrap();
    let e = m.read("layers.0.down").err().unwrap().to_string();
    assert!(
        e.contains("blk.0.ffn_down.weight") && e.contains("q6_k") && e.contains("256"),
        "{e}"
    );
    let phi = GgufWriter::tiny_model("phi3");
    assert_eq!(
        open_err(&phi),
        "GGUF architecture `phi3` is not supported by sprout (supported: llama, qwen2, qwen3, \
         gemma3)"
    );
    let e = open_err(&GgufWriter::tiny_model("llama").without_tensor("output_norm.weight"));
    assert!(
        e.contains("output_norm.weight") && e.contains("final_norm"),
        "{e}"
    );
    let e = open_err(
        &GgufWriter::tiny_model("llama")
            .metadata("llama.attention.head_count_kv", GgufValue::U32(2)),
    );
    assert!(
        e.contains("blk.0.attn_k.weight") && e.contains("64 x 64"),
        "{e}"
    );
    let mut bytes = GgufWriter::tiny_model("llama").to_bytes();
    bytes.truncate(bytes.len() - 1);
    let e = GgufModel::from_reader(Cursor::new(bytes))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("truncated") && e.contains("output.weight"),
        "{e}"
    );
    let e = GgufModel::from_reader(Cursor::new(b"PK\x03\x04 not a gguf".to_vec()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a GGUF file"), "{e}");
}

/// A scratch directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("sprout-loading-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TINY_CONFIG: &str = r#"{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
  "max_position_embeddings": 128, "tie_word_embeddings": true, "vocab_size": 16,
  "bos_token_id": null, "eos_token_id": 3, "hidden_act": "silu", "sliding_window": 128,
  "use_sliding_window": false
}"#;

/// The tensors of TINY_CONFIG (Hugging Face names and shapes), values from their index.
fn tiny_qwen2_tensors(format: WeightFormat) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    let hidden = 32;
    let shapes = |name: &str| -> Vec<usize> {
        let (q, kv, ffn, vocab) = (32, 16, 48, 16);
        match name
            .rsplit_once("layers.")
            .map_or(name, |(_, rest)| rest.split_once('.').unwrap().1)
        {
            "model.embed_tokens.weight" => vec![vocab, hidden],
            "self_attn.q_proj.weight" => vec![q, hidden],
            "self_attn.k_proj.weight" | "self_attn.v_proj.weight" => vec![kv, hidden],
            "self_attn.q_proj.bias" => vec![q],
            "self_attn.k_proj.bias" | "self_attn.v_proj.bias" => vec![kv],
            "self_attn.o_proj.weight" => vec![hidden, q],
            "mlp.gate_proj.weight" | "mlp.up_proj.weight" => vec![ffn, hidden],
            "mlp.down_proj.weight" => vec![hidden, ffn],
            _ => vec![hidden], // norms
        }
    };
    let mut names = vec![
        "model.embed_tokens.weight".to_string(),
        "model.norm.weight".to_string(),
    ];
    for i in 0..2 {
        for s in [
            "input_layernorm.weight",
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.q_proj.bias",
            "self_attn.k_proj.bias",
            "self_attn.v_proj.bias",
            "self_attn.o_proj.weight",
            "post_attention_layernorm.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
        ] {
            names.push(format!("model.layers.{i}.{s}"));
        }
    }
    names
        .into_iter()
        .enumerate()
        .map(|(k, name)| {
            let shape = shapes(&name);
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|j| k as f32 + j as f32 / 64.0).collect();
            let bytes = quantize(format, &values, *shape.last().unwrap()).unwrap();
            (name, shape, bytes)
        })
        .collect()
}

fn serialize(tensors: &[(String, Vec<usize>, Vec<u8>)], dtype: safetensors::Dtype) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            let view = safetensors::tensor::TensorView::new(dtype, shape.clone(), bytes).unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::tensor::serialize(views, None).unwrap()
}

#[test]
fn a_safetensors_directory_reads_back() {
    let dir = TempDir::new("single");
    let tensors = tiny_qwen2_tensors(WeightFormat::Bf16);
    std::fs::write(dir.0.join("config.json"), TINY_CONFIG).unwrap();
    std::fs::write(
        dir.0.join("model.safetensors"),
        serialize(&tensors, safetensors::Dtype::BF16),
    )
    .unwrap();
    let mut model = SafetensorsDir::open(&dir.0).unwrap();
    let c = model.config().clone();
    assert_eq!(c.architecture, Architecture::Qwen2);
    assert_eq!(
        (c.hidden_size, c.n_heads, c.n_kv_heads, c.head_dim),
        (32, 4, 2, 8)
    );
    assert_eq!((c.vocab_size, c.n_layers, c.intermediate_size), (16, 2, 48));
    assert_eq!(c.rope_layout, RopeLayout::HalfSplit);
    assert_eq!(c.rope_theta, 1e6);
    assert!(c.tied_embeddings);
    assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (None, vec![3]));
    let by_name: HashMap<_, _> = tensors
        .iter()
        .map(|(n, s, b)| (n.clone(), (s, b)))
        .collect();
    for name in TensorName::all(&c) {
        let t = model.read(&name.to_string()).unwrap();
        let (_, bytes) = by_name[&sprout::model::safetensors_dir::hf_name(name, c.architecture)];
        assert_eq!(&t.bytes, bytes, "{name}");
        assert_eq!(t.format, WeightFormat::Bf16);
        assert_eq!((t.rows, t.cols), name.shape(&c), "{name}");
    }
    let bias = model.read("layers.1.k_bias").unwrap().to_f32().unwrap();
    assert_eq!(bias.len(), 16);
}

#[test]
fn a_sharded_safetensors_directory_reads_back() {
    let dir = TempDir::new("sharded");
    let tensors = tiny_qwen2_tensors(WeightFormat::F16);
    let (first, second) = tensors.split_at(tensors.len() / 2);
    let mut weight_map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", first),
        ("model-00002-of-00002.safetensors", second),
    ] {
        std::fs::write(dir.0.join(file), serialize(part, safetensors::Dtype::F16)).unwrap();
        for (name, _, _) in part {
            weight_map.insert(name.clone(), file.into());
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(
        dir.0.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    std::fs::write(dir.0.join("config.json"), TINY_CONFIG).unwrap();
    std::fs::write(
        dir.0.join("generation_config.json"),
        r#"{"eos_token_id": [3, 5]}"#,
    )
    .unwrap();
    let mut model = SafetensorsDir::open(&dir.0).unwrap();
    assert_eq!(model.config().eos_token_ids, vec![3, 5]);
    let c = model.config().clone();
    let by_name: HashMap<_, _> = tensors.iter().map(|(n, _, b)| (n.clone(), b)).collect();
    // Every tensor, from both shards, with its own bytes and shape.
    for name in TensorName::all(&c) {
        let t = model.read(&name.to_string()).unwrap();
        let bytes = by_name[&sprout::model::safetensors_dir::hf_name(name, c.architecture)];
        assert_eq!(&t.bytes, bytes, "{name}");
        assert_eq!(t.format, WeightFormat::F16);
        assert_eq!((t.rows, t.cols), name.shape(&c), "{name}");
    }
    // A missing shard names itself.
    std::fs::remove_file(dir.0.join("model-00002-of-00002.safetensors")).unwrap();
    let e = SafetensorsDir::open(&dir.0).err().unwrap().to_string();
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
}

#[test]
fn a_sliding_window_mistral_is_refused() {
    let dir = TempDir::new("mistral");
    let config = TINY_CONFIG
        .replace("Qwen2ForCausalLM", "MistralForCausalLM")
        .replace("\"qwen2\"", "\"mistral\"")
        .replace("\"sliding_window\": 128", "\"sliding_window\": 64");
    std::fs::write(dir.0.join("config.json"), config).unwrap();
    std::fs::write(
        dir.0.join("model.safetensors"),
        serialize(&[], safetensors::Dtype::F32),
    )
    .unwrap();
    let e = SafetensorsDir::open(&dir.0).err().unwrap().to_string();
    assert!(
        e.contains("sliding-window attention") && e.contains("64"),
        "{e}"
    );
}

#[derive(serde::Deserialize)]
struct Reference {
    text: String,
    text_ids: Vec<u32>,
    text_ids_with_special: Vec<u32>,
}

/// The Hugging Face fixtures made by scripts/make_fixtures.py: the directory opens, every
/// tensor reads, and tokenizer.json gives transformers' ids.
#[test]
fn hugging_face_fixtures_open_and_tokenize() {
    for (name, arch, tied) in [
        ("tiny-llama", Architecture::Llama, false),
        ("tiny-llama-tied", Architecture::Llama, true),
        ("tiny-qwen2", Architecture::Qwen2, false),
    ] {
        let dir = fixtures().join(name);
        let mut model = SafetensorsDir::open(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let c = model.config().clone();
        assert_eq!((c.architecture, c.tied_embeddings), (arch, tied), "{name}");
        for t in TensorName::all(&c) {
            model.read(&t.to_string()).unwrap();
        }
        let reference: Reference =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        let tokenizer: Tokenizer = model.tokenizer().unwrap();
        assert_eq!(
            tokenizer.encode_with(&reference.text, false).unwrap(),
            reference.text_ids,
            "{name}"
        );
        assert_eq!(
            tokenizer.encode(&reference.text).unwrap(),
            reference.text_ids_with_special,
            "{name}"
        );
        assert_eq!(
            tokenizer.decode(&reference.text_ids).unwrap(),
            reference.text,
            "{name}"
        );
    }
}
