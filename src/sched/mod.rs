//! Requests, sequences and the continuous-batching scheduler: plain data, no wgpu.
//!
//! The scheduler owns the queues and their policy; its block manager owns every sequence's
//! block table and hash chain and the [`crate::kv::BlockPool`] they take blocks from. Each
//! step the scheduler turns its queues into a [`StepPlan`] (which tokens of which sequences
//! run, the blocks they write, the copies to make first and the tokens to draw); the GPU
//! runner executes the plan and hands back the drawn tokens, and [`Scheduler::update`]
//! applies them. Everything about batching, prefix reuse and preemption is decided here
//! and can be tested on the CPU in microseconds (tests/scheduler.rs). A request's sampling
//! parameters are checked by [`SamplingParams::validate`], the one set of rules every
//! front end also calls; [`request_adjustments`] says which of its values a run uses other
//! than asked (a `max_tokens` past the context), for front ends to report.
//!
//! Invariants, checked by [`Scheduler::check`] after every step in the property test:
//! a block's reference count equals the number of block tables that hold it; no block is
//! both free and in use; the pool's hash map names only blocks that hold that hash.

mod adjusted;
mod block_manager;
mod block_map;
mod config;
mod drafting;
mod drawn;
mod plan;
mod processing;
mod request;
mod rows;
mod scheduler;
mod sequence;
mod validate;
mod verification;

pub use adjusted::{Adjusted, request_adjustments};
pub use block_map::{BlockUse, SeqBlocks, block_map};
pub use config::{SchedError, SchedulerConfig, SchedulerStats};
pub use drafting::SpecStats;
pub use drawn::{DRAWN, DrawResult, ScoreResult};
pub use plan::{BlockCopy, Chunk, Draw, StepPlan, Target};
pub use processing::{RowProcessing, TokenAdjust};
pub use request::{
    FinishReason, FinishedSample, LogitProcessing, MAX_TOP_LOGPROBS, Request, RequestId,
    SamplingParams, StopMatch, TopLogprob,
};
pub use scheduler::{LoraTag, Scheduler};
pub use sequence::SeqId;
pub use validate::SamplingError;
