//! Opening a model by path (native): a `.gguf` file or a Hugging Face directory, a named
//! model ([`crate::model::named`], fetched and cached on first use), or the default model
//! when no path is given, its float matrices quantized on load if asked.
//! Gives the weight source, the tokenizer and a description of the model for records. Also
//! the config that dummy (random) weights are drawn for: a built-in name or a Hugging Face
//! `config.json`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::dummy::{BUILTIN_CONFIGS, DEFAULT_DUMMY_MODEL, DummyWeights, builtin_config};
use crate::model::gguf_model::GgufModel;
use crate::model::quantize_on_load::QuantizeOnLoad;
use crate::model::safetensors_dir::SafetensorsDir;
use crate::model::source::WeightSource;
use crate::tokenizer::Tokenizer;

/// What a record says about the model it came from.
#[derive(Clone, Debug, Serialize)]
pub struct ModelInfo {
    pub path: String,
    pub name: String,
    pub architecture: Architecture,
    pub n_layers: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
}

pub struct OpenedModel {
    pub source: Box<dyn WeightSource>,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
    /// The model's Jinja chat template, if it ships one.
    pub chat_template: Option<String>,
}

/// Opens `path` (a file, a directory or a model name, see
/// [`crate::model::named::resolve`]), or the default model when `None`.
pub fn open(path: Option<&Path>) -> Result<OpenedModel, SproutError> {
    open_quantized(path, None)
}

/// Opens `path` as [`open`] does; with `quantize`, its float matrices are quantized to
/// that format as they are read ([`QuantizeOnLoad`], which refuses a quantized file).
pub fn open_quantized(
    path: Option<&Path>,
    quantize: Option<WeightFormat>,
) -> Result<OpenedModel, SproutError> {
    let path: PathBuf = match path {
        Some(p) => crate::model::named::resolve(p)?,
        None => crate::model::default_model::path()?,
    };
    let (source, tokenizer, chat_template): (Box<dyn WeightSource>, Tokenizer, _) = if path.is_dir()
    {
        let dir = SafetensorsDir::open(&path)?;
        let tokenizer = dir.tokenizer()?;
        let template = dir.chat_template()?;
        (Box::new(dir), tokenizer, template)
    } else {
        let model = GgufModel::open(&path)?;
        let tokenizer = model.tokenizer()?;
        let template = model.chat_template().map(str::to_string);
        (Box::new(model), tokenizer, template)
    };
    let source: Box<dyn WeightSource> = match quantize {
        None => source,
        Some(format) => Box::new(QuantizeOnLoad::new(source, format).map_err(|e| match e {
            SproutError::Model(m) => SproutError::Model(format!("{}: {m}", path.display())),
            other => other,
        })?),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let info = ModelInfo::of(source.config(), path.display().to_string(), name);
    Ok(OpenedModel {
        source,
        tokenizer,
        info,
        chat_template,
    })
}

impl ModelInfo {
    fn of(c: &ModelConfig, path: String, name: String) -> ModelInfo {
        ModelInfo {
            path,
            name,
            architecture: c.architecture,
            n_layers: c.n_layers,
            hidden_size: c.hidden_size,
            vocab_size: c.vocab_size,
        }
    }
}

/// The config that `--load-format dummy` draws weights for: a built-in name (see
/// [`BUILTIN_CONFIGS`]), a Hugging Face `config.json`, or a directory holding one (with
/// its `generation_config.json`'s eos ids when there is one). Only the config is read.
pub fn dummy_config(model: &str) -> Result<ModelConfig, SproutError> {
    if BUILTIN_CONFIGS.contains(&model) {
        return builtin_config(model);
    }
    let path = Path::new(model);
    let file = match path.is_dir() {
        true => path.join("config.json"),
        false => path.to_path_buf(),
    };
    if !file.is_file() {
        return Err(SproutError::Model(format!(
            "`{model}` is neither a built-in model config ({}) nor a Hugging Face config.json \
             (or a directory with one)",
            BUILTIN_CONFIGS.join(", ")
        )));
    }
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map_err(|e| SproutError::Model(format!("cannot read {}: {e}", p.display())))
    };
    let generation_path = file.with_file_name("generation_config.json");
    let generation = match generation_path.is_file() {
        true => Some(read(&generation_path)?),
        false => None,
    };
    // No tensors to look at: embeddings are tied exactly when the config says so.
    crate::model::hf_config::config_from_hf(&read(&file)?, generation.as_deref(), |_| true).map_err(
        |e| match e {
            SproutError::Model(m) => SproutError::Model(format!("{}: {m}", file.display())),
            other => other,
        },
    )
}

/// Dummy weights in `format` drawn from `seed` for `model` (see [`dummy_config`]; the
/// default is [`DEFAULT_DUMMY_MODEL`]), and a description that names them
/// `dummy:{model}:{format}`.
pub fn open_dummy(
    model: Option<&str>,
    format: WeightFormat,
    seed: u64,
) -> Result<(DummyWeights, ModelInfo), SproutError> {
    let model = model.unwrap_or(DEFAULT_DUMMY_MODEL);
    let weights = DummyWeights::new(dummy_config(model)?, format, seed)?;
    let name = format!("dummy:{model}:{format}");
    let info = ModelInfo::of(weights.config(), model.to_string(), name);
    Ok((weights, info))
}

/// SHA-256 (hex) of a model: of the file itself for a `.gguf`; for a directory, of the
/// lines `<sha256>  <name>` of its regular files in name order (as `sha256sum` prints
/// them), so any changed, added or removed file changes it.
pub fn model_sha256(path: &Path) -> Result<String, SproutError> {
    use sha2::{Digest, Sha256};
    fn file_hash(path: &Path) -> Result<String, SproutError> {
        let mut file = std::fs::File::open(path)?;
        let mut hasher = Sha256::new();
        std::io::copy(&mut file, &mut hasher)?;
        Ok(crate::formats::hex(&hasher.finalize()))
    }
    if !path.is_dir() {
        return file_hash(path);
    }
    let mut names: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    let mut listing = String::new();
    for p in &names {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        listing.push_str(&format!("{}  {name}\n", file_hash(p)?));
    }
    Ok(crate::formats::hex(&Sha256::digest(listing.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    #[test]
    fn dummy_configs_come_from_names_config_files_and_directories() {
        let (weights, info) = open_dummy(None, WeightFormat::Q4_1, 0).unwrap();
        assert_eq!(info.name, "dummy:smollm2-135m:q4_1");
        assert_eq!(weights.config().hidden_size, 576);
        let file = fixture("tiny-llama/config.json");
        let from_file = dummy_config(file.to_str().unwrap()).unwrap();
        let from_dir = dummy_config(fixture("tiny-llama").to_str().unwrap()).unwrap();
        let real = SafetensorsDir::open(fixture("tiny-llama")).unwrap();
        for c in [&from_file, &from_dir] {
            assert_eq!(
                (c.hidden_size, c.vocab_size, c.n_kv_heads, c.head_dim),
                (64, 384, 2, 16)
            );
            assert_eq!(c.tied_embeddings, real.config().tied_embeddings);
            assert_eq!(c.eos_token_ids, real.config().eos_token_ids);
        }
        let tied = dummy_config(fixture("tiny-llama-tied").to_str().unwrap()).unwrap();
        assert!(tied.tied_embeddings);
        let (_, info) = open_dummy(file.to_str(), WeightFormat::F16, 0).unwrap();
        assert_eq!(info.name, format!("dummy:{}:f16", file.display()));
    }

    #[test]
    fn an_unknown_dummy_model_lists_the_built_in_ones() {
        let err = open_dummy(Some("no-such-model"), WeightFormat::Q4_1, 0)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("no-such-model") && err.contains("config.json"),
            "{err}"
        );
        for name in BUILTIN_CONFIGS {
            assert!(err.contains(name), "{err}");
        }
        let not_json = fixture("tiny-llama/model.safetensors");
        let err = dummy_config(not_json.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.safetensors"), "{err}");
    }
}
