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
//!
//! The thread also keeps [`Metrics`]: after each step it adds the scheduler's new counts,
//! sets the gauges, and times each request from its arrival (given by the HTTP side) to
//! its admission, each sample's tokens and each sample's end. A time is taken when the
//! step that did the work returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use sprout::engine::{Engine, EngineConfig};
use sprout::gpu::BackendChoice;
use sprout::sched::{FinishedSample, Request, RequestId, SchedulerStats};
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::ChatTemplate;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::ModelArg;
use crate::cli::serve::metrics::Metrics;

/// What the HTTP side asks of the engine thread.
pub enum Command {
    /// Queue `requests` (all or none); their events go to `events`. `stream_tokens`: also
    /// send each drawn token as it comes (not only the finished samples).
    Add {
        requests: Vec<Request>,
        stream_tokens: bool,
        events: tmpsc::UnboundedSender<Event>,
        /// When the HTTP request arrived (the metrics' clocks start here).
        arrived: Instant,
        /// Whether the requests were queued, or why not.
        reply: oneshot::Sender<Result<(), String>>,
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
    /// The template chat messages are rendered with (`None`: the chat route refuses).
    pub chat_template: Option<ChatTemplate>,
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

/// The HTTP side's end of the engine thread.
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    /// What the engine thread measures; the HTTP side only reads it.
    pub metrics: Arc<Metrics>,
}

impl EngineHandle {
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
        Ok(Ok((facts, metrics))) => Ok((EngineHandle { commands, metrics }, facts, thread)),
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
    arrived: Instant,
    /// Its prompt has been admitted (its queue time observed).
    admitted: bool,
    /// Per sample, when its last token was drawn.
    last_token: Vec<Option<Instant>>,
}

impl Live {
    /// Observes the queue time once the prompt is admitted (or has finished, admitted
    /// within the step).
    fn note_admission(&mut self, engine: &Engine<'_>, metrics: &Metrics, now: Instant) {
        let admitted = !engine.scheduler().has_request(self.id)
            || engine.scheduler().cached_prompt_tokens(self.id).is_some();
        if admitted && !self.admitted {
            self.admitted = true;
            metrics
                .request_queue_time
                .observe((now - self.arrived).as_secs_f64());
        }
    }

    /// Observes the time to a sample's first token, or since its token before.
    fn note_token(&mut self, sample_index: u32, metrics: &Metrics, now: Instant) {
        let Some(last) = self.last_token.get_mut(sample_index as usize) else {
            return;
        };
        match last.replace(now) {
            None => metrics
                .time_to_first_token
                .observe((now - self.arrived).as_secs_f64()),
            Some(before) => metrics
                .inter_token_latency
                .observe((now - before).as_secs_f64()),
        }
    }

    /// Counts a finished sample.
    fn count_finish(&self, sample: &FinishedSample, metrics: &Metrics, now: Instant) {
        metrics.finished(sample.finish_reason);
        metrics
            .e2e_request_latency
            .observe((now - self.arrived).as_secs_f64());
    }
}

fn run(
    backend: BackendChoice,
    model: ModelArg,
    config: EngineConfig,
    labels: Labels,
    commands: mpsc::Receiver<Command>,
    ready: mpsc::Sender<Result<(ModelFacts, Arc<Metrics>)>>,
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
        tokenizer: tokenizer.clone(),
        chat_template,
        vocab_size: c.vocab_size,
        eos_token_ids: c.eos_token_ids.clone(),
        max_positions: opened.decoder.max_positions(),
        weights_version: config.weights_version,
        kv_blocks: engine.num_blocks(),
        model_name: info.name.clone(),
        model_path: info.path.clone(),
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
    if ready.send(Ok((facts, metrics.clone()))).is_err() {
        return;
    }
    let mut live: HashMap<u32, Live> = HashMap::new();
    let mut counted = SchedulerStats::default();
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
                    arrived,
                    reply,
                } => {
                    let client = Client {
                        events,
                        stream_tokens,
                        arrived,
                    };
                    let _ = reply.send(add(&mut engine, &mut live, requests, client));
                }
                Command::Abort { indexes } => {
                    let now = Instant::now();
                    for index in indexes {
                        if let Some(l) = live.remove(&index) {
                            // The client is gone: its samples are counted, and go nowhere.
                            for sample in engine.abort(l.id).unwrap_or_default() {
                                l.count_finish(&sample, &metrics, now);
                            }
                        }
                    }
                }
                Command::Shutdown => shutdown = true,
            }
        }
        if shutdown {
            let now = Instant::now();
            for (_, l) in live.drain() {
                for sample in engine.abort(l.id).unwrap_or_default() {
                    l.count_finish(&sample, &metrics, now);
                    let _ = l.events.send(Event::Finished(sample));
                }
            }
            publish(&engine, &live, &metrics, &mut counted);
            return;
        }
        if engine.has_work() {
            match pollster::block_on(engine.step()) {
                Ok(step) => {
                    let now = Instant::now();
                    // Events go out after the metrics are up to date, so that a client
                    // that has heard of its tokens finds them counted.
                    let mut outbox = Vec::new();
                    for l in live.values_mut() {
                        l.note_admission(&engine, &metrics, now);
                    }
                    for d in step.drawn {
                        let Some(l) = live.get_mut(&d.request_index) else {
                            continue;
                        };
                        // A draw planned ahead for a sample that has finished since is
                        // not part of it.
                        let open = engine.scheduler().generated(l.id, d.sample_index).is_some()
                            || step
                                .finished
                                .iter()
                                .any(|s| s.request == l.id && s.sample_index == d.sample_index);
                        if !open {
                            continue;
                        }
                        l.note_token(d.sample_index, &metrics, now);
                        if l.stream_tokens {
                            let token = Event::Token {
                                request_index: d.request_index,
                                sample_index: d.sample_index,
                                token: d.token,
                            };
                            outbox.push((l.events.clone(), token));
                        }
                    }
                    for sample in step.finished {
                        if let Some(l) = live.get(&sample.request_index) {
                            l.count_finish(&sample, &metrics, now);
                            outbox.push((l.events.clone(), Event::Finished(sample)));
                        }
                    }
                    live.retain(|_, l| engine.scheduler().has_request(l.id));
                    publish(&engine, &live, &metrics, &mut counted);
                    for (to, event) in outbox {
                        let _ = to.send(event);
                    }
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
        publish(&engine, &live, &metrics, &mut counted);
    }
}

/// Where one HTTP request's events go, and when it arrived.
struct Client {
    events: tmpsc::UnboundedSender<Event>,
    stream_tokens: bool,
    arrived: Instant,
}

/// Adds every request of one HTTP request, or none: a refusal aborts those already added.
fn add(
    engine: &mut Engine<'_>,
    live: &mut HashMap<u32, Live>,
    requests: Vec<Request>,
    client: Client,
) -> Result<(), String> {
    let mut added = Vec::new();
    for request in requests {
        let (index, n) = (request.index, request.n);
        match engine.add_request(request) {
            Ok(id) => added.push((index, n, id)),
            Err(e) => {
                for (_, _, id) in added {
                    let _ = engine.abort(id);
                }
                return Err(e.to_string());
            }
        }
    }
    for (index, n, id) in added {
        live.insert(
            index,
            Live {
                id,
                events: client.events.clone(),
                stream_tokens: client.stream_tokens,
                arrived: client.arrived,
                admitted: false,
                last_token: vec![None; n],
            },
        );
    }
    Ok(())
}

/// Sets the gauges and adds the scheduler's counts since `counted`.
fn publish(
    engine: &Engine<'_>,
    live: &HashMap<u32, Live>,
    metrics: &Metrics,
    counted: &mut SchedulerStats,
) {
    let s = engine.scheduler();
    let (used, total) = (s.pool().num_used(), s.config().num_blocks);
    metrics.kv_blocks_in_use.set(used as i64);
    metrics
        .kv_cache_usage_perc
        .set(used as f64 / total.max(1) as f64);
    let running = live.values().filter(|l| l.admitted).count();
    metrics.num_requests_running.set(running as i64);
    metrics
        .num_requests_waiting
        .set((live.len() - running) as i64);
    metrics.count(counted, s.stats());
    *counted = s.stats().clone();
}
