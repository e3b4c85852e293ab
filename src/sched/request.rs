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
    /// Whether `seed` is the request's own (a prompts-file line's `"seed"`) rather than the
    /// run's: an own seed keys the draws by (seed, 0, sample, position), so the samples
    /// do not depend on where the request stands in its batch; a run's seed keys them by
    /// (seed, request index, sample, position), so the prompts of one run differ.
    pub own_seed: bool,
    /// At least 1.
    pub max_tokens: usize,
    /// Any of these ends a sample (and is kept as its last token).
    pub stop_ids: Vec<u32>,
    /// Before a sample has this many tokens its stop tokens cannot be drawn (they are
    /// masked out of the sampling distribution, not of `logprobs`) and stop strings do not
    /// end it.
    pub min_tokens: usize,
    /// Any of these in a sample's text ends it: the text is cut where the first match
    /// begins, and the tokens after the one holding that point are dropped (needs the
    /// engine to have a tokenizer).
    pub stop: Vec<String>,
    /// Alternatives per position to return with their log-probabilities (0 to
    /// [`MAX_TOP_LOGPROBS`]).
    pub top_logprobs: usize,
    /// What is done to the logits before temperature: masks, bias and penalties.
    pub processing: LogitProcessing,
}

/// What a request does to each row of logits before temperature and truncation, in
/// vLLM's order: the masks (`allowed_token_ids`, `bad_words`; stop tokens before
/// `min_tokens`), then `logit_bias`, then `repetition_penalty` (over the prompt's and the
/// generated tokens), then `frequency_penalty` and `presence_penalty` (over the generated
/// tokens). Each changes only the distribution sampled from: the raw log-probs stay the
/// model's. The defaults do nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct LogitProcessing {
    /// Only these tokens may be drawn (`None`: every token). Not empty.
    pub allowed_token_ids: Option<Vec<u32>>,
    /// Token sequences a sample must not generate: a sequence's last token is masked
    /// wherever the generated tokens end with the rest of it (a one-token sequence is
    /// masked everywhere). None empty.
    pub bad_words: Vec<Vec<u32>>,
    /// Added to a token's logit: (token, bias), each token once, biases in [-100, 100].
    pub logit_bias: Vec<(u32, f32)>,
    /// Greater than 0 (1: off). A token of the prompt or of the generated tokens has a
    /// positive logit divided by it and a negative one multiplied by it.
    pub repetition_penalty: f32,
    /// In [-2, 2] (0: off). Subtracted from the logit of each token generated at least once.
    pub presence_penalty: f32,
    /// In [-2, 2] (0: off). Subtracted from a token's logit once per time it was generated.
    pub frequency_penalty: f32,
}

impl Default for LogitProcessing {
    fn default() -> Self {
        LogitProcessing {
            allowed_token_ids: None,
            bad_words: Vec::new(),
            logit_bias: Vec::new(),
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }
}

impl LogitProcessing {
    /// Whether it leaves every logit as it is.
    pub fn is_neutral(&self) -> bool {
        self.allowed_token_ids.is_none()
            && self.bad_words.is_empty()
            && self.logit_bias.is_empty()
            && !self.has_penalties()
    }

    /// Whether a penalty is on (the logits then depend on the tokens generated so far).
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
    }

    /// Whether a row's processing depends on the tokens generated before it: a penalty,
    /// or a bad word of more than one token. Such a sample's next step cannot be planned
    /// before its last token is known.
    pub fn depends_on_output(&self) -> bool {
        self.has_penalties() || self.bad_words.iter().any(|w| w.len() > 1)
    }
}

/// The most alternatives a position may ask for (the kernel's limit).
pub use crate::gpu::kernels::top_logprobs::MAX_TOP_LOGPROBS;

impl Default for SamplingParams {
    /// Temperature 1 with no truncation, seed 0, 16 tokens, no stop tokens or strings, no
    /// alternatives.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            own_seed: false,
            max_tokens: 16,
            stop_ids: Vec::new(),
            min_tokens: 0,
            stop: Vec::new(),
            top_logprobs: 0,
            processing: LogitProcessing::default(),
        }
    }
}

impl SamplingParams {
    /// Whether the draws come from the model's own distribution (temperature 1, nothing
    /// cut, masked, biased or penalised), so that sampling log-probs equal the raw ones.
    pub fn is_plain(&self) -> bool {
        self.temperature == 1.0
            && self.top_k == 0
            && self.top_p >= 1.0
            && self.min_p <= 0.0
            && self.processing.is_neutral()
    }

    /// The index that keys a draw of request `request_index` together with the seed, the
    /// sample index and the position (see [`SamplingParams::own_seed`]).
    pub fn key_index(&self, request_index: u32) -> u32 {
        if self.own_seed { 0 } else { request_index }
    }
}

/// One prompt, sampled `n` times (a group): the prompt is computed once and its blocks are
/// shared by every sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The prompt's index in its batch: part of every draw's random key, together with the
    /// seed, the sample index and the position, unless the request has its own seed
    /// ([`SamplingParams::own_seed`]).
    pub index: u32,
    pub prompt: Vec<u32>,
    /// Samples in the group, at least 1.
    pub n: usize,
    pub params: SamplingParams,
    /// Teacher forcing: when not empty, the `n` completions to score instead of sampling
    /// (`forced[k]` is sample k's tokens; each gets the log-probability of every token).
    pub forced: Vec<Vec<u32>>,
    /// vLLM's `cache_salt`: the request's blocks are named under this salt
    /// ([`crate::kv::BlockHash::salt_root`]), so that it shares prefix-cache blocks only
    /// with requests of the same salt; `None` shares with every unsalted request.
    pub cache_salt: Option<String>,
    /// Whether the request runs with the engine's LoRA adapter
    /// ([`crate::sched::Scheduler::set_lora`]); `false`: the base model alone. Its blocks
    /// are named under the adapter ([`crate::kv::BlockHash::lora_root`]), so it shares
    /// prefix-cache blocks only with requests of the same adapter contents and version.
    pub lora: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// A stop token was drawn or a stop string appeared.
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
    /// Per token, the `top_logprobs` most likely tokens of its position (most likely
    /// first) with their log-probabilities under the model; empty when none were asked.
    pub top_logprobs: Vec<Vec<TopLogprob>>,
    /// Per scored token (teacher forcing only; empty when sampling), its 1-based rank under
    /// the model: its place in the order of the position's logits (largest first, lowest
    /// id first among equal ones), the order of `top_logprobs`.
    pub ranks: Vec<u32>,
    /// Per token, the weights version it was drawn or scored under (they differ only when
    /// the weights were updated while the sample ran).
    pub weights_versions: Vec<u64>,
    pub finish_reason: FinishReason,
    /// When a stop string ended the sample: which one, and the text cut before it.
    pub stopped_by: Option<StopMatch>,
    /// Prompt tokens the prefix cache held when the prompt was first admitted (0 when it
    /// never was: aborted while waiting).
    pub cached_prompt_tokens: usize,
}

/// One alternative at a position.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: u32,
    /// Under the model (temperature 1, no truncation).
    pub logprob: f32,
}

/// A stop string found in a sample's text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopMatch {
    /// The stop string.
    pub stop: String,
    /// The sample's text up to where the stop string begins.
    pub text: String,
}
