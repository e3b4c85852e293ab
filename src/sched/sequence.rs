//! One sequence of tokens: whose it is, what it has generated, and how many of its tokens
//! have their K and V in the pool (its blocks and their hash chain are the block manager's,
//! `super::block_manager`).
//!
//! A request starts as one *root* sequence holding the prompt. When its last prompt token
//! has been computed, the root draws `n` tokens from the same logits and forks into `n`
//! *sample* sequences that share every one of its blocks (the partial last block is copied
//! on write). A preempted sequence keeps its tokens and recomputes its KV later.

use super::request::{RequestId, TopLogprob};

/// The scheduler's name for a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The prompt of a request, not yet forked into its samples.
    Root,
    /// Sample `k` of its request.
    Sample(u32),
}

#[derive(Clone, Debug)]
pub(crate) struct Sequence {
    pub id: SeqId,
    pub request: RequestId,
    pub role: Role,
    /// The prompt, then the generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// The log-probability of each generated token.
    pub logprobs: Vec<f32>,
    /// ... and under the distribution it was drawn from (sampling only).
    pub sampling_logprobs: Vec<f32>,
    /// ... and the alternatives asked for at each generated position.
    pub top_logprobs: Vec<Vec<TopLogprob>>,
    /// ... and the weights version it was drawn or scored under.
    pub weights_versions: Vec<u64>,
    /// Tokens whose K and V are in the pool (`tokens[..num_computed_tokens]`).
    pub num_computed_tokens: usize,
    /// Whether this sequence's current stay in the running set began with a prefill
    /// (admission or readmission) that has not finished.
    pub prefilling: bool,
    /// A teacher-forced sample: its tokens are given, and each is scored (its
    /// log-probability given the ones before) instead of drawn.
    pub scoring: bool,
    /// Scores this (scoring) sequence has coming from a step that is advanced but not yet
    /// updated: their positions are planned, so the next step must not plan them again.
    pub pending_scores: usize,
}

impl Sequence {
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// Tokens whose K and V are needed: all of them when sampling (the last drawn token
    /// is fed back), all but the last when scoring (nothing comes after it).
    pub fn compute_len(&self) -> usize {
        self.tokens.len() - usize::from(self.scoring)
    }

    /// Tokens not yet computed: the rest of a prefill, or the one token drawn last step.
    pub fn num_uncomputed(&self) -> usize {
        self.compute_len() - self.num_computed_tokens
    }

    /// The first position whose logits score a token neither scored nor being scored by a
    /// step in flight (scoring only).
    pub fn next_target_position(&self) -> usize {
        self.prompt_len + self.logprobs.len() + self.pending_scores - 1
    }
}
