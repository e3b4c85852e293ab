//! What every handler shares: the engine's handle, the model's facts, the server's
//! settings and its counters ([`AppState`], one per server, behind an `Arc`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

use crate::cli::serve::adapters::Adapters;
use crate::cli::serve::engine_thread::{EngineHandle, ModelFacts};
use crate::cli::serve::logprobs_mode::LogprobsMode;
use crate::cli::serve::parsing::ServerParsers;

/// Everything the handlers share.
pub struct AppState {
    pub engine: EngineHandle,
    pub facts: ModelFacts,
    pub served_name: String,
    pub max_model_len: usize,
    pub api_key: Option<String>,
    /// The most samples (each of `n` counted) queued or running at once.
    pub max_queued: usize,
    /// The most samples per prompt one request may ask (`--max-n`).
    pub max_n: usize,
    /// The most samples (prompts times n) one request may ask; at most `max_queued`.
    pub max_samples: usize,
    /// Which log-probs the choices report.
    pub logprobs_mode: LogprobsMode,
    /// The chat replies' parsers the server was started with.
    pub parsers: ServerParsers,
    pub queued: AtomicUsize,
    pub next_index: AtomicU32,
    /// Keys the draws of requests without a seed of their own.
    pub base_seed: u64,
    /// When the server started (Unix seconds): `/v1/models`' `created`.
    pub started: u64,
    /// With `--admin-api-key`, the admin routes answer anyone with it (else loopback only).
    pub admin_key: Option<String>,
    /// A `/pause` has taken effect and no `/resume` has followed.
    pub paused: AtomicBool,
    /// The weights version in force (each choice reports its tokens' own).
    pub weights_version: AtomicU64,
    /// A `/update_weights` is loading.
    pub updating: AtomicBool,
    /// The requests in flight by id, with their engine indexes (for `/abort_requests`).
    pub jobs: Mutex<HashMap<String, Vec<u32>>>,
    /// The LoRA adapter in force, if any, and `--max-lora-rank`.
    pub adapters: Adapters,
}
