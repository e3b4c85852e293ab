//! Hostile LoRA adapters: each malformed or unsupported PEFT adapter (bad JSON, a rank or
//! shape the config and model do not imply, a value that is not finite, a tensor sprout
//! does not know or that is missing, DoRA, trained biases, a declared shape far larger
//! than the file, a truncated file, a rank above the maximum allowed) must be an error
//! that names the field, tensor or value, never a panic or an allocation the file sizes.
//! CPU only: the reader is plain data, checked against tiny-llama's config.

use std::path::Path;

use serde_json::{Value, json};

use sprout::model::config::ModelConfig;
use sprout::model::lora::LoraAdapter;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;

/// tiny-llama: hidden 64, q 64 rows, k and v 32, intermediate 160, 2 layers.
fn model() -> ModelConfig {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
    SafetensorsDir::open(dir).unwrap().config().clone()
}

const R: usize = 4;

/// A tensor as a safetensors header entry and its bytes.
struct Tensor {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn f32_tensor(name: &str, rows: usize, cols: usize, seed: f32) -> Tensor {
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| ((i as f32 + seed) * 0.37).sin() * 0.1)
        .collect();
    Tensor {
        name: name.to_string(),
        dtype: "F32",
        shape: vec![rows as u64, cols as u64],
        data: bytemuck::cast_slice(&values).to_vec(),
    }
}

fn lora_name(layer: usize, module: &str, half: &str) -> String {
    format!("base_model.model.model.layers.{layer}.{module}.lora_{half}.weight")
}

/// A valid adapter on q_proj and v_proj of both layers, rank 4.
fn tensors() -> Vec<Tensor> {
    let mut out = vec![];
    for layer in 0..2 {
        for (module, rows) in [("self_attn.q_proj", 64), ("self_attn.v_proj", 32)] {
            let seed = (layer * 10 + rows) as f32;
            out.push(f32_tensor(&lora_name(layer, module, "A"), R, 64, seed));
            out.push(f32_tensor(
                &lora_name(layer, module, "B"),
                rows,
                R,
                seed + 1.0,
            ));
        }
    }
    out
}

fn config() -> Value {
    json!({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": R, "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"], "bias": "none", "use_dora": false,
        "fan_in_fan_out": false, "modules_to_save": null, "lora_dropout": 0.05,
        "init_lora_weights": true, "base_model_name_or_path": "tiny-llama"
    })
}

/// A safetensors file: the header as given (offsets contiguous in `tensors`' order), then
/// the data.
fn safetensors(tensors: &[Tensor]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0;
    for t in tensors {
        let end = offset + t.data.len();
        let entry = json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, end]});
        header.insert(t.name.clone(), entry);
        offset = end;
    }
    with_header(&Value::Object(header).to_string(), tensors)
}

fn with_header(header: &str, tensors: &[Tensor]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for t in tensors {
        bytes.extend(&t.data);
    }
    bytes
}

fn read(config: &Value, tensors: &[u8]) -> Result<LoraAdapter, String> {
    let json = config.to_string();
    LoraAdapter::from_peft(json.as_bytes(), tensors, &model(), 64).map_err(|e| e.to_string())
}

/// The error of `config` with `tensors`, which must say each of `says`.
fn refused(config: &Value, tensors: &[u8], says: &[&str]) {
    let e = match read(config, tensors) {
        Ok(_) => panic!("a hostile adapter was read (it should say {says:?})"),
        Err(e) => e,
    };
    for want in says {
        assert!(e.contains(want), "`{e}` does not say `{want}`");
    }
}

fn with(field: &str, value: Value) -> Value {
    let mut c = config();
    c[field] = value;
    c
}

fn changed(name: &str, change: impl Fn(&mut Tensor)) -> Vec<u8> {
    let mut ts = tensors();
    ts.iter_mut().filter(|t| t.name == name).for_each(change);
    safetensors(&ts)
}

#[test]
fn the_valid_adapter_is_read() {
    let a = read(&config(), &safetensors(&tensors())).unwrap();
    assert_eq!(a.layers.len(), 2);
    assert_eq!((a.max_r, a.max_site_rank()), (R, 2 * R));
    assert!(
        a.layers
            .iter()
            .all(|l| l.o.is_none() && l.gate_up.is_none())
    );
}

#[test]
fn bad_json() {
    let e = LoraAdapter::from_peft(b"{\"r\": 4,", &safetensors(&tensors()), &model(), 64);
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("adapter_config.json") && e.contains("JSON"),
        "{e}"
    );
}

#[test]
fn a_rank_other_than_the_configs() {
    // The config says rank 8; the tensors are rank 4.
    let a = lora_name(0, "self_attn.q_proj", "A");
    refused(
        &with("r", json!(8)),
        &safetensors(&tensors()),
        &[&a, "[4, 64]", "[8, 64]", "rank 8"],
    );
    // A rank_pattern that says otherwise for one module.
    let v = lora_name(0, "self_attn.v_proj", "A");
    refused(
        &with(
            "rank_pattern",
            json!({"layers\\.0\\.self_attn\\.v_proj": 2}),
        ),
        &safetensors(&tensors()),
        &[&v, "[4, 64]", "[2, 64]"],
    );
}

#[test]
fn a_shape_the_model_does_not_have() {
    let b = lora_name(1, "self_attn.v_proj", "B");
    let file = changed(&b, |t| {
        *t = f32_tensor(&t.name, 64, R, 0.0);
    });
    refused(&config(), &file, &[&b, "[64, 4]", "[32, 4]"]);
    let a = lora_name(0, "self_attn.q_proj", "A");
    let file = changed(&a, |t| t.shape = vec![R as u64 * 64]);
    refused(&config(), &file, &[&a, "[256]"]);
}

#[test]
fn a_value_that_is_not_finite() {
    let b = lora_name(1, "self_attn.q_proj", "B");
    let file = changed(&b, |t| {
        t.data[40..44].copy_from_slice(&f32::NAN.to_le_bytes())
    });
    refused(&config(), &file, &[&b, "NaN", "element 10"]);
    let file = changed(&b, |t| {
        t.data[0..4].copy_from_slice(&f32::NEG_INFINITY.to_le_bytes())
    });
    refused(&config(), &file, &[&b, "-inf", "element 0"]);
    // An F16 infinity too.
    let a = lora_name(0, "self_attn.v_proj", "A");
    let file = changed(&a, |t| {
        t.dtype = "F16";
        t.data = [half::f16::INFINITY.to_le_bytes(); 256].concat();
    });
    refused(&config(), &file, &[&a, "inf"]);
}

#[test]
fn an_unknown_tensor_name() {
    let mut ts = tensors();
    let dora = "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector";
    ts.push(f32_tensor(dora, 1, 64, 0.0));
    refused(&config(), &safetensors(&ts), &[dora, "not a LoRA weight"]);
    // A projection the config does not target.
    let mut ts = tensors();
    let k = lora_name(0, "self_attn.k_proj", "A");
    ts.push(f32_tensor(&k, R, 64, 0.0));
    refused(&config(), &safetensors(&ts), &[&k, "does not target"]);
    // A layer the model does not have.
    let mut ts = tensors();
    let far = lora_name(7, "self_attn.q_proj", "A");
    ts.push(f32_tensor(&far, R, 64, 0.0));
    refused(&config(), &safetensors(&ts), &[&far, "layer 7", "2 layers"]);
    // An adapter on the embedding.
    let mut ts = tensors();
    let embed = "base_model.model.model.embed_tokens.lora_A.weight";
    ts.push(f32_tensor(embed, R, 384, 0.0));
    refused(&config(), &safetensors(&ts), &[embed, "model.embed_tokens"]);
}

#[test]
fn a_missing_b() {
    let b = lora_name(1, "self_attn.q_proj", "B");
    let ts: Vec<Tensor> = tensors().into_iter().filter(|t| t.name != b).collect();
    refused(
        &config(),
        &safetensors(&ts),
        &[&b, "model.layers.1.self_attn.q_proj"],
    );
}

#[test]
fn dora_biases_and_other_options_sprout_does_not_compute() {
    let file = safetensors(&tensors());
    refused(
        &with("use_dora", json!(true)),
        &file,
        &["use_dora", "true", "DoRA"],
    );
    refused(&with("bias", json!("all")), &file, &["bias", "\"all\""]);
    refused(&with("lora_bias", json!(true)), &file, &["lora_bias"]);
    refused(
        &with("fan_in_fan_out", json!(true)),
        &file,
        &["fan_in_fan_out"],
    );
    let save = with("modules_to_save", json!(["lm_head"]));
    refused(&save, &file, &["modules_to_save", "lm_head"]);
    let head = with("target_modules", json!(["q_proj", "v_proj", "lm_head"]));
    refused(&head, &file, &["target_modules", "lm_head"]);
    let embed = with("target_modules", json!(["embed_tokens"]));
    refused(&embed, &file, &["model.embed_tokens"]);
    refused(
        &with("peft_type", json!("IA3")),
        &file,
        &["peft_type", "IA3"],
    );
    let pissa = with("init_lora_weights", json!("pissa"));
    refused(&pissa, &file, &["init_lora_weights", "pissa"]);
    let tokens = with("trainable_token_indices", json!([3]));
    refused(&tokens, &file, &["trainable_token_indices"]);
    let none = with("target_modules", json!(["c_attn"]));
    refused(
        &none,
        &file,
        &["target_modules", "none of this model's projections"],
    );
}

#[test]
fn a_huge_declared_shape() {
    // A shape of 2^40 x 64 over 1 KiB of data: refused from the header, before anything
    // is sized from it.
    let a = lora_name(0, "self_attn.q_proj", "A");
    let file = changed(&a, |t| t.shape = vec![1 << 40, 64]);
    refused(&config(), &file, &[&a, "[1099511627776, 64]"]);
    // An element count that overflows.
    let file = changed(&a, |t| t.shape = vec![u64::MAX, u64::MAX]);
    refused(&config(), &file, &[&a, "18446744073709551615"]);
    // A header length far past the file.
    let mut file = safetensors(&tensors());
    file[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    refused(
        &config(),
        &file,
        &["adapter_model.safetensors", "1152921504606846976"],
    );
}

#[test]
fn a_truncated_file() {
    let file = safetensors(&tensors());
    let cut = &file[..file.len() - 100];
    let last = lora_name(1, "self_attn.v_proj", "B");
    refused(&config(), cut, &[&last, "truncated"]);
    refused(
        &config(),
        &file[..5],
        &["adapter_model.safetensors", "5 bytes"],
    );
    refused(&config(), &[], &["0 bytes"]);
    // Offsets that overlap (the second tensor starts inside the first).
    let header = {
        let mut ts = tensors();
        ts.truncate(2);
        let (a, b) = (&ts[0], &ts[1]);
        json!({
            a.name.clone(): {"dtype": "F32", "shape": a.shape, "data_offsets": [0, 1024]},
            b.name.clone(): {"dtype": "F32", "shape": b.shape, "data_offsets": [512, 1536]},
        })
        .to_string()
    };
    let file = with_header(&header, &tensors()[..2]);
    let q0 = with("target_modules", json!(["model.layers.0.self_attn.q_proj"]));
    let b = lora_name(0, "self_attn.q_proj", "B");
    refused(&q0, &file, &["adapter_model.safetensors", &b]);
}

#[test]
fn a_wrong_dtype() {
    let a = lora_name(0, "self_attn.q_proj", "A");
    let file = changed(&a, |t| {
        t.dtype = "I32";
    });
    refused(&config(), &file, &[&a, "I32"]);
    let file = changed(&a, |t| {
        t.dtype = "F64";
        t.data = [t.data.clone(), t.data.clone()].concat();
    });
    refused(&config(), &file, &[&a, "F64"]);
}

#[test]
fn a_rank_above_the_maximum() {
    let json = config().to_string();
    let file = safetensors(&tensors());
    let e = LoraAdapter::from_peft(json.as_bytes(), &file, &model(), 2).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("rank 4") && e.contains("allowed, 2"), "{e}");
    assert!(LoraAdapter::from_peft(json.as_bytes(), &file, &model(), 4).is_ok());
}

#[test]
fn a_file_larger_than_its_modules_can_fill() {
    // Well-formed, but padded with 1 MiB of trailing bytes the adapter cannot hold.
    let mut file = safetensors(&tensors());
    file.extend(vec![0u8; 1 << 20]);
    refused(
        &config(),
        &file,
        &["adapter_model.safetensors", "more than the"],
    );
    // Trailing bytes inside the allowance are still no tensor's: refused.
    let mut file = safetensors(&tensors());
    file.extend([0u8; 16]);
    refused(&config(), &file, &["adapter_model.safetensors"]);
}

#[test]
fn read_dir_names_the_path() {
    let dir = std::env::temp_dir().join(format!("sprout-hostile-adapter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = with("use_dora", json!(true)).to_string();
    std::fs::write(dir.join("adapter_config.json"), config).unwrap();
    let e = LoraAdapter::read_dir(&dir, &model(), 64)
        .unwrap_err()
        .to_string();
    let path = dir.join("adapter_config.json").display().to_string();
    assert!(e.contains(&path) && e.contains("use_dora"), "{e}");
    // A missing tensors file, named by its path.
    std::fs::write(dir.join("adapter_config.json"), config_text()).unwrap();
    let e = LoraAdapter::read_dir(&dir, &model(), 64)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("adapter_model.safetensors") && e.contains("cannot read"),
        "{e}"
    );
    // A file larger than the modules can fill is refused before it is read.
    let big = std::fs::File::create(dir.join("adapter_model.safetensors")).unwrap();
    big.set_len(1 << 40).unwrap();
    let e = LoraAdapter::read_dir(&dir, &model(), 64)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1099511627776 bytes"), "{e}");
    std::fs::write(
        dir.join("adapter_model.safetensors"),
        safetensors(&tensors()),
    )
    .unwrap();
    assert!(LoraAdapter::read_dir(&dir, &model(), 64).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn config_text() -> String {
    config().to_string()
}
