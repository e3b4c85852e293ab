//! The messages between the HTTP side and the engine thread: the [`Command`]s a handler
//! sends, and the [`Event`]s each request gets back on its own channel. Both ends
//! (`engine_thread`, `engine_loop`, the handlers) depend on this protocol, not on each
//! other.

use std::time::Instant;

use sprout::engine::DrawnToken;
use sprout::model::decoder_weights::DecoderWeights;
use sprout::sched::{FinishedSample, Request};
use tokio::sync::{mpsc as tmpsc, oneshot};

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
    /// Put `weights` in force, labelled `version`, between two steps; replies once done.
    UpdateWeights {
        weights: DecoderWeights,
        version: u64,
        reply: oneshot::Sender<()>,
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
