//! A Hugging Face model directory as a [`WeightSource`]: `config.json` (Llama, Mistral
//! without sliding window, Qwen2), one `model.safetensors` or shards listed in
//! `model.safetensors.index.json`, and optionally `generation_config.json` (more eos ids),
//! `tokenizer.json` and `tokenizer_config.json` (the chat template).
//!
//! A safetensors file is a u64 little-endian header length `n`, `n` bytes of JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`),
//! then the data; offsets are relative to the data's start. Only the header is read when a
//! file is opened; each tensor's bytes are read by seeking to its range when asked for.
//!
//! Invariants: opening validates each header with the `safetensors` crate (contiguous,
//! non-overlapping ranges; checked element counts), checks the ranges against the file's
//! size, the layer count against the layers present, and every tensor the config needs
//! for presence, dtype (F32, F16, BF16) and shape, so a directory that opened can be read
//! whole. RoPE pairs are half-split (Hugging Face's `rotate_half`).

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use serde::Deserialize;

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::formats::{StoredTensor, TensorData};
use crate::model::config::{Architecture, ModelConfig};
use crate::model::gemma3;
use crate::model::hf_config::config_from_hf;
use crate::model::names::{self, LayerTensor, TensorName};
use crate::model::source::WeightSource;

/// Larger headers are corrupt (the safetensors library's own limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Where one tensor's bytes are.
struct Entry {
    shard: usize,
    dtype: String,
    shape: Vec<usize>,
    /// From the start of the shard file.
    start: u64,
    len: u64,
}

impl Entry {
    fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
        match self.dtype.as_str() {
            "F32" => Ok(WeightFormat::F32),
            "F16" => Ok(WeightFormat::F16),
            "BF16" => Ok(WeightFormat::Bf16),
            other => Err(SproutError::Model(format!(
                "tensor {name} has dtype {other}, which sprout does not support (supported: \
                 F32, F16, BF16)"
            ))),
        }
    }

    fn rows_cols(&self, name: &str) -> Result<(usize, usize), SproutError> {
        match self.shape[..] {
            [n] => Ok((1, n)),
            [rows, cols] => Ok((rows, cols)),
            _ => Err(SproutError::Model(format!(
                "tensor {name} has shape {:?}, which is not a matrix or a vector",
                self.shape
            ))),
        }
    }
}

/// A model read from a Hugging Face directory (or from its files given as readers).
pub struct SafetensorsDir<R = File> {
    config: ModelConfig,
    shards: Vec<(String, R)>,
    tensors: HashMap<String, Entry>,
    dir: Option<PathBuf>,
}

fn read_text(path: &Path) -> Result<String, SproutError> {
    std::fs::read_to_string(path)
        .map_err(|e| SproutError::Model(format!("cannot read {}: {e}", path.display())))
}

impl SafetensorsDir<File> {
    /// Opens `dir`: reads config.json and the safetensors headers.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, SproutError> {
        let dir = dir.as_ref();
        let config = read_text(&dir.join("config.json"))?;
        let generation_path = dir.join("generation_config.json");
        let generation = match generation_path.exists() {
            true => Some(read_text(&generation_path)?),
            false => None,
        };
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<String> = if index_path.exists() {
            #[derive(Deserialize)]
            struct Index {
                weight_map: HashMap<String, String>,
            }
            let index: Index = serde_json::from_str(&read_text(&index_path)?)
                .map_err(|e| SproutError::Model(format!("{}: {e}", index_path.display())))?;
            let files: BTreeSet<String> = index.weight_map.into_values().collect();
            files.into_iter().collect()
        } else if dir.join("model.safetensors").exists() {
            vec!["model.safetensors".into()]
        } else {
            return Err(SproutError::Model(format!(
                "{} has neither model.safetensors nor model.safetensors.index.json",
                dir.display()
            )));
        };
        let mut shards = Vec::with_capacity(files.len());
        for name in files {
            if name.contains('/') || name.contains('\\') || name.contains("..") {
                return Err(SproutError::Model(format!("bad shard file name `{name}`")));
            }
            let path = dir.join(&name);
            let file = File::open(&path)
                .map_err(|e| SproutError::Model(format!("cannot open {}: {e}", path.display())))?;
            shards.push((name, file));
        }
        let mut model =
            Self::from_readers(&config, generation.as_deref(), shards).map_err(|e| match e {
                SproutError::Model(m) => SproutError::Model(format!("{}: {m}", dir.display())),
                other => other,
            })?;
        model.dir = Some(dir.to_path_buf());
        Ok(model)
    }

    /// The directory's `tokenizer.json`.
    pub fn tokenizer(&self) -> Result<crate::tokenizer::Tokenizer, SproutError> {
        let dir = self.dir.as_ref().expect("open() sets the directory");
        crate::tokenizer::Tokenizer::from_file(dir.join("tokenizer.json"))
    }

    /// The chat template: `chat_template.jinja` (where transformers 4.43 and later save
    /// it, and which transformers prefers), else `tokenizer_config.json`'s (the one named
    /// `default` when it holds several), if there is one.
    pub fn chat_template(&self) -> Result<Option<String>, SproutError> {
        let dir = self.dir.as_ref().expect("open() sets the directory");
        let jinja = dir.join("chat_template.jinja");
        if jinja.exists() {
            let named = |e: String| SproutError::Model(format!("{}: {e}", jinja.display()));
            let file = std::fs::File::open(&jinja).map_err(|e| named(e.to_string()))?;
            return crate::tokenizer::template_limits::read_source(file)
                .map(Some)
                .map_err(named);
        }
        let path = dir.join("tokenizer_config.json");
        if !path.exists() {
            return Ok(None);
        }
        let json: serde_json::Value = serde_json::from_str(&read_text(&path)?)
            .map_err(|e| SproutError::Model(format!("{}: {e}", path.display())))?;
        Ok(match json.get("chat_template") {
            Some(serde_json::Value::String(t)) => Some(t.clone()),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            _ => None,
        })
    }
}

impl<R: Read + Seek> SafetensorsDir<R> {
    /// A model from the text of `config.json` (and of `generation_config.json`, if any)
    /// and its safetensors files as `(file name, reader)`.
    pub fn from_readers(
        config_json: &str,
        generation_config_json: Option<&str>,
        mut shards: Vec<(String, R)>,
    ) -> Result<Self, SproutError> {
        let mut tensors = HashMap::new();
        for (i, (file, reader)) in shards.iter_mut().enumerate() {
            for (name, entry) in read_header(reader, i).map_err(|e| prefix(file, e))? {
                if tensors.insert(name.clone(), entry).is_some() {
                    return Err(SproutError::Model(format!(
                        "tensor {name} is in more than one safetensors file"
                    )));
                }
            }
        }
        let config = config_from_hf(config_json, generation_config_json, |n| {
            tensors.contains_key(n)
        })?;
        let arch = config.architecture;
        names::check_layer_count("num_hidden_layers", config.n_layers, |n| {
            tensors.contains_key(&hf_name(n, arch))
        })?;
        for name in TensorName::all(&config) {
            let stored = hf_name(name, arch);
            let entry = tensors.get(&stored).ok_or_else(|| {
                SproutError::Model(format!(
                    "the model has no tensor {stored} (sprout's {name})"
                ))
            })?;
            entry.format(&stored)?;
            let (rows, cols) = entry.rows_cols(&stored)?;
            name.check_shape(&config, &stored, rows, cols)?;
        }
        Ok(SafetensorsDir {
            config,
            shards,
            tensors,
            dir: None,
        })
    }
}

fn prefix(file: &str, e: SproutError) -> SproutError {
    match e {
        SproutError::Model(m) => SproutError::Model(format!("{file}: {m}")),
        other => other,
    }
}

impl<R: Read + Seek> WeightSource for SafetensorsDir<R> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
        if !self.has(name) {
            return Err(names::missing(name, "the model directory"));
        }
        let canonical = TensorName::parse(name).expect("has() parsed it");
        let stored = hf_name(canonical, self.config.architecture);
        let entry = &self.tensors[&stored];
        let format = entry.format(&stored)?;
        let (rows, cols) = entry.rows_cols(&stored)?;
        let (file, reader) = &mut self.shards[entry.shard];
        let tensor = StoredTensor {
            file,
            name: &stored,
            start: entry.start,
            len: entry.len,
            format,
            rows,
            cols,
        };
        let data = TensorData::read(reader, tensor)?;
        if self.config.architecture == Architecture::Gemma3 && canonical.is_norm() {
            // Gemma multiplies by 1 + w; the decoder reads the multiplier.
            let values: Vec<f32> = data
                .to_f32()?
                .into_iter()
                .map(|w| gemma3::HF_NORM_OFFSET + w)
                .collect();
            return Ok(TensorData::from_f32(data.rows, data.cols, &values));
        }
        Ok(data)
    }

    fn has(&self, name: &str) -> bool {
        TensorName::parse(name).is_some_and(|n| {
            n.exists_in(&self.config)
                && (self.tensors).contains_key(&hf_name(n, self.config.architecture))
        })
    }

    fn unused_tensor(&self, used: &[String]) -> Option<String> {
        let used: std::collections::HashSet<String> = used
            .iter()
            .filter_map(|n| TensorName::parse(n).map(|n| hf_name(n, self.config.architecture)))
            .collect();
        let mut unused: Vec<&String> = self.tensors.keys().filter(|k| !used.contains(*k)).collect();
        unused.sort();
        unused.first().map(|k| k.to_string())
    }

    fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
        match TensorName::parse(name).filter(|_| self.has(name)) {
            Some(n) => {
                let stored = hf_name(n, self.config.architecture);
                self.tensors[&stored].format(&stored)
            }
            None => Err(names::missing(name, "the model directory")),
        }
    }
}

/// Hugging Face's name for a canonical tensor of a model of `arch`.
pub fn hf_name(name: TensorName, arch: Architecture) -> String {
    if let (TensorName::Layer(i, t), Architecture::Gemma3) = (name, arch)
        && let Some(suffix) = gemma3::hf_layer_suffix(t)
    {
        return format!("model.layers.{i}.{suffix}");
    }
    match name {
        TensorName::Embed => "model.embed_tokens.weight".into(),
        TensorName::FinalNorm => "model.norm.weight".into(),
        TensorName::LmHead => "lm_head.weight".into(),
        TensorName::Layer(i, t) => {
            let suffix = match t {
                LayerTensor::AttnNorm => "input_layernorm.weight",
                LayerTensor::Q => "self_attn.q_proj.weight",
                LayerTensor::K => "self_attn.k_proj.weight",
                LayerTensor::V => "self_attn.v_proj.weight",
                LayerTensor::QBias => "self_attn.q_proj.bias",
                LayerTensor::KBias => "self_attn.k_proj.bias",
                LayerTensor::VBias => "self_attn.v_proj.bias",
                LayerTensor::QNorm => "self_attn.q_norm.weight",
                LayerTensor::KNorm => "self_attn.k_norm.weight",
                LayerTensor::O => "self_attn.o_proj.weight",
                LayerTensor::MlpNorm => "post_attention_layernorm.weight",
                LayerTensor::Gate => "mlp.gate_proj.weight",
                LayerTensor::Up => "mlp.up_proj.weight",
                LayerTensor::Down => "mlp.down_proj.weight",
                LayerTensor::PostAttnNorm => "post_attention_layernorm.weight",
                LayerTensor::PostMlpNorm => "post_feedforward_layernorm.weight",
            };
            format!("model.layers.{i}.{suffix}")
        }
    }
}

/// Reads a safetensors header through the `safetensors` crate's own validation (offsets
/// contiguous from 0, so no two tensors overlap; element counts and byte sizes computed
/// with checked arithmetic and matched to each range), then checks that the data the
/// header describes lies inside the file.
fn read_header<R: Read + Seek>(
    reader: &mut R,
    shard: usize,
) -> Result<Vec<(String, Entry)>, SproutError> {
    let file_len = reader.seek(SeekFrom::End(0))?;
    reader.seek(SeekFrom::Start(0))?;
    let bad = |m: String| SproutError::Model(m);
    if file_len < 8 {
        return Err(bad(format!(
            "not a safetensors file: only {file_len} bytes"
        )));
    }
    let mut n = [0u8; 8];
    reader.read_exact(&mut n)?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_BYTES || 8 + n > file_len {
        return Err(bad(format!(
            "not a safetensors file, or truncated: its header would be {n} bytes of a \
             {file_len}-byte file"
        )));
    }
    let mut header = vec![0u8; n as usize];
    reader.read_exact(&mut header)?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| bad(format!("the safetensors header is invalid: {e}")))?;
    let data_start = 8 + n;
    let data_len = metadata.data_len() as u64;
    if data_start
        .checked_add(data_len)
        .is_none_or(|end| end > file_len)
    {
        return Err(bad(format!(
            "truncated: its header places {data_len} bytes of tensors after byte \
             {data_start}, but the file has {file_len} bytes"
        )));
    }
    let entries = metadata
        .offset_keys()
        .into_iter()
        .filter_map(|name| {
            let info = metadata.info(&name)?;
            let (begin, end) = info.data_offsets;
            let entry = Entry {
                shard,
                dtype: info.dtype.to_string(),
                shape: info.shape.clone(),
                start: data_start + begin as u64,
                len: (end - begin) as u64,
            };
            Some((name, entry))
        })
        .collect();
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::gpu::kernels::rope::RopeLayout;

    /// A safetensors file of `(name, dtype, shape)` tensors filled with zeros.
    fn safetensors(tensors: &[(&str, &str, Vec<usize>)]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut offset = 0;
        for (name, dtype, shape) in tensors {
            let elem = match *dtype {
                "F32" => 4,
                "I8" => 1,
                _ => 2,
            };
            let size = shape.iter().product::<usize>() * elem;
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}),
            );
            offset += size;
        }
        let header = serde_json::to_vec(&header).unwrap();
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend(header);
        out.resize(out.len() + offset, 0);
        out
    }

    const CONFIG: &str = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
        "intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
        "vocab_size": 10, "bos_token_id": 1, "eos_token_id": [2, 3], "hidden_act": "silu"}"#;

    fn llama_tensors(dtype: &'static str) -> Vec<(&'static str, &'static str, Vec<usize>)> {
        vec![
            ("model.embed_tokens.weight", dtype, vec![10, 8]),
            ("model.layers.0.input_layernorm.weight", "F32", vec![8]),
            ("model.layers.0.self_attn.q_proj.weight", dtype, vec![8, 8]),
            ("model.layers.0.self_attn.k_proj.weight", dtype, vec![4, 8]),
            ("model.layers.0.self_attn.v_proj.weight", dtype, vec![4, 8]),
            ("model.layers.0.self_attn.o_proj.weight", dtype, vec![8, 8]),
            (
                "model.layers.0.post_attention_layernorm.weight",
                "F32",
                vec![8],
            ),
            ("model.layers.0.mlp.gate_proj.weight", dtype, vec![12, 8]),
            ("model.layers.0.mlp.up_proj.weight", dtype, vec![12, 8]),
            ("model.layers.0.mlp.down_proj.weight", dtype, vec![8, 12]),
            ("model.norm.weight", "F32", vec![8]),
        ]
    }

    fn open(
        config: &str,
        files: Vec<Vec<u8>>,
    ) -> Result<SafetensorsDir<Cursor<Vec<u8>>>, SproutError> {
        let shards = files
            .into_iter()
            .enumerate()
            .map(|(i, f)| (format!("shard{i}"), Cursor::new(f)))
            .collect();
        SafetensorsDir::from_readers(config, Some(r#"{"eos_token_id": [3, 4]}"#), shards)
    }

    #[test]
    fn a_tied_llama_in_two_shards() {
        let mut tensors = llama_tensors("BF16");
        let second = tensors.split_off(6);
        let mut m = open(CONFIG, vec![safetensors(&tensors), safetensors(&second)]).unwrap();
        let c = m.config().clone();
        assert_eq!((c.head_dim, c.n_kv_heads, c.rope_theta), (4, 1, 10000.0));
        assert_eq!(c.rope_layout, RopeLayout::HalfSplit);
        assert!(c.tied_embeddings && !m.has("lm_head"));
        assert_eq!(c.bos_token_id, Some(1));
        assert_eq!(c.eos_token_ids, vec![2, 3, 4]);
        for name in TensorName::all(&c) {
            let t = m.read(&name.to_string()).unwrap();
            assert_eq!((t.rows, t.cols), name.shape(&c));
        }
        assert_eq!(m.read("layers.0.down").unwrap().format, WeightFormat::Bf16);
    }

    #[test]
    fn lm_head_unties_unless_config_ties() {
        let mut tensors = llama_tensors("F16");
        tensors.push(("lm_head.weight", "F16", vec![10, 8]));
        let m = open(CONFIG, vec![safetensors(&tensors)]).unwrap();
        assert!(!m.config().tied_embeddings && m.has("lm_head"));
        let tied = CONFIG.replace("\"silu\"", "\"silu\", \"tie_word_embeddings\": true");
        let m = open(&tied, vec![safetensors(&tensors)]).unwrap();
        assert!(m.config().tied_embeddings && !m.has("lm_head"));
    }

    fn err(config: &str, tensors: &[(&str, &str, Vec<usize>)]) -> String {
        match open(config, vec![safetensors(tensors)]) {
            Ok(_) => panic!("a bad model opened"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_directories_are_named() {
        let good = llama_tensors("F32");
        let e = err(
            &CONFIG.replace("LlamaForCausalLM", "GPT2LMHeadModel"),
            &good,
        );
        assert!(e.contains("GPT2LMHeadModel"), "{e}");
        let mistral = CONFIG.replace("LlamaForCausalLM", "MistralForCausalLM");
        let e = err(
            &mistral.replace("\"silu\"", "\"silu\", \"sliding_window\": 32"),
            &good,
        );
        assert!(e.contains("sliding"), "{e}");
        assert!(
            open(
                &mistral.replace("\"silu\"", "\"silu\", \"sliding_window\": null"),
                vec![safetensors(&good)]
            )
            .is_ok()
        );
        let e = err(
            &CONFIG.replace(
                "\"silu\"",
                "\"silu\", \"rope_scaling\": {\"rope_type\": \"llama3\"}",
            ),
            &good,
        );
        assert!(e.contains("llama3"), "{e}");
        let e = err(&CONFIG.replace("\"hidden_size\": 8,", ""), &good);
        assert!(e.contains("hidden_size"), "{e}");
        let e = err(CONFIG, &good[1..]);
        assert!(e.contains("model.embed_tokens.weight"), "{e}");
        let mut wrong = good.clone();
        wrong[2].2 = vec![4, 8];
        let e = err(CONFIG, &wrong);
        assert!(e.contains("q_proj") && e.contains("8 x 8"), "{e}");
        let mut int8 = good.clone();
        int8[3].1 = "I8";
        int8[3].2 = vec![4, 16];
        let e = err(CONFIG, &int8);
        assert!(e.contains("dtype I8"), "{e}");
        let qwen = CONFIG.replace("LlamaForCausalLM", "Qwen2ForCausalLM");
        let e = err(&qwen, &good);
        assert!(e.contains("q_proj.bias"), "{e}");
    }

    #[test]
    fn truncated_files_are_errors() {
        let file = safetensors(&llama_tensors("F32"));
        for len in [0, 7, 8, 100, file.len() - 1] {
            let r = open(CONFIG, vec![file[..len].to_vec()]);
            let e = r.err().expect("truncated file opened").to_string();
            assert!(e.contains("shard0"), "{e}");
        }
    }
}
