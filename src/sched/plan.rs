//! A [`StepPlan`]: what one step computes, as plain data for the GPU runner. What comes
//! back for its draws is in [`super::drawn`].

use std::sync::Arc;

use crate::kv::BlockId;

use super::processing::RowProcessing;
use super::request::RequestId;
use super::sequence::SeqId;

/// Copy block `src` to block `dst` (every layer, K and V) before the step writes anything:
/// copy-on-write of a shared partial block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: BlockId,
    pub dst: BlockId,
}

/// Consecutive tokens of one sequence computed this step.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    pub seq: SeqId,
    /// The position of `tokens[0]`; the chunk computes positions `start .. start + len`.
    pub start: usize,
    pub tokens: Vec<u32>,
    /// The sequence's block table, covering at least `start + tokens.len()` positions.
    pub block_table: Vec<BlockId>,
    /// Part of a (re)computed prompt rather than a decode of the last drawn token.
    pub is_prefill: bool,
    /// Drafted tokens at the end of `tokens` (speculative decoding): the chunk is the
    /// sample's last drawn token and then these, each row drawing the token after it.
    pub drafted: usize,
    /// The sequence runs with the LoRA adapter ([`crate::sched::Request::lora`]).
    pub lora: bool,
}

impl Chunk {
    pub fn end(&self) -> usize {
        self.start + self.tokens.len()
    }
}

/// One token to draw from the logits of a row of a chunk: its last row, or any row of a
/// chunk with a draft.
#[derive(Clone, Debug, PartialEq)]
pub struct Draw {
    /// Index into [`StepPlan::chunks`].
    pub chunk: usize,
    /// The row within the chunk (its position is `chunk.start + offset`).
    pub offset: usize,
    pub request: RequestId,
    pub request_index: u32,
    pub sample_index: u32,
    /// The index in the draw's random key: the request's index, or 0 for a request with
    /// its own seed ([`crate::sched::SamplingParams::key_index`]).
    pub key_index: u32,
    /// The position the drawn token will have.
    pub position: u32,
    pub seed: u64,
    /// 0 is greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// What is done to the row's logits before temperature (masks, bias, penalties); the
    /// draws of one row share it.
    pub processing: Arc<RowProcessing>,
    /// Alternatives to return with the draw (0: none).
    pub top_logprobs: usize,
}

/// One given token to score: its log-probability under the logits of a chunk's row.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// Index into [`StepPlan::chunks`].
    pub chunk: usize,
    /// The row within the chunk (its position is `chunk.start + offset`).
    pub offset: usize,
    pub token: u32,
    /// Which sample the score belongs to (a root's first targets fork its samples).
    pub sample_index: u32,
    /// How many of the position's most likely tokens to return with the score.
    pub top_logprobs: usize,
}

/// Everything one step does, in order: `copies`, then the forward pass of every chunk's
/// tokens as one batch, then `draws` and `targets` (the runner returns a token and
/// log-prob per draw and a log-prob per target).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepPlan {
    pub copies: Vec<BlockCopy>,
    pub chunks: Vec<Chunk>,
    pub draws: Vec<Draw>,
    pub targets: Vec<Target>,
    /// The weights the step runs under: each token it draws or scores is labelled so.
    pub weights_version: u64,
    /// The LoRA adapter's version the step runs under (0 without one): each token of a
    /// request run with the adapter is labelled so instead of `weights_version`.
    pub lora_version: u64,
}

impl StepPlan {
    /// The version a token drawn or scored for a request run with (`lora`) or without the
    /// adapter is labelled with.
    pub fn version_for(&self, lora: bool) -> u64 {
        if lora {
            self.lora_version
        } else {
            self.weights_version
        }
    }
}

impl StepPlan {
    /// Tokens computed this step.
    pub fn num_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.tokens.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}
