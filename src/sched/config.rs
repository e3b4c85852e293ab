//! What the scheduler is set up with, what it counts, and the errors it returns: a
//! [`SchedulerConfig`], the [`SchedulerStats`] over its life, and [`SchedError`], including
//! [`check_request`], the rules a request must meet before it is queued.
//!
//! Invariant: a request that passes [`check_request`] can always finish, alone in the pool
//! (its longest sample's blocks fit), so the scheduler never queues one that would wait
//! forever.

use serde::Serialize;

use crate::spec::SpecMode;

use super::request::{Request, RequestId};
use super::validate::SamplingError;

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Tokens per KV block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Tokens computed per step, at most.
    pub max_batch_tokens: usize,
    /// Sequences computed per step, at most (each needs a row of logits).
    pub max_num_seqs: usize,
    /// Positions the model can attend over; a sample ends when it reaches it.
    pub max_model_len: usize,
    /// Part of every block's hash: blocks computed under other weights never match.
    pub weights_version: u64,
    /// Reuse cached blocks across sequences (off only to measure what it saves).
    pub prefix_caching: bool,
    /// Speculative decoding: whether drafts may be verified (in the steps the engine
    /// plans with [`crate::sched::Scheduler::set_speculating`]).
    pub speculative: SpecMode,
}

/// Counters over the scheduler's life.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SchedulerStats {
    pub requests: usize,
    /// Prompt tokens of the requests added, each prompt counted once.
    pub prompt_tokens: usize,
    /// Tokens computed as prefill (first computations and recomputations after preemption).
    pub prefill_tokens_computed: usize,
    /// Tokens looked up in the prefix cache: each admitted sequence's tokens to compute,
    /// counted at every admission (first, and again after a preemption).
    pub prefix_cache_query_tokens: usize,
    /// Tokens whose KV came from cached blocks instead of being computed.
    pub prefix_cache_hit_tokens: usize,
    pub generated_tokens: usize,
    /// Given tokens scored by teacher forcing.
    pub scored_tokens: usize,
    pub steps: usize,
    pub preemptions: usize,
    /// The most blocks in use at once.
    pub peak_kv_blocks: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchedError {
    #[error("the prompt has no tokens")]
    EmptyPrompt,
    #[error("a request needs at least one sample (n = 0)")]
    NoSamples,
    #[error(transparent)]
    BadSampling(#[from] SamplingError),
    #[error("the prompt has {len} tokens; the model's context holds {max}")]
    PromptTooLong { len: usize, max: usize },
    #[error(
        "one sample needs {need} KV blocks ({tokens} tokens in blocks of {block_size}), but \
         the pool has {have}: raise --kv-blocks or --kv-memory, or lower --max-tokens"
    )]
    PoolTooSmall {
        need: usize,
        have: usize,
        tokens: usize,
        block_size: usize,
    },
    #[error("{forced} completions to score for n = {n} samples")]
    ForcedCount { n: usize, forced: usize },
    #[error("a completion to score has no tokens")]
    EmptyCompletion,
    #[error("the request asks for the LoRA adapter, and none is loaded")]
    NoAdapter,
    #[error("unknown request {0:?}")]
    UnknownRequest(RequestId),
    #[error(
        "the step's results hold {draws} draws and {scores} scores, its plan \
         {want_draws} and {want_scores}"
    )]
    ResultCount {
        draws: usize,
        want_draws: usize,
        scores: usize,
        want_scores: usize,
    },
}

/// Whether `request` may be queued under `config`: a prompt, at least one sample, one
/// completion per sample when scoring (none empty), valid sampling parameters, a prompt
/// shorter than the context, and a longest sample whose blocks fit the pool.
pub(crate) fn check_request(config: &SchedulerConfig, request: &Request) -> Result<(), SchedError> {
    let (len, max) = (request.prompt.len(), config.max_model_len);
    if len == 0 {
        return Err(SchedError::EmptyPrompt);
    }
    if request.n == 0 {
        return Err(SchedError::NoSamples);
    }
    if !request.forced.is_empty() {
        if request.forced.len() != request.n {
            return Err(SchedError::ForcedCount {
                n: request.n,
                forced: request.forced.len(),
            });
        }
        if request.forced.iter().any(Vec::is_empty) {
            return Err(SchedError::EmptyCompletion);
        }
    }
    request.params.validate()?;
    if len >= max {
        return Err(SchedError::PromptTooLong { len, max });
    }
    // Alone in the pool, one sample must fit, or it could never finish. Its last drawn
    // token is never computed, hence the - 1.
    let longest = match request.forced.iter().map(Vec::len).max() {
        Some(forced) => forced,
        None => request.params.max_tokens,
    };
    let tokens = (len + longest - 1).min(max);
    let need = tokens.div_ceil(config.block_size);
    if need > config.num_blocks {
        return Err(SchedError::PoolTooSmall {
            need,
            have: config.num_blocks,
            tokens,
            block_size: config.block_size,
        });
    }
    Ok(())
}
