//! The engine's own OS thread: it owns the GPU, the decoder, the tokenizer and the one
//! [`Engine`] that every HTTP request's prompts join (one continuous batch).
//!
//! The HTTP side talks to it only through [`EngineHandle`]: a [`Command`] channel in, and
//! per request an [`Event`] channel out. The loop itself is `engine_loop`.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow};
use sprout::engine::EngineConfig;
use sprout::formats::WeightFormat;
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::config::ModelConfig;
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::ChatTemplate;

use tokio::sync::oneshot;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{LoraArg, ModelArg};
use crate::cli::serve::adapters::ServedLora;
use crate::cli::serve::engine_loop::EngineLoop;
use crate::cli::serve::error::ApiError;
use crate::cli::serve::messages::Command;
use crate::cli::serve::metrics::Metrics;
use crate::cli::serve::sleep_state::{EngineStatus, SleepState};

/// What the HTTP side needs to know about the loaded model.
pub struct ModelFacts {
    /// `--quantize`: the format an update's float matrices are quantized to by default.
    pub quantize: Option<WeightFormat>,
    /// The GPU the model runs on (an update's weights are uploaded to it off the engine
    /// thread) and the model's config (an update must match it).
    pub gpu: Arc<Gpu>,
    pub config: ModelConfig,
    pub tokenizer: Tokenizer,
    /// The template chat messages are rendered with (`None`: the chat route refuses).
    pub chat_template: Option<ChatTemplate>,
    pub vocab_size: usize,
    pub eos_token_ids: Vec<u32>,
    /// The model's own context length (positions).
    pub max_positions: usize,
    pub kv_blocks: usize,
    /// The model file's (or directory's) name and path.
    pub model_name: String,
    pub model_path: String,
    /// The LoRA adapter `--lora` put in force at start, if any.
    pub lora: Option<ServedLora>,
}

/// The HTTP side's end of the engine thread.
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    /// What the engine thread measures; the HTTP side only reads it.
    pub metrics: Arc<Metrics>,
    /// What sleeps, where the weights are, the device memory held: written by the engine
    /// thread after each turn, read by the HTTP side.
    pub status: Arc<Mutex<EngineStatus>>,
}

impl EngineHandle {
    /// The engine thread's state as of its last turn.
    pub fn status(&self) -> EngineStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl EngineHandle {
    /// Sends a command built around a reply channel and waits for the reply; a 503 once
    /// the engine thread has ended (or dropped the reply unanswered).
    pub async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.send(command(reply))
            .map_err(|_| ApiError::engine_stopped())?;
        answer.await.map_err(|_| ApiError::engine_stopped())
    }

    /// Sends `command`; an error once the engine thread has ended.
    pub fn send(&self, command: Command) -> Result<(), String> {
        self.commands
            .send(command)
            .map_err(|_| "the engine has stopped".to_string())
    }
}

/// What the server's operator chose besides the model.
pub struct Labels {
    /// The name the metrics are labelled with (default: the model's name).
    pub served_name: Option<String>,
    /// A chat template's source, in place of the model's own.
    pub chat_template: Option<String>,
    /// `--quantize`: the format updates are quantized to unless they ask otherwise.
    pub quantize: Option<WeightFormat>,
    /// `--queue-while-asleep`: requests that arrive while asleep wait (else: 503).
    pub queue_while_asleep: bool,
    /// `--lora`: an adapter in force from the start (under its directory's name, version
    /// 1).
    pub lora: LoraArg,
}

/// Starts the engine thread: it opens the GPU and loads `model` there (the engine borrows
/// the decoder, so both live on that thread). Returns once the model is loaded.
pub fn start(
    backend: BackendChoice,
    model: ModelArg,
    config: EngineConfig,
    labels: Labels,
) -> Result<(EngineHandle, ModelFacts, std::thread::JoinHandle<()>)> {
    let (commands, receiver) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("sprout-engine".into())
        .spawn(move || run(backend, model, config, labels, receiver, ready_tx))?;
    match ready_rx.recv() {
        Ok(Ok((facts, metrics, status))) => Ok((
            EngineHandle {
                commands,
                metrics,
                status,
            },
            facts,
            thread,
        )),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(anyhow!("the engine thread ended while loading the model"))
        }
    }
}

/// What the engine thread hands the HTTP side once the model is loaded.
type Ready = (ModelFacts, Arc<Metrics>, Arc<Mutex<EngineStatus>>);

fn run(
    backend: BackendChoice,
    model: ModelArg,
    config: EngineConfig,
    labels: Labels,
    commands: mpsc::Receiver<Command>,
    ready: mpsc::Sender<Result<Ready>>,
) {
    let opened = model
        .open()
        .and_then(|model| bootstrap::open(backend, model, Kernels::Tuned));
    let opened = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // Before the engine exists: it takes the adapter in force from the decoder.
    if let Err(e) = opened.apply_lora(&labels.lora) {
        let _ = ready.send(Err(e));
        return;
    }
    let engine = opened
        .tokenizer()
        .and_then(|t| Ok((t, opened.engine(&config)?)));
    let (tokenizer, mut engine) = match engine {
        Ok(pair) => pair,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // With --speculative, what earlier requests generated is kept to draft from when a
    // prompt comes again (a GRPO epoch), until the weights change.
    engine.keep_draft_corpus(config.speculative != sprout::spec::SpecMode::Off);
    let chat_template = match opened.chat_template(tokenizer, labels.chat_template.as_deref()) {
        Ok(template) => template,
        Err(e) => {
            let _ = ready.send(Err(e.context("the chat template")));
            return;
        }
    };
    let info = &opened.info;
    tracing::info!(
        "{} on {} ({}); {}",
        info.name,
        opened.gpu.adapter.name,
        opened.gpu.adapter.backend,
        opened.describe_kernels()
    );
    let c = &opened.decoder.config;
    let facts = ModelFacts {
        quantize: labels.quantize,
        gpu: opened.gpu.clone(),
        config: c.clone(),
        tokenizer: tokenizer.clone(),
        chat_template,
        vocab_size: c.vocab_size,
        eos_token_ids: c.eos_token_ids.clone(),
        max_positions: opened.decoder.max_positions(),
        kv_blocks: engine.num_blocks(),
        model_name: info.name.clone(),
        model_path: info.path.clone(),
        lora: opened.decoder.adapter().map(|a| ServedLora {
            name: a.name.clone(),
            path: labels
                .lora
                .lora
                .as_ref()
                .map(|dir| dir.display().to_string())
                .unwrap_or_default(),
            version: a.version,
        }),
    };
    let name = labels
        .served_name
        .unwrap_or_else(|| facts.model_name.clone());
    let metrics = match Metrics::new(&name, facts.kv_blocks) {
        Ok(metrics) => Arc::new(metrics),
        Err(e) => {
            let _ = ready.send(Err(anyhow!("setting up the metrics: {e}")));
            return;
        }
    };
    metrics.set_lora(facts.lora.as_ref().map(|l| l.version));
    let status = Arc::new(Mutex::new(EngineStatus {
        sleep: SleepState::default(),
        weights: opened.decoder.residency(),
        memory: engine.device_memory(),
    }));
    if ready
        .send(Ok((facts, metrics.clone(), status.clone())))
        .is_err()
    {
        return;
    }
    EngineLoop::new(engine, metrics, status, labels.queue_while_asleep).run(commands);
}
