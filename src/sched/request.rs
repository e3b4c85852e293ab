//! What a caller asks for (a prompt sampled `n` times) and what comes back per sample.

use serde::{Deserialize, Serialize};

/// The scheduler's name for a request, in the order requests were added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RequestId(pub u64);

/// How a request's samples are drawn and when they stop.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 is greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the fewest most likely tokens whose probability reaches p (1: all).
    pub top_p: f32,
    /// Keep tokens at least min_p times as likely as the most likely one (0: all).
    pub min_p: f32,
    pub seed: u64,
    /// At least 1.
    pub max_tokens: usize,
    /// Any of these ends a sample (and is kept as its last token).
    pub stop_ids: Vec<u32>,
}

impl Default for SamplingParams {
    /// Temperature 1 with no truncation, seed 0, 16 tokens, no stop tokens.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            max_tokens: 16,
            stop_ids: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Whether the draws come from the model's own distribution (temperature 1, nothing
    /// cut), so that sampling log-probs equal the raw ones.
    pub fn is_plain(&self) -> bool {
        self.temperature == 1.0 && self.top_k == 0 && self.top_p >= 1.0 && self.min_p <= 0.0
    }
}

/// One prompt, sampled `n` times (a group): the prompt is computed once and its blocks are
/// shared by every sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The prompt's index in its batch: part of every draw's random key, together with the
    /// seed, the sample index and the position.
    pub index: u32,
    pub prompt: Vec<u32>,
    /// Samples in the group, at least 1.
    pub n: usize,
    pub params: SamplingParams,
    /// Teacher forcing: when not empty, the `n` completions to score instead of sampling
    /// (`forced[k]` is sample k's tokens; each gets the log-probability of every token).
    pub forced: Vec<Vec<u32>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// A stop token was drawn.
    Stop,
    /// `max_tokens` or the model's context was reached.
    Length,
    /// The request was aborted; the sample holds what it had generated.
    Abort,
}

/// A sample that will not change any more.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedSample {
    pub request: RequestId,
    pub request_index: u32,
    pub sample_index: u32,
    pub prompt_token_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    /// The log-probability of each of `token_ids` under the model (temperature 1).
    pub logprobs: Vec<f32>,
    /// The log-probability of each of `token_ids` under the distribution it was drawn from
    /// (after temperature, top-k, top-p and min-p, renormalised); empty when scoring.
    pub sampling_logprobs: Vec<f32>,
    pub finish_reason: FinishReason,
}
