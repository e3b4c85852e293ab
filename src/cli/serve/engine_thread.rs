//! The engine's own OS thread: it owns the GPU, the decoder, the tokenizer and the one
//! [`Engine`] that every HTTP request's prompts join (one continuous batch).
//!
//! The HTTP side talks to it only through [`EngineHandle`]: a [`Command`] channel in, and
//! per request an [`Event`] channel out. The loop takes every pending command, runs one
//! engine step while there is work, routes what the step drew and finished to the
//! requests' channels, and blocks on the command channel when it is idle.
//!
//! Invariants: an engine request is in `live` from the moment it is added until its last
//! sample has been sent (or it is aborted); a request's events stop after its last
//! `Finished`. Commands are applied between steps only, as `Engine::abort` requires.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use anyhow::{Result, anyhow};
use sprout::engine::{Engine, EngineConfig};
use sprout::gpu::BackendChoice;
use sprout::sched::{FinishedSample, Request, RequestId};
use sprout::tokenizer::Tokenizer;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::ModelArg;

/// What the HTTP side asks of the engine thread.
pub enum Command {
    /// Queue `requests` (all or none); their events go to `events`. `stream_tokens`: also
    /// send each drawn token as it comes (not only the finished samples).
    Add {
        requests: Vec<Request>,
        stream_tokens: bool,
        events: tmpsc::UnboundedSender<Event>,
        /// Per request, the prompt tokens the prefix cache held when it arrived; or why
        /// the requests could not be queued.
        reply: oneshot::Sender<Result<Vec<usize>, String>>,
    },
    /// Stop the requests with these indexes (their client went away) and free their blocks.
    Abort { indexes: Vec<u32> },
    /// Abort everything, send each client its aborted samples, and end the thread.
    Shutdown,
}

/// What the engine thread tells one HTTP request.
#[derive(Debug)]
pub enum Event {
    /// A token drawn for a sample that has not finished yet (only with `stream_tokens`).
    Token {
        request_index: u32,
        sample_index: u32,
        token: u32,
    },
    Finished(FinishedSample),
    /// The engine failed; the request's unfinished samples will not come.
    Failed(String),
}

/// What the HTTP side needs to know about the loaded model.
pub struct ModelFacts {
    pub tokenizer: Tokenizer,
    pub vocab_size: usize,
    pub eos_token_ids: Vec<u32>,
    /// The model's own context length (positions).
    pub max_positions: usize,
    pub weights_version: u64,
    pub kv_blocks: usize,
    /// The model file's (or directory's) name and path.
    pub model_name: String,
    pub model_path: String,
}

/// Counters the engine thread publishes for `/health`.
#[derive(Default)]
pub struct EngineGauges {
    pub kv_blocks_in_use: AtomicUsize,
    pub requests_running: AtomicUsize,
    pub aborted_requests: AtomicUsize,
    pub generated_tokens: AtomicUsize,
}

/// The HTTP side's end of the engine thread.
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    pub gauges: Arc<EngineGauges>,
}

impl EngineHandle {
    /// Sends `command`; an error once the engine thread has ended.
    pub fn send(&self, command: Command) -> Result<(), String> {
        self.commands
            .send(command)
            .map_err(|_| "the engine has stopped".to_string())
    }
}

/// Starts the engine thread: it opens the GPU and loads `model` there (the engine borrows
/// the decoder, so both live on that thread). Returns once the model is loaded.
pub fn start(
    backend: BackendChoice,
    model: ModelArg,
    config: EngineConfig,
) -> Result<(EngineHandle, ModelFacts, std::thread::JoinHandle<()>)> {
    let (commands, receiver) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let gauges = Arc::new(EngineGauges::default());
    let thread_gauges = gauges.clone();
    let thread = std::thread::Builder::new()
        .name("sprout-engine".into())
        .spawn(move || run(backend, model, config, receiver, ready_tx, thread_gauges))?;
    match ready_rx.recv() {
        Ok(Ok(facts)) => Ok((EngineHandle { commands, gauges }, facts, thread)),
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

/// One live engine request.
struct Live {
    id: RequestId,
    events: tmpsc::UnboundedSender<Event>,
    stream_tokens: bool,
}

fn run(
    backend: BackendChoice,
    model: ModelArg,
    config: EngineConfig,
    commands: mpsc::Receiver<Command>,
    ready: mpsc::Sender<Result<ModelFacts>>,
    gauges: Arc<EngineGauges>,
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
        tokenizer: tokenizer.clone(),
        vocab_size: c.vocab_size,
        eos_token_ids: c.eos_token_ids.clone(),
        max_positions: opened.decoder.max_positions(),
        weights_version: config.weights_version,
        kv_blocks: engine.num_blocks(),
        model_name: info.name.clone(),
        model_path: info.path.clone(),
    };
    if ready.send(Ok(facts)).is_err() {
        return;
    }
    let mut live: HashMap<u32, Live> = HashMap::new();
    loop {
        // Block for the next command only when there is nothing to step.
        let first = if engine.has_work() {
            match commands.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some(Command::Shutdown),
            }
        } else {
            Some(commands.recv().unwrap_or(Command::Shutdown))
        };
        let mut shutdown = false;
        for command in first
            .into_iter()
            .chain(std::iter::from_fn(|| commands.try_recv().ok()))
        {
            match command {
                Command::Add {
                    requests,
                    stream_tokens,
                    events,
                    reply,
                } => {
                    let added = add(&mut engine, &mut live, requests, stream_tokens, events);
                    let _ = reply.send(added);
                }
                Command::Abort { indexes } => {
                    for index in indexes {
                        if let Some(l) = live.remove(&index) {
                            // The client is gone: its samples go nowhere.
                            let _ = engine.abort(l.id);
                            gauges.aborted_requests.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Command::Shutdown => shutdown = true,
            }
        }
        if shutdown {
            for (_, l) in live.drain() {
                for sample in engine.abort(l.id).unwrap_or_default() {
                    let _ = l.events.send(Event::Finished(sample));
                }
            }
            publish(&engine, &live, &gauges);
            return;
        }
        if engine.has_work() {
            match pollster::block_on(engine.step()) {
                Ok(step) => {
                    for d in step.drawn {
                        let Some(l) = live.get(&d.request_index) else {
                            continue;
                        };
                        // A draw planned ahead for a sample that has finished since is
                        // not part of it.
                        let open = engine.scheduler().generated(l.id, d.sample_index).is_some()
                            || step
                                .finished
                                .iter()
                                .any(|s| s.request == l.id && s.sample_index == d.sample_index);
                        if l.stream_tokens && open {
                            let _ = l.events.send(Event::Token {
                                request_index: d.request_index,
                                sample_index: d.sample_index,
                                token: d.token,
                            });
                        }
                    }
                    for sample in step.finished {
                        if let Some(l) = live.get(&sample.request_index) {
                            let _ = l.events.send(Event::Finished(sample));
                        }
                    }
                    // Only after sending: several samples of a request may finish at once.
                    live.retain(|_, l| engine.scheduler().has_request(l.id));
                }
                Err(e) => {
                    tracing::error!("engine step failed: {e}");
                    for (_, l) in live.drain() {
                        let _ = engine.abort(l.id);
                        let _ = l
                            .events
                            .send(Event::Failed(format!("the engine failed: {e}")));
                    }
                }
            }
        }
        publish(&engine, &live, &gauges);
    }
}

/// Adds every request of one HTTP request, or none: a refusal aborts those already added.
fn add(
    engine: &mut Engine<'_>,
    live: &mut HashMap<u32, Live>,
    requests: Vec<Request>,
    stream_tokens: bool,
    events: tmpsc::UnboundedSender<Event>,
) -> Result<Vec<usize>, String> {
    let mut added = Vec::new();
    let mut cached = Vec::new();
    for request in requests {
        let index = request.index;
        cached.push(cached_prefix(engine, &request.prompt));
        match engine.add_request(request) {
            Ok(id) => added.push((index, id)),
            Err(e) => {
                for (_, id) in added {
                    let _ = engine.abort(id);
                }
                return Err(e.to_string());
            }
        }
    }
    for (index, id) in added {
        live.insert(
            index,
            Live {
                id,
                events: events.clone(),
                stream_tokens,
            },
        );
    }
    Ok(cached)
}

/// Prompt tokens whose blocks the prefix cache holds now: the leading full blocks found
/// by hash, short of the last prompt token (which is always computed, to draw from).
fn cached_prefix(engine: &Engine<'_>, prompt: &[u32]) -> usize {
    let config = engine.scheduler().config();
    if !config.prefix_caching || prompt.is_empty() {
        return 0;
    }
    let bs = config.block_size;
    let pool = engine.scheduler().pool();
    let hits = sprout::kv::block_hashes(prompt, bs, config.weights_version)
        .iter()
        .take_while(|h| pool.lookup(h).is_some())
        .count();
    (hits * bs).min((prompt.len() - 1) / bs * bs)
}

fn publish(engine: &Engine<'_>, live: &HashMap<u32, Live>, gauges: &EngineGauges) {
    let s = engine.scheduler();
    gauges
        .kv_blocks_in_use
        .store(s.pool().num_used(), Ordering::Relaxed);
    gauges.requests_running.store(live.len(), Ordering::Relaxed);
    gauges
        .generated_tokens
        .store(engine.stats().generated_tokens, Ordering::Relaxed);
}
