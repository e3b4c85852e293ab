//! The one way a command opens what it runs on: the GPU, the model's weights uploaded to
//! it (with a progress bar on a terminal), the adapter's tuned kernel choices put in force
//! when `sprout tune` has written them (`gpu::tune_file`), and the tokenizer.
//!
//! Invariant: every command that runs the model goes through [`open`], so they all load,
//! tune and report the same way.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use sprout::engine::{Engine, EngineConfig};
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;
use sprout::model::lora::LoraAdapter;
use sprout::model::lora::device::DeviceLora;
use sprout::model::open::ModelInfo;
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::ChatTemplate;
use sprout::trajectory::{LoraProvenance, Provenance};

use crate::cli::cli_args::{LoadedModel, LoraArg};
use crate::cli::progress;

/// Which kernel choices the loaded model runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// The adapter's tune file's, when there is one; else the untuned defaults.
    Tuned,
    /// The untuned defaults (what `sprout tune` measures against).
    Untuned,
}

/// A model loaded on a GPU, ready to run.
pub struct Opened {
    pub gpu: Arc<Gpu>,
    pub decoder: Decoder,
    /// `None` for dummy weights: there is no vocabulary.
    pub tokenizer: Option<Tokenizer>,
    /// The model's Jinja chat template, if it ships one.
    pub chat_template: Option<String>,
    pub info: ModelInfo,
}

/// Opens the GPU for `backend` and loads `model` onto it with `kernels`.
pub fn open(backend: BackendChoice, model: LoadedModel, kernels: Kernels) -> Result<Opened> {
    let gpu = pollster::block_on(Gpu::open(backend))?;
    open_on(gpu, model, kernels)
}

/// Loads `model` with `kernels` onto a GPU already opened (one chosen adapter of several,
/// as `sprout check` runs on each in turn).
pub fn open_on(gpu: Arc<Gpu>, model: LoadedModel, kernels: Kernels) -> Result<Opened> {
    let LoadedModel {
        mut source,
        tokenizer,
        chat_template,
        info,
    } = model;
    let bar = progress::bar("loading weights {bar:30} {pos}/{len} tensors", 0);
    let decoder = Decoder::load(gpu.clone(), source.as_mut(), &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if kernels == Kernels::Tuned {
        decoder.set_choices(sprout::gpu::tune_file::choices(&gpu)?);
    }
    Ok(Opened {
        gpu,
        decoder,
        tokenizer,
        chat_template,
        info,
    })
}

impl Opened {
    /// The chat template to render messages with: `source` when given, else the model's
    /// own; `None` when there is neither. Its `bos_token` and `eos_token` are the model's.
    pub fn chat_template(
        &self,
        tokenizer: &Tokenizer,
        source: Option<&str>,
    ) -> Result<Option<ChatTemplate>> {
        let Some(source) = source.or(self.chat_template.as_deref()) else {
            return Ok(None);
        };
        let tokens = self.decoder.config.template_tokens();
        Ok(Some(ChatTemplate::for_model(source, tokenizer, tokens)?))
    }

    /// The tokenizer, or an error saying that dummy weights have none.
    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            anyhow!(
                "{} has no tokenizer (dummy weights): give token ids",
                self.info.name
            )
        })
    }

    /// What a record says made it: this build, the model file (hashed), its weights
    /// version and stored formats, its tokenizer, and the adapter.
    pub fn provenance(&self, weights_version: u64) -> Result<Provenance> {
        let model_path = std::path::PathBuf::from(&self.info.path);
        let (sprout_version, git_commit) = Provenance::build();
        let adapter = &self.gpu.adapter;
        Ok(Provenance {
            sprout_version,
            git_commit,
            model_file: self.info.name.clone(),
            model_sha256: sprout::model::open::model_sha256(&model_path)
                .with_context(|| format!("hashing {}", model_path.display()))?,
            weights_version,
            tokenizer_sha256: self.tokenizer()?.sha256()?,
            weight_format: self.decoder.weight_format(),
            backend: adapter.backend.clone(),
            adapter: adapter.name.clone(),
            driver: format!("{} {}", adapter.driver, adapter.driver_info)
                .trim()
                .to_string(),
            lora: self.lora(),
        })
    }

    /// The LoRA adapter in force, as records name it; `None` without one.
    pub fn lora(&self) -> Option<LoraProvenance> {
        self.decoder.adapter().map(|a| LoraProvenance {
            name: a.name.clone(),
            sha256: a.digest.clone(),
            version: a.version,
        })
    }

    /// Reads the PEFT adapter `--lora` names, if any, checks it against the model and the
    /// adapter's limits, and puts it in force (labelled version 1): every request the
    /// command makes then runs with it.
    pub fn apply_lora(&self, lora: &LoraArg) -> Result<()> {
        let Some(dir) = &lora.lora else {
            return Ok(());
        };
        let config = &self.decoder.config;
        let adapter = LoraAdapter::read_dir(dir, config, lora.max_lora_rank)
            .with_context(|| format!("reading the LoRA adapter {}", dir.display()))?;
        let name = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
        let device = DeviceLora::upload(&self.gpu, &adapter, config, &name, 1)?;
        self.decoder.set_adapter(Some(device));
        Ok(())
    }

    /// An engine over the loaded model (decoding stop strings with its tokenizer, when it
    /// has one).
    pub fn engine(&self, config: &EngineConfig) -> Result<Engine<'_>> {
        let engine = Engine::new(&self.decoder, config)?;
        Ok(match &self.tokenizer {
            Some(tokenizer) => engine.with_tokenizer(tokenizer),
            None => engine,
        })
    }

    /// One line saying which kernel choices are in force.
    pub fn describe_kernels(&self) -> String {
        match self.decoder.tuned_from() {
            Some(path) => format!("kernels tuned by {path}"),
            None => format!(
                "kernels: untuned {} defaults (run `sprout tune` to measure this adapter)",
                if self.gpu.cpu_shaped_defaults() {
                    "CPU-shaped"
                } else {
                    "GPU-shaped"
                }
            ),
        }
    }
}
