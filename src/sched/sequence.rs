//! One sequence of tokens: whose it is, what it has generated, and how many of its tokens
//! have their K and V in the pool (its blocks and their hash chain are the block manager's,
//! `super::block_manager`).
//!
//! A request starts as one *root* sequence holding the prompt. When its last prompt token
//! has been computed, the root draws `n` tokens from the same logits and forks into `n`
//! *sample* sequences that share every one of its blocks (the partial last block is copied
//! on write). A preempted sequence keeps its tokens and recomputes its KV later.

use std::collections::BTreeMap;

use super::drawn::{DRAWN, DrawResult, ScoreResult};
use super::request::{FinishReason, FinishedSample, RequestId, SamplingParams, TopLogprob};

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
    /// ... and its rank under the model (scoring only).
    pub ranks: Vec<u32>,
    /// Tokens whose K and V are in the pool (`tokens[..num_computed_tokens]`).
    pub num_computed_tokens: usize,
    /// Whether this sequence's current stay in the running set began with a prefill
    /// (admission or readmission) that has not finished.
    pub prefilling: bool,
    /// A teacher-forced sample: its tokens are given, and each is scored (its
    /// log-probability given the ones before) instead of drawn.
    pub scoring: bool,
    /// A step in flight draws this sample's next token and it holds no placeholder for it
    /// (`Scheduler::advance`): it takes no step until the token is applied.
    pub awaiting_draw: bool,
    /// How many times each token was generated (sparse: only tokens that were), for the
    /// penalties.
    pub output_counts: BTreeMap<u32, u32>,
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

    /// Takes the token of draw `d` of a step (in place of its placeholder `DRAWN | d`, put
    /// there when the next step was planned before the token was known), with its
    /// log-probs, drawn under `weights_version`.
    pub fn record_draw(&mut self, d: usize, result: &DrawResult, weights_version: u64) {
        match self.tokens.last_mut() {
            Some(last) if *last == DRAWN | d as u32 => *last = result.token,
            _ => self.tokens.push(result.token),
        }
        *self.output_counts.entry(result.token).or_default() += 1;
        self.awaiting_draw = false;
        self.logprobs.push(result.logprob);
        self.sampling_logprobs.push(result.sampling_logprob);
        self.weights_versions.push(weights_version);
        if !result.top.is_empty() {
            self.top_logprobs.push(result.top.clone());
        }
    }

    /// Takes the log-prob and rank of the next given token, scored under `weights_version`
    /// (`pending`: a step planned ahead counted it pending); returns whether every given
    /// token is scored now (scoring only).
    pub fn record_score(
        &mut self,
        score: ScoreResult,
        weights_version: u64,
        pending: bool,
    ) -> bool {
        if pending {
            self.pending_scores -= 1;
        }
        self.logprobs.push(score.logprob);
        self.ranks.push(score.rank);
        if !score.top.is_empty() {
            self.top_logprobs.push(score.top);
        }
        self.weights_versions.push(weights_version);
        self.logprobs.len() == self.tokens.len() - self.prompt_len
    }

    /// Why a sample ends with the token it drew last, under `params` and a context of
    /// `max_model_len` positions, if it does.
    pub fn finish_reason(
        &self,
        params: &SamplingParams,
        max_model_len: usize,
    ) -> Option<FinishReason> {
        let last = *self.tokens.last().expect("a sample has drawn a token");
        // The first min_tokens tokens cannot stop the sample (stop tokens are masked there,
        // so one is drawn only when nothing else was left).
        let may_stop = self.generated().len() > params.min_tokens;
        if may_stop && params.stop_ids.contains(&last) {
            Some(FinishReason::Stop)
        } else if self.generated().len() >= params.max_tokens || self.tokens.len() >= max_model_len
        {
            Some(FinishReason::Length)
        } else {
            None
        }
    }

    /// What this sequence returns as sample `sample_index` of its request (the request's
    /// `request_index`), ended for `reason`; `cached_prompt_tokens` came from the prefix
    /// cache when its prompt was first admitted. An unforked root gives each of its samples
    /// its prompt and nothing generated; a scoring sample ended early (aborted) gives the
    /// tokens it had scored, so that every token returned has its log-prob.
    pub fn into_finished(
        mut self,
        sample_index: u32,
        request_index: u32,
        reason: FinishReason,
        cached_prompt_tokens: usize,
    ) -> FinishedSample {
        if self.scoring {
            self.tokens.truncate(self.prompt_len + self.logprobs.len());
        }
        FinishedSample {
            request: self.request,
            request_index,
            sample_index,
            prompt_token_ids: self.tokens[..self.prompt_len].to_vec(),
            token_ids: self.tokens[self.prompt_len..].to_vec(),
            logprobs: self.logprobs,
            sampling_logprobs: self.sampling_logprobs,
            top_logprobs: self.top_logprobs,
            ranks: self.ranks,
            weights_versions: self.weights_versions,
            finish_reason: reason,
            stopped_by: None,
            cached_prompt_tokens,
        }
    }
}
