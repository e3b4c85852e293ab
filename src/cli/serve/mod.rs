//! `sprout serve`: an OpenAI-compatible HTTP server over one engine.
//!
//! - `engine_thread`: the OS thread that owns the GPU, the model and the engine, and runs
//!   every request's prompts in one continuous batch (`engine_loop`: its loop);
//! - `routes`: the HTTP routes, the API-key check, the body limit and the access log;
//! - `handlers`: the completions and chat handlers, and the steps every generating route
//!   shares (a body checked off the async workers, a submission queued and answered);
//! - `fields`: every request field of the completions, chat and generate APIs and what
//!   sprout does with it (the README's field table);
//! - `request`: reading the two APIs' request bodies;
//! - `sampling`: a request's fields as the engine's sampling parameters, and its limits;
//! - `submit`: checking a request against the model, the queue limit, and queueing it;
//! - `prompt_logprobs`: the prompt's own log-probs (`prompt_logprobs`, `echo` with
//!   `logprobs`), from a teacher-forced scoring request queued beside the samples;
//! - `reply`: answering from the samples, whole or streamed;
//! - `parsing`: a chat reply's text as reasoning, content and tool calls (`reasoning`:
//!   `--reasoning-parser`; `tool_calls`: `--tool-call-parser`; `tags`: finding their tags
//!   in text that arrives in pieces);
//! - `response`: the APIs' response shapes (`text_logprobs`: completions' log-probs);
//! - `metrics`: `/metrics`, under vLLM's names;
//! - `admin`: pause, resume, abort, prefix-cache reset and weight updates, for a trainer;
//! - `lora`: loading and unloading the LoRA adapter (the loop's side: `engine_lora`; what
//!   the HTTP side knows of it: `adapters`);
//! - `sleep`: sleep and wake (the engine loop's side: `engine_sleep`; what sleeps:
//!   `sleep_state`), for a trainer that shares the device;
//! - `trl`: `/generate/` in the schema of TRL's vLLM server;
//! - `generate`: `/inference/v1/generate`, vLLM's tokens-in, tokens-out route;
//! - `tokenize`: `/tokenize` and `/detokenize`;
//! - `render`: `/v1/chat/completions/render` and `/v1/completions/render`: what a request
//!   would run (its prompt ids and sampling parameters), as a generate request;
//! - `error`: refusals in OpenAI's error body.
//!
//! The HTTP side runs on a tokio runtime; it tokenizes, checks and shapes, and talks to
//! the engine thread only through its channels. SIGINT or SIGTERM stops accepting
//! connections, aborts what is in flight (clients get what their samples had, with
//! finish reason "abort") and exits 0.

mod adapters;
mod admin;
mod body_fields;
mod chat_fields;
mod engine_loop;
mod engine_lora;
mod engine_sleep;
mod engine_thread;
mod error;
mod fields;
mod generate;
mod handlers;
mod heap;
mod logprobs_mode;
mod lora;
mod messages;
mod metrics;
mod parsing;
mod prompt_logprobs;
mod reasoning;
mod render;
mod reply;
mod request;
mod response;
mod routes;
mod sampling;
mod sleep;
mod sleep_state;
mod state;
mod submit;
mod tags;
mod text_logprobs;
mod token_prefix;
mod tokenize;
mod tool_calls;
mod trl;
mod update;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use sprout::gpu::BackendChoice;
use sprout::tokenizer::template_limits;

use crate::cli::cli_args::{EngineArgs, LoraArg, ModelArg};
use messages::Command;
use state::AppState;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArg,
    /// `--lora DIR`: an adapter loaded at start under its directory's name (a request's
    /// `model` names it to run with it); more come and go with /v1/load_lora_adapter and
    /// /v1/unload_lora_adapter, one at a time.
    #[command(flatten)]
    lora: LoraArg,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port to listen on (0: any free port, printed once listening).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model's name in the API (`model` in requests and `/v1/models`); default: the
    /// model file's or directory's name.
    #[arg(long)]
    served_model_name: Option<String>,
    /// A Jinja chat template file for /v1/chat/completions, in place of the model's own.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<std::path::PathBuf>,
    /// Require `Authorization: Bearer KEY` on the /v1 routes.
    #[arg(long, env = "SPROUT_API_KEY")]
    api_key: Option<String>,
    /// Let clients other than loopback ones use the admin routes (/pause, /resume,
    /// /abort_requests, ...) with `Authorization: Bearer ADMIN_KEY`.
    #[arg(long, env = "SPROUT_ADMIN_API_KEY")]
    admin_api_key: Option<String>,
    /// The most samples (each of a request's n counted) queued or running at once; a
    /// request that would pass it while others run is refused with 503 and Retry-After.
    #[arg(long, default_value_t = 4096)]
    max_queued_requests: usize,
    /// The most samples per prompt (`n`) one request may ask; past it: 400.
    #[arg(long, default_value_t = 1024)]
    max_n: usize,
    /// The most samples (prompts times n) one request may ask; past it: 400 (default and
    /// at most: --max-queued-requests).
    #[arg(long)]
    max_samples_per_request: Option<usize>,
    /// The longest prompt plus max_tokens accepted; past it: 400 (default and at most: the
    /// model's context length).
    #[arg(long)]
    max_model_len: Option<usize>,
    /// What a choice's `logprobs` reports: raw_logprobs (the model's) or
    /// processed_logprobs (the distribution sampled from, after bias, penalties,
    /// temperature and truncation).
    #[arg(long, default_value = "raw_logprobs", value_name = "MODE",
          value_parser = logprobs_mode::parse_logprobs_mode)]
    logprobs_mode: logprobs_mode::LogprobsMode,
    /// Requests that arrive while the server sleeps (/sleep) wait until it wakes, instead
    /// of being refused with 503 and Retry-After.
    #[arg(long)]
    queue_while_asleep: bool,
    /// Parse tool calls out of the chat replies of requests with `tools` and `tool_choice`
    /// "auto" (the default with tools) into `message.tool_calls`; needs
    /// --tool-call-parser. Without it such requests are refused, as vLLM does.
    #[arg(long)]
    enable_auto_tool_choice: bool,
    /// How the model writes tool calls: hermes (`<tool_call>{...}</tool_call>`: Qwen2.5,
    /// Qwen3, Hermes) or llama3_json (Llama 3.x's JSON calls).
    #[arg(long, value_enum, value_name = "NAME")]
    tool_call_parser: Option<tool_calls::ToolCallParser>,
    /// Split `<think>...</think>` out of chat replies into `reasoning_content`: qwen3
    /// (not when `chat_template_kwargs` turn `enable_thinking` off) or deepseek_r1.
    #[arg(long, value_enum, value_name = "NAME")]
    reasoning_parser: Option<reasoning::ReasoningParser>,
    #[command(flatten)]
    engine: EngineArgs,
}

pub fn run(backend: BackendChoice, args: ServeArgs) -> Result<()> {
    init_logging();
    let config = args.engine.config()?;
    let config_version = config.weights_version;
    if args.max_queued_requests == 0 {
        bail!("--max-queued-requests must be at least 1");
    }
    if args.max_model_len == Some(0) {
        bail!("--max-model-len must be at least 1");
    }
    if args.max_n == 0 {
        bail!("--max-n must be at least 1");
    }
    if args.enable_auto_tool_choice && args.tool_call_parser.is_none() {
        bail!("--enable-auto-tool-choice requires --tool-call-parser (hermes or llama3_json)");
    }
    let max_samples = args
        .max_samples_per_request
        .unwrap_or(args.max_queued_requests);
    if max_samples == 0 || max_samples > args.max_queued_requests {
        bail!(
            "--max-samples-per-request must be 1 to --max-queued-requests ({}), not {max_samples}",
            args.max_queued_requests
        );
    }
    let chat_template = match &args.chat_template {
        Some(path) => {
            let read = std::fs::File::open(path)
                .map_err(|e| e.to_string())
                .and_then(template_limits::read_source);
            Some(read.map_err(|e| anyhow!("reading the chat template {}: {e}", path.display()))?)
        }
        None => None,
    };
    let quantize = args.model.quantize.0;
    let max_lora_rank = args.lora.max_lora_rank;
    let (engine, facts, thread) = engine_thread::start(
        backend,
        args.model,
        config,
        engine_thread::Labels {
            served_name: args.served_model_name.clone(),
            chat_template,
            quantize,
            queue_while_asleep: args.queue_while_asleep,
            lora: args.lora,
        },
    )?;
    let max_model_len = match args.max_model_len {
        Some(n) if n > facts.max_positions => bail!(
            "--max-model-len {n} is longer than the model's context ({} positions)",
            facts.max_positions
        ),
        Some(n) => n,
        None => facts.max_positions,
    };
    let served_name = args
        .served_model_name
        .unwrap_or_else(|| facts.model_name.clone());
    if let Some(lora) = &facts.lora
        && lora.name == served_name
    {
        bail!(
            "the LoRA adapter's name `{}` (its directory's) is the served model's: rename the \
             directory or set --served-model-name",
            lora.name
        );
    }
    let adapters = adapters::Adapters::new(facts.lora.clone(), max_lora_rank);
    let state = Arc::new(AppState {
        engine,
        facts,
        served_name,
        max_model_len,
        api_key: args.api_key,
        admin_key: args.admin_api_key,
        paused: AtomicBool::new(false),
        weights_version: AtomicU64::new(config_version),
        updating: AtomicBool::new(false),
        jobs: Mutex::new(HashMap::new()),
        adapters,
        max_queued: args.max_queued_requests,
        max_n: args.max_n,
        max_samples,
        logprobs_mode: args.logprobs_mode,
        parsers: parsing::ServerParsers {
            enable_auto_tool_choice: args.enable_auto_tool_choice,
            tool_call_parser: args.tool_call_parser,
            reasoning_parser: args.reasoning_parser,
        },
        queued: AtomicUsize::new(0),
        next_index: AtomicU32::new(0),
        base_seed: random_seed(),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(serve(state.clone(), &args.host, args.port));
    // Whatever ended the server, end the engine thread too.
    let _ = state.engine.send(Command::Shutdown);
    drop(runtime);
    if thread.join().is_err() {
        bail!("the engine thread panicked");
    }
    served
}

async fn serve(state: Arc<AppState>, host: &str, port: u16) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .with_context(|| format!("listening on {host}:{port}"))?;
    let address = listener.local_addr()?;
    // Printed, not logged: scripts and tests read the port from this line.
    eprintln!("sprout serve: listening on http://{address}");
    tracing::info!("serving `{}` on http://{address}", state.served_name);
    let app = routes::router(state.clone());
    let shutdown_state = state.clone();
    // The admin routes look at the peer's address.
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            tracing::info!("shutting down: aborting the requests in flight");
            let _ = shutdown_state.engine.send(Command::Shutdown);
        })
        .await
        .context("serving HTTP")
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// Logs to stderr; `RUST_LOG` picks the level (default: info).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// A seed that differs from run to run (std's per-process random hasher keys).
fn random_seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish()
}
