//! The messages between the HTTP side and the engine thread: the [`Command`]s a handler
//! sends, and the [`Event`]s each request gets back on its own channel. Both ends
//! (`engine_thread`, `engine_loop`, the handlers) depend on this protocol, not on each
//! other.

use std::time::Instant;

use serde::Serialize;

use sprout::engine::DrawnToken;
use sprout::model::decoder_weights::DecoderWeights;
use sprout::model::lora::LoraAdapter;
use sprout::model::weight_residency::Residency;
use sprout::sched::{FinishedSample, Request};
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::cli::serve::error::ApiError;

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
        /// The LoRA adapter the requests with `lora` run with, by name: refused unless it
        /// is the one in force when they are queued.
        adapter: Option<String>,
        /// Whether the requests were queued, or why not.
        reply: oneshot::Sender<Result<(), Refusal>>,
    },
    /// Stop the requests with these indexes (their client went away) and free their blocks.
    Abort { indexes: Vec<u32> },
    /// Stop the requests with these indexes (all with `None`); their clients get their
    /// samples so far. Replies with how many requests were stopped.
    AbortRequests {
        indexes: Option<Vec<u32>>,
        reply: oneshot::Sender<usize>,
    },
    /// Stop stepping (see [`PauseMode`]); replies once paused. New requests are held.
    Pause {
        mode: PauseMode,
        reply: oneshot::Sender<()>,
    },
    /// Step again, starting the held requests.
    Resume { reply: oneshot::Sender<()> },
    /// Forget the prefix cache's reusable blocks; replies with how many.
    ResetPrefixCache { reply: oneshot::Sender<usize> },
    /// Put `weights` in force, labelled `version`, between two steps; replies once done,
    /// or why not (the weights went to sleep while they loaded).
    /// Put new weights in force; the reply names the LoRA adapter's new version (an
    /// adapter in force is relabelled one up: its versions name a base too).
    UpdateWeights {
        weights: DecoderWeights,
        version: u64,
        reply: oneshot::Sender<Result<Option<u64>, String>>,
    },
    /// Sleep at `level` (0: stop stepping; 1: free the KV cache and keep the weights in
    /// host memory; 2: free both) once the requests in flight are dealt with as `mode`
    /// says; replies once asleep, or why not.
    Sleep {
        level: u8,
        mode: PauseMode,
        reply: oneshot::Sender<Result<SleepReport, String>>,
    },
    /// Wake what `tags` name (all with `None`); replies with what woke, or why not.
    WakeUp {
        tags: Option<Vec<WakeTag>>,
        reply: oneshot::Sender<Result<WakeReport, String>>,
    },
    /// Upload `adapter` and put it in force under `name` between two steps (`inplace`:
    /// replacing the adapter of that name, one version up); replies with its version, or
    /// why not (another adapter is loaded, this one is and `inplace` is not set, or the
    /// device refuses it).
    LoadLora {
        adapter: Box<LoraAdapter>,
        name: String,
        inplace: bool,
        reply: oneshot::Sender<Result<u64, ApiError>>,
    },
    /// Remove the adapter `name`; replies once removed, or why not (it is not loaded, or
    /// requests with it are unfinished).
    UnloadLora {
        name: String,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    /// Abort everything, send each client its aborted samples, and end the thread.
    Shutdown,
}

/// What a pause does with the requests in flight (vLLM's modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseMode {
    /// Abort them (their clients get their samples so far), then pause.
    Abort,
    /// Let them finish, then pause.
    Wait,
    /// Pause at once; they continue where they were on resume, their KV kept.
    Keep,
}

impl PauseMode {
    /// A mode by name (`/pause`'s and `/sleep`'s `mode`), with the name; a 400 naming
    /// `mode` for any other.
    pub fn parse(text: &str) -> Result<(PauseMode, &'static str), ApiError> {
        match text {
            "abort" => Ok((PauseMode::Abort, "abort")),
            "wait" => Ok((PauseMode::Wait, "wait")),
            "keep" => Ok((PauseMode::Keep, "keep")),
            other => Err(ApiError::bad(
                "mode",
                format!("mode must be abort, wait or keep, not {other:?}"),
            )),
        }
    }
}

/// Why requests were not queued.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// Something in them the engine cannot take (a 400).
    Invalid(String),
    /// The server cannot take any now: it sleeps, or shuts down (a 503).
    Unavailable(String),
    /// The LoRA adapter they name is not the one in force (a 404 naming `model`).
    UnknownModel(String),
}

/// What `/wake_up` may wake (vLLM's tags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeTag {
    Weights,
    KvCache,
    /// Stepping, after a level-0 sleep (memory asleep keeps the engine from stepping
    /// until it wakes too).
    Scheduling,
}

impl WakeTag {
    pub const ALL: [WakeTag; 3] = [WakeTag::Weights, WakeTag::KvCache, WakeTag::Scheduling];

    pub fn name(self) -> &'static str {
        match self {
            WakeTag::Weights => "weights",
            WakeTag::KvCache => "kv_cache",
            WakeTag::Scheduling => "scheduling",
        }
    }
}

/// What a sleep did.
#[derive(Debug, Serialize)]
pub struct SleepReport {
    pub level: u8,
    /// Sequences sent back to the queue (`mode=keep`): they recompute on wake.
    pub preempted: usize,
    pub gpu_memory_bytes_before: u64,
    pub gpu_memory_bytes: u64,
    /// What sprout's own accounting freed: the weights' device buffers, and the KV pool
    /// with the step buffers.
    pub freed_weights_bytes: u64,
    pub freed_kv_cache_bytes: u64,
}

/// What a wake did.
#[derive(Debug, Serialize)]
pub struct WakeReport {
    /// The tags that were asleep and woke.
    pub woken: Vec<&'static str>,
    pub is_sleeping: bool,
    /// Where the weights are: `device`, `host`, or `discarded` (level 2: an update must
    /// bring new ones before requests run).
    pub weights: Residency,
    pub gpu_memory_bytes: u64,
}

/// What the engine thread tells one HTTP request.
#[derive(Debug)]
pub enum Event {
    /// A token drawn for a sample that has not finished yet, with its log-probs and
    /// alternatives (only with `stream_tokens`).
    Token(DrawnToken),
    Finished(Box<FinishedSample>),
    /// The engine failed; the request's unfinished samples will not come.
    Failed(String),
}
