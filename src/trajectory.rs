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
    /// The LoRA adapter the samples ran with, if any (absent from records without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraProvenance>,
}

/// Which LoRA adapter a record's samples ran with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraProvenance {
    /// The adapter's directory name (or the name a server loaded it under).
    pub name: String,
    /// SHA-256 of its files (`model::lora::LoraAdapter::digest`).
    pub sha256: String,
    /// Its version: bumped by each load of new contents under its name.
    pub version: u64,
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
    pub min_tokens: usize,
    pub stop_token_ids: Vec<u32>,
    pub stop: Vec<String>,
    pub top_logprobs: usize,
    /// The logit processors, each written only when it does something (records of runs
    /// without them read as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_token_ids: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_words: Vec<Vec<u32>>,
    /// (token, bias) pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logit_bias: Vec<(u32, f32)>,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub repetition_penalty: f32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub presence_penalty: f32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frequency_penalty: f32,
}

fn one() -> f32 {
    1.0
}

fn is_one(x: &f32) -> bool {
    *x == 1.0
}

fn is_zero(x: &f32) -> bool {
    *x == 0.0
}

impl From<&SamplingParams> for SamplingRecord {
    fn from(p: &SamplingParams) -> Self {
        SamplingRecord {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            max_tokens: p.max_tokens,
            min_tokens: p.min_tokens,
            stop_token_ids: p.stop_ids.clone(),
            stop: p.stop.clone(),
            top_logprobs: p.top_logprobs,
            allowed_token_ids: p.processing.allowed_token_ids.clone(),
            bad_words: p.processing.bad_words.clone(),
            logit_bias: p.processing.logit_bias.clone(),
            repetition_penalty: p.processing.repetition_penalty,
            presence_penalty: p.processing.presence_penalty,
            frequency_penalty: p.processing.frequency_penalty,
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
    /// Under the distribution each token was drawn from (after masks, bias, penalties,
    /// temperature, top-k, top-p and min-p, renormalised): present when that differs from
    /// the model's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_logprobs: Option<Vec<f32>>,
    /// Per token, the most likely tokens at its position (most likely first) under the
    /// model: present when asked for (`sampling.top_logprobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<Vec<Vec<Alternative>>>,
    /// The completion's text; cut before the stop string when one ended it.
    pub text: String,
    pub finish_reason: FinishReason,
    /// The stop string that ended the sample, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_string: Option<String>,
    pub seed: u64,
    pub sampling: SamplingRecord,
    pub provenance: Provenance,
}

/// One of the most likely tokens at a position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub token_id: u32,
    /// The token's own text.
    pub text: String,
    /// Under the model (temperature 1, no truncation).
    pub logprob: f32,
}

impl SampleRecord {
    /// The record of `sample`; `text` is its decoded completion (a stop string's cut text
    /// replaces it) and `token_text` names a single token, for the alternatives.
    pub fn new(
        sample: &FinishedSample,
        text: String,
        token_text: impl Fn(u32) -> String,
        params: &SamplingParams,
        provenance: &Provenance,
    ) -> SampleRecord {
        let top_logprobs = (params.top_logprobs > 0).then(|| {
            sample
                .top_logprobs
                .iter()
                .map(|position| {
                    position
                        .iter()
                        .map(|t| Alternative {
                            token_id: t.token,
                            text: token_text(t.token),
                            logprob: t.logprob,
                        })
                        .collect()
                })
                .collect()
        });
        let (text, stop_string) = match &sample.stopped_by {
            Some(m) => (m.text.clone(), Some(m.stop.clone())),
            None => (text, None),
        };
        SampleRecord {
            prompt_index: sample.request_index,
            sample_index: sample.sample_index,
            prompt_token_ids: sample.prompt_token_ids.clone(),
            token_ids: sample.token_ids.clone(),
            logprobs: sample.logprobs.clone(),
            sampling_logprobs: (!params.is_plain()).then(|| sample.sampling_logprobs.clone()),
            top_logprobs,
            text,
            finish_reason: sample.finish_reason,
            stop_string,
            seed: params.seed,
            sampling: params.into(),
            provenance: provenance.clone(),
        }
    }
}

/// `value` as a JSON value whose f32 numbers keep their shortest form (`-2.1097965`):
/// `serde_json::to_value` widens an f32 to f64 and writes every digit of that
/// (`-2.1097965240478516`), which reads back as the same f32 but no longer as the same text.
/// A NaN or an infinity is an error naming where it is ([`check_finite`]), never `null`.
pub fn to_json_value<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<serde_json::Value> {
    check_finite(value).map_err(serde::ser::Error::custom)?;
    serde_json::from_str(&serde_json::to_string(value)?)
}

/// Fails on the first non-finite number in `value`, naming its path
/// (`"logprobs"[3] is NaN, and JSON has no such number`).
///
/// `serde_json` writes a NaN or an infinity as `null`, so a broken log-prob would reach a
/// trainer as a missing value: every writer of JSON checks here first.
pub fn check_finite<T: Serialize + ?Sized>(value: &T) -> Result<(), String> {
    let captured = serde_value::to_value(value).map_err(|e| e.to_string())?;
    first_non_finite(&captured, &mut String::new())
}

fn first_non_finite(value: &serde_value::Value, path: &mut String) -> Result<(), String> {
    use serde_value::Value;
    let bad = match value {
        Value::F32(x) if !x.is_finite() => Some(*x as f64),
        Value::F64(x) if !x.is_finite() => Some(*x),
        _ => None,
    };
    if let Some(x) = bad {
        let at = if path.is_empty() { "the value" } else { path };
        return Err(format!("{at} is {x}, and JSON has no such number"));
    }
    let mark = path.len();
    match value {
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                first_non_finite(item, path)?;
                path.truncate(mark);
            }
        }
        Value::Map(map) => {
            for (key, item) in map {
                match key {
                    Value::String(k) => path.push_str(&format!("\"{k}\"")),
                    _ => path.push_str("[key]"),
                }
                first_non_finite(key, path)?;
                first_non_finite(item, path)?;
                path.truncate(mark);
            }
        }
        Value::Option(Some(inner)) | Value::Newtype(inner) => first_non_finite(inner, path)?,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn f32_values_keep_their_shortest_text() {
        let v = super::to_json_value(&vec![-2.1097965f32, -0.00015640259]).unwrap();
        assert_eq!(v.to_string(), "[-2.1097965,-0.00015640259]");
        let widened = serde_json::to_value(vec![-2.1097965f32]).unwrap();
        assert_ne!(widened.to_string(), "[-2.1097965]");
    }

    #[derive(serde::Serialize)]
    struct Record {
        logprobs: Vec<f32>,
        nested: Option<Vec<Vec<f64>>>,
    }

    #[test]
    fn a_non_finite_number_is_an_error_naming_where_it_is() {
        let r = Record {
            logprobs: vec![-1.0, -2.0, -3.0, f32::NAN],
            nested: None,
        };
        let e = super::to_json_value(&r).unwrap_err().to_string();
        assert!(e.contains("\"logprobs\"[3] is NaN"), "{e}");
        let r = Record {
            logprobs: vec![],
            nested: Some(vec![vec![0.0], vec![1.0, f64::NEG_INFINITY]]),
        };
        let e = super::check_finite(&r).unwrap_err();
        assert!(e.contains("\"nested\"[1][1] is -inf"), "{e}");
        assert!(super::check_finite(&f32::INFINITY).is_err());
        let fine = Record {
            logprobs: vec![-0.5],
            nested: Some(vec![vec![2.0]]),
        };
        assert_eq!(
            super::to_json_value(&fine).unwrap().to_string(),
            r#"{"logprobs":[-0.5],"nested":[[2.0]]}"#
        );
    }
}
