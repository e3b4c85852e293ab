//! Hostile model files: each class of corrupt or malicious header (llama.cpp's GGUF
//! advisories, Hugging Face configs that claim more than their tensors hold, overlapping
//! safetensors ranges, sizes of 0, contexts too long for the adapter) must be an error
//! that names the field and its value, never a panic, a hang or unbounded memory.
//!
//! The files are made here, in memory. `write_hostile_files` (ignored) writes them to
//! `$SPROUT_HOSTILE_DIR` for scripts/hostile_files.sh, which runs the CLI on each.

mod common;

use std::io::Cursor;
use std::path::Path;

use sprout::formats::WeightFormat;
use sprout::formats::gguf::writer::GgufWriter;
use sprout::formats::gguf::{GgmlType, GgufValue};
use sprout::model::decoder::Decoder;
use sprout::model::gguf_model::GgufModel;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;

/// A hostile model as the CLI would be given it.
enum Hostile {
    Gguf(Vec<u8>),
    /// A Hugging Face directory: config.json and one model.safetensors (the tiny-llama
    /// fixture's tokenizer.json completes it on disk).
    HfDir {
        config: String,
        shard: Vec<u8>,
    },
    /// A config.json that dummy weights are drawn for (`--load-format dummy`).
    DummyConfig(String),
}

struct Case {
    /// The file (or directory) name `write_hostile_files` gives it.
    file: &'static str,
    model: Hostile,
    /// What the error must say: the field and the value.
    expect: Vec<&'static str>,
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn tiny() -> GgufWriter {
    GgufWriter::tiny_model("llama")
}

/// A GGUF v3 header written by hand: the counts as given, then `body`.
fn raw_gguf(n_tensors: u64, n_kv: u64, body: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b.extend(body);
    b
}

/// One metadata entry: key, type id, the value's bytes.
fn entry(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut b = (key.len() as u64).to_le_bytes().to_vec();
    b.extend(key.as_bytes());
    b.extend(ty.to_le_bytes());
    b.extend(value);
    b
}

/// Where tensor `name`'s info starts (its name's length field) in a GGUF file.
fn tensor_info(bytes: &[u8], name: &str) -> usize {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend(name.as_bytes());
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("no tensor info for {name}"))
}

/// Where tensor `name`'s offset field is.
fn offset_field(bytes: &[u8], name: &str) -> usize {
    let dims_at = tensor_info(bytes, name) + 8 + name.len();
    let n_dims = u32::from_le_bytes(bytes[dims_at..dims_at + 4].try_into().unwrap()) as usize;
    dims_at + 4 + 8 * n_dims + 4
}

fn set_offset(mut bytes: Vec<u8>, name: &str, offset: u64) -> Vec<u8> {
    let at = offset_field(&bytes, name);
    bytes[at..at + 8].copy_from_slice(&offset.to_le_bytes());
    bytes
}

fn offset_of(bytes: &[u8], name: &str) -> u64 {
    let at = offset_field(bytes, name);
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The tiny-llama fixture's config.json with `field` set to `value`.
fn hf_config(field: &str, value: serde_json::Value) -> String {
    let text = std::fs::read_to_string(fixture("tiny-llama/config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config[field] = value;
    config.to_string()
}

fn hf_shard() -> Vec<u8> {
    std::fs::read(fixture("tiny-llama/model.safetensors")).unwrap()
}

/// A safetensors file of two F32 vectors of 4 values whose byte ranges overlap.
fn overlapping_safetensors() -> Vec<u8> {
    let header = serde_json::json!({
        "model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "model.embed_tokens.weight": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    })
    .to_string();
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend([0u8; 24]);
    b
}

fn cases() -> Vec<Case> {
    let case = |file, model, expect| Case {
        file,
        model,
        expect,
    };
    let good = tiny().to_bytes();
    let q_offset = offset_of(&good, "blk.0.attn_q.weight");
    let mut duplicate_tensor = good.clone();
    let at = tensor_info(&good, "blk.1.attn_q.weight") + 8;
    duplicate_tensor[at..at + 5].copy_from_slice(b"blk.0");
    vec![
        case(
            "tensor_count_overflow.gguf",
            Hostile::Gguf(raw_gguf(u64::MAX / 16, 0, &[])),
            vec!["tensor count 1152921504606846975"],
        ),
        case(
            "element_count_overflow.gguf",
            Hostile::Gguf(
                tiny()
                    .tensor("output.weight", &[1 << 32, 1 << 32], GgmlType(0), vec![])
                    .to_bytes(),
            ),
            vec!["output.weight", "[4294967296, 4294967296]", "overflows"],
        ),
        case(
            "block_count_huge.gguf",
            Hostile::Gguf(
                tiny()
                    .metadata("llama.block_count", GgufValue::U32(u32::MAX))
                    .to_bytes(),
            ),
            vec!["llama.block_count 4294967295 exceeds the 2 layers whose tensors are present"],
        ),
        case(
            "string_past_end.gguf",
            Hostile::Gguf(raw_gguf(
                0,
                1,
                &entry("general.name", 8, &(1u64 << 62).to_le_bytes()),
            )),
            vec!["general.name", "4611686018427387904 bytes needed"],
        ),
        case(
            "array_past_end.gguf",
            Hostile::Gguf(raw_gguf(
                0,
                1,
                &entry(
                    "tokenizer.ggml.tokens",
                    9,
                    &[8u32.to_le_bytes().as_slice(), &(1u64 << 40).to_le_bytes()].concat(),
                ),
            )),
            vec!["tokenizer.ggml.tokens", "array length 1099511627776"],
        ),
        case(
            "alignment_48.gguf",
            Hostile::Gguf(
                tiny()
                    .metadata("general.alignment", GgufValue::U32(48))
                    .to_bytes(),
            ),
            vec!["general.alignment 48 is not a power of two"],
        ),
        case(
            "duplicate_key.gguf",
            Hostile::Gguf(raw_gguf(
                0,
                2,
                &[
                    entry("a.k", 4, &[1, 0, 0, 0]),
                    entry("a.k", 4, &[2, 0, 0, 0]),
                ]
                .concat(),
            )),
            vec!["metadata key `a.k` appears twice"],
        ),
        case(
            "duplicate_tensor.gguf",
            Hostile::Gguf(duplicate_tensor),
            vec!["tensor blk.0.attn_q.weight appears twice"],
        ),
        case(
            "wrong_type.gguf",
            Hostile::Gguf(
                tiny()
                    .metadata("llama.block_count", GgufValue::String("30".into()))
                    .to_bytes(),
            ),
            vec!["`llama.block_count` is a string where a non-negative integer was expected"],
        ),
        case(
            "unknown_type.gguf",
            Hostile::Gguf(raw_gguf(0, 1, &entry("a.k", 13, &[0; 8]))),
            vec!["a.k", "unknown metadata value type 13"],
        ),
        case(
            "offset_out_of_range.gguf",
            Hostile::Gguf(set_offset(good.clone(), "output.weight", 1 << 40)),
            vec!["output.weight", "1099511627776", "past the end"],
        ),
        case(
            "overlapping_tensors.gguf",
            Hostile::Gguf(set_offset(good.clone(), "blk.0.attn_k.weight", q_offset)),
            vec!["blk.0.attn_q.weight", "blk.0.attn_k.weight", "overlap"],
        ),
        case(
            "context_length_huge.gguf",
            Hostile::Gguf(
                tiny()
                    .metadata("llama.context_length", GgufValue::U32(u32::MAX))
                    .to_bytes(),
            ),
            vec!["context length 4294967295", "storage-binding limit"],
        ),
        case(
            "hf_layers_huge",
            Hostile::HfDir {
                config: hf_config("num_hidden_layers", 1_000_000_000_000u64.into()),
                shard: hf_shard(),
            },
            vec!["num_hidden_layers 1000000000000 exceeds the 2 layers whose tensors are present"],
        ),
        case(
            "hf_vocab_zero",
            Hostile::HfDir {
                config: hf_config("vocab_size", 0.into()),
                shard: hf_shard(),
            },
            vec!["vocab_size is 0"],
        ),
        case(
            "hf_head_overflow",
            Hostile::HfDir {
                config: hf_config("head_dim", (u64::MAX / 2).into()),
                shard: hf_shard(),
            },
            vec!["head_dim 9223372036854775807", "overflows"],
        ),
        case(
            "hf_overlapping_tensors",
            Hostile::HfDir {
                config: hf_config("vocab_size", 384.into()),
                shard: overlapping_safetensors(),
            },
            vec![
                "model.safetensors",
                "invalid offset for tensor `model.embed_tokens.weight`",
            ],
        ),
        case(
            "dummy_layers_huge.json",
            Hostile::DummyConfig(hf_config("num_hidden_layers", 1_000_000_000_000u64.into())),
            vec!["n_layers 1000000000000 exceeds the 1024 layers"],
        ),
    ]
}

/// Loads an opened model on every adapter: each must refuse it.
fn load_error(source: &mut dyn WeightSource) -> String {
    let mut errors =
        common::gpus()
            .into_iter()
            .map(|gpu| match Decoder::load(gpu, source, &mut |_, _| {}) {
                Ok(_) => panic!("a hostile model loaded"),
                Err(e) => e.to_string(),
            });
    let first = errors.next().expect("common::gpus() fails without one");
    for other in errors {
        assert_eq!(other, first, "adapters disagree");
    }
    first
}

/// The error a hostile model ends in: opening it, or else loading it.
fn error_of(model: &Hostile) -> String {
    match model {
        Hostile::Gguf(bytes) => match GgufModel::from_reader(Cursor::new(bytes.clone())) {
            Err(e) => e.to_string(),
            Ok(mut m) => load_error(&mut m),
        },
        Hostile::HfDir { config, shard } => {
            let shards = vec![("model.safetensors".to_string(), Cursor::new(shard.clone()))];
            match SafetensorsDir::from_readers(config, None, shards) {
                Err(e) => e.to_string(),
                Ok(mut m) => load_error(&mut m),
            }
        }
        Hostile::DummyConfig(config) => {
            let path =
                std::env::temp_dir().join(format!("sprout-hostile-{}.json", std::process::id()));
            std::fs::write(&path, config).unwrap();
            let result = sprout::model::open::open_dummy(path.to_str(), WeightFormat::F16, 0);
            std::fs::remove_file(&path).unwrap();
            match result {
                Err(e) => e.to_string(),
                Ok((mut weights, _)) => load_error(&mut weights),
            }
        }
    }
}

/// Checks that case `file` fails with an error saying everything it expects.
fn check(file: &str) {
    let case = cases()
        .into_iter()
        .find(|c| c.file == file)
        .unwrap_or_else(|| panic!("no case {file}"));
    let err = error_of(&case.model);
    for want in &case.expect {
        assert!(err.contains(want), "{file}: `{err}` does not say `{want}`");
    }
}

#[test]
fn tensor_count_times_overhead_overflow() {
    check("tensor_count_overflow.gguf");
}

#[test]
fn element_count_product_overflow() {
    check("element_count_overflow.gguf");
}

#[test]
fn block_count_beyond_the_tensors() {
    check("block_count_huge.gguf");
}

#[test]
fn string_length_past_the_end() {
    check("string_past_end.gguf");
}

#[test]
fn array_length_past_the_end() {
    check("array_past_end.gguf");
}

#[test]
fn alignment_not_a_power_of_two() {
    check("alignment_48.gguf");
}

#[test]
fn duplicate_keys_and_tensor_names() {
    check("duplicate_key.gguf");
    check("duplicate_tensor.gguf");
}

#[test]
fn a_value_of_the_wrong_type() {
    check("wrong_type.gguf");
    check("unknown_type.gguf");
}

#[test]
fn offsets_out_of_range_or_overlapping() {
    check("offset_out_of_range.gguf");
    check("overlapping_tensors.gguf");
}

#[test]
fn a_context_length_past_the_adapter() {
    check("context_length_huge.gguf");
}

#[test]
fn hf_num_hidden_layers_beyond_the_tensors() {
    check("hf_layers_huge");
}

#[test]
fn hf_vocab_size_zero() {
    check("hf_vocab_zero");
}

#[test]
fn hf_head_sizes_whose_product_overflows() {
    check("hf_head_overflow");
}

#[test]
fn safetensors_ranges_that_overlap() {
    check("hf_overlapping_tensors");
}

#[test]
fn a_vocab_size_of_zero_never_reaches_the_engine() {
    let mut config = sprout::model::dummy::builtin_config("tiny-llama").unwrap();
    config.vocab_size = 0;
    let err = sprout::model::decoder::check_supported(&config).unwrap_err();
    assert_eq!(err.to_string(), "vocab_size is 0");
    let err = sprout::model::dummy::DummyWeights::new(config, WeightFormat::F16, 0).err();
    assert_eq!(err.unwrap().to_string(), "vocab_size is 0");
}

#[test]
fn dummy_weights_for_a_config_of_a_trillion_layers() {
    check("dummy_layers_huge.json");
}

/// Writes every case to `$SPROUT_HOSTILE_DIR` (a GGUF file, a directory, or a config
/// for dummy weights) for scripts/hostile_files.sh.
#[test]
#[ignore = "writes the hostile files for scripts/hostile_files.sh"]
fn write_hostile_files() {
    let dir = std::env::var_os("SPROUT_HOSTILE_DIR").expect("set SPROUT_HOSTILE_DIR");
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    for case in cases() {
        let path = dir.join(case.file);
        match case.model {
            Hostile::Gguf(bytes) => std::fs::write(&path, bytes).unwrap(),
            Hostile::DummyConfig(config) => std::fs::write(&path, config).unwrap(),
            Hostile::HfDir { config, shard } => {
                std::fs::create_dir_all(&path).unwrap();
                std::fs::write(path.join("config.json"), config).unwrap();
                std::fs::write(path.join("model.safetensors"), shard).unwrap();
                std::fs::copy(
                    fixture("tiny-llama/tokenizer.json"),
                    path.join("tokenizer.json"),
                )
                .unwrap();
            }
        }
    }
}
