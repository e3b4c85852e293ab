//! Opening a model by path (native): a `.gguf` file or a Hugging Face directory, or the
//! default model when no path is given. Gives the weight source, the tokenizer and a
//! description of the model for records.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::SproutError;
use crate::model::config::Architecture;
use crate::model::gguf_model::GgufModel;
use crate::model::safetensors_dir::SafetensorsDir;
use crate::model::source::WeightSource;
use crate::model::tokenizer::Tokenizer;

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

/// Opens `path`, or the default model (fetched and cached on first use) when `None`.
pub fn open(path: Option<&Path>) -> Result<OpenedModel, SproutError> {
    let path: PathBuf = match path {
        Some(p) => p.to_path_buf(),
        None => crate::model::default_model::path()?,
    };
    if !path.exists() {
        return Err(SproutError::Model(format!(
            "{}: no such file or directory (--model takes a .gguf file or a Hugging Face \
             directory with config.json)",
            path.display()
        )));
    }
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
    let c = source.config();
    let info = ModelInfo {
        path: path.display().to_string(),
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        architecture: c.architecture,
        n_layers: c.n_layers,
        hidden_size: c.hidden_size,
        vocab_size: c.vocab_size,
    };
    Ok(OpenedModel {
        source,
        tokenizer,
        info,
        chat_template,
    })
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
        Ok(crate::model::hex(&hasher.finalize()))
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
    Ok(crate::model::hex(&Sha256::digest(listing.as_bytes())))
}
