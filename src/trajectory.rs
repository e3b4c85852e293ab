//! Rollout records: one JSON line per sample, with everything a trainer needs to use it
//! and to reproduce or audit it (the sampling parameters, the seed, and the provenance:
//! which build, model, tokenizer and adapter produced it).

use serde::{Deserialize, Serialize};

use crate::sched::{FinishReason, FinishedSample, SamplingParams};

/// Where a rollout came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub sprout_version: String,
    /// The git commit sprout was built from ("-dirty" when it had local changes).
    pub git_commit: String,
    /// The model file's (or directory's) name.
    pub model_file: String,
    /// SHA-256 of the model file (of a directory: of its files' hashes, see
    /// `model::open::model_sha256`).
    pub model_sha256: String,
    /// Part of every KV block's hash; bump it when the weights change.
    pub weights_version: u64,
    /// SHA-256 of the tokenizer's canonical JSON.
    pub tokenizer_sha256: String,
    /// The weight matrices' stored formats, most used first (`q4_1+q8_0`).
    pub weight_format: String,
    pub backend: String,
    pub adapter: String,
    pub driver: String,
}

impl Provenance {
    /// This build's version and commit; the rest is filled in by the caller.
    pub fn build() -> (String, String) {
        (
            env!("CARGO_PKG_VERSION").to_string(),
            env!("SPROUT_GIT_COMMIT").to_string(),
        )
    }
}

/// The sampling parameters of a record, as the request gave them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingRecord {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub max_tokens: usize,
    pub stop_token_ids: Vec<u32>,
}

impl From<&SamplingParams> for SamplingRecord {
    fn from(p: &SamplingParams) -> Self {
        SamplingRecord {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            max_tokens: p.max_tokens,
            stop_token_ids: p.stop_ids.clone(),
        }
    }
}

/// One sample of a rollout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    pub prompt_index: u32,
    pub sample_index: u32,
    pub prompt_token_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    /// The log-probability of each of `token_ids` under the model (temperature 1).
    pub logprobs: Vec<f32>,
    /// Under the distribution each token was drawn from (after temperature, top-k, top-p
    /// and min-p, renormalised): present when that differs from the model's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_logprobs: Option<Vec<f32>>,
    pub text: String,
    pub finish_reason: FinishReason,
    pub seed: u64,
    pub sampling: SamplingRecord,
    pub provenance: Provenance,
}

impl SampleRecord {
    pub fn new(
        sample: &FinishedSample,
        text: String,
        params: &SamplingParams,
        provenance: &Provenance,
    ) -> SampleRecord {
        SampleRecord {
            prompt_index: sample.request_index,
            sample_index: sample.sample_index,
            prompt_token_ids: sample.prompt_token_ids.clone(),
            token_ids: sample.token_ids.clone(),
            logprobs: sample.logprobs.clone(),
            sampling_logprobs: (!params.is_plain()).then(|| sample.sampling_logprobs.clone()),
            text,
            finish_reason: sample.finish_reason,
            seed: params.seed,
            sampling: params.into(),
            provenance: provenance.clone(),
        }
    }
}
