//! `POST /generate/` in the schema of TRL's `trl vllm-serve`, so that TRL's `VLLMClient`
//! (and a GRPO trainer in its server mode) can roll out on sprout.
//!
//! Request: `{prompts, n, temperature, top_p, top_k, min_p, max_tokens, logprobs,
//! repetition_penalty, images, structured_outputs_regex, generation_kwargs}`. What sprout
//! cannot do is refused by name (images, a regex), never ignored; of `generation_kwargs` sprout reads `seed`, `stop_token_ids`, `ignore_eos` and
//! `min_tokens`, and refuses any other key.
//!
//! Response: `{prompt_ids, completion_ids, logprobs, logprob_token_ids}`, as TRL's server
//! gives them: one `prompt_ids` entry per prompt, one completion per sample (prompt-major);
//! per token the sampled token's log-prob under the model (under the distribution it was
//! drawn from with `--logprobs-mode processed_logprobs`), then with `logprobs: N > 0`
//! the N most likely tokens too (the sampled one once), most likely first. sprout adds
//! `weights_versions` (each completion's last token's version) and `finish_reasons` (each
//! completion's: "stop", "length", or "abort" when `/abort_requests` or
//! `/pause?mode=abort` cut it short; an aborted completion holds the tokens drawn and
//! their log-probs, so a trainer can resubmit prompt + partial).
//!
//! TRL's client also calls `GET /health/` and `POST /reset_prefix_cache/` (with the
//! slash): those paths answer as their unslashed twins.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use serde::Serialize;
use serde_json::{Map, Value};
use sprout::sched::{FinishReason, FinishedSample};

use crate::cli::serve::error::ApiError;
use crate::cli::serve::error::internal;
use crate::cli::serve::parsing::Parsing;
use crate::cli::serve::reply;
use crate::cli::serve::request::{self, SamplingFields, check_top, field, object, prompts};
use crate::cli::serve::response::Api;
use crate::cli::serve::state::AppState;
use crate::cli::serve::submit::{self, Submission, check_context, check_model, tokenize};

/// The keys of `generation_kwargs` sprout reads.
const GENERATION_KWARGS: &[&str] = &["seed", "stop_token_ids", "ignore_eos", "min_tokens"];

/// A `/generate/` body as the fields the completions API shares.
fn parse(body: &[u8]) -> Result<(Vec<request::Prompt>, SamplingFields), ApiError> {
    let obj = object(body)?;
    let prompts = prompts(obj.get("prompts"), "prompts")?;
    refuse_unsupported(&obj)?;
    // The same fields under the completions API's names, checked by the same rules.
    let mut shared = Map::new();
    for key in [
        "model",
        "n",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "repetition_penalty",
    ] {
        if let Some(v) = obj.get(key) {
            shared.insert(key.to_string(), v.clone());
        }
    }
    match obj.get("generation_kwargs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(kwargs)) => {
            for (key, value) in kwargs {
                if !GENERATION_KWARGS.contains(&key.as_str()) {
                    return Err(ApiError::bad(
                        "generation_kwargs",
                        format!(
                            "generation_kwargs.{key} is not supported (sprout reads {})",
                            GENERATION_KWARGS.join(", ")
                        ),
                    ));
                }
                shared.insert(key.clone(), value.clone());
            }
        }
        Some(v) => {
            return Err(ApiError::bad(
                "generation_kwargs",
                format!(
                    "generation_kwargs must be an object, not {}",
                    crate::cli::serve::error::short(v)
                ),
            ));
        }
    }
    let mut fields = SamplingFields::parse(&shared)?;
    // TRL's default is 0: the sampled token's log-prob only; null: none.
    let logprobs: Option<usize> = match obj.get("logprobs") {
        None => Some(0),
        Some(_) => field(&obj, "logprobs", "a non-negative integer or null")?,
    };
    fields.logprobs = logprobs.map(|k| check_top("logprobs", k)).transpose()?;
    Ok((prompts, fields))
}

/// What sprout cannot do, by name.
fn refuse_unsupported(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let images = match obj.get("images") {
        None | Some(Value::Null) => false,
        Some(Value::Array(per_prompt)) => per_prompt.iter().any(|i| !i.is_null()),
        Some(_) => true,
    };
    if images {
        return Err(ApiError::bad(
            "images",
            "images are not supported (text only)",
        ));
    }
    if !matches!(
        obj.get("structured_outputs_regex"),
        None | Some(Value::Null)
    ) {
        return Err(ApiError::bad(
            "structured_outputs_regex",
            "structured_outputs_regex: structured outputs are not supported",
        ));
    }
    Ok(())
}

pub async fn generate(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let arrived = Instant::now();
    let body = body.map_err(|e| ApiError::status(e.status(), e.body_text()))?;
    let shared = state.clone();
    let submission = tokio::task::spawn_blocking(move || {
        let state = shared;
        let (prompts, fields) = parse(&body)?;
        check_model(&state, &fields)?;
        let prompts = tokenize(&state, &prompts, true)?;
        let max_tokens = fields.max_tokens.unwrap_or(request::DEFAULT_MAX_TOKENS);
        check_context(&state, &prompts, max_tokens)?;
        Ok::<_, ApiError>(Submission {
            api: Api::Completions,
            fields,
            prompts,
            max_tokens,
            echo: Vec::new(),
            arrived,
            parsing: Parsing::default(),
        })
    })
    .await
    .map_err(internal)??;
    let (job, events, pending) = submit::submit(&state, submission).await?;
    let samples = reply::collect(&job, events, pending).await?;
    let want = job.fields.logprobs;
    let (logprobs, logprob_ids): (Vec<_>, Vec<_>) = samples
        .iter()
        .map(|s| per_token(s, reply::reported(&state, s), want))
        .unzip();
    let in_force = state
        .weights_version
        .load(std::sync::atomic::Ordering::Acquire);
    let versions: Vec<u64> = samples
        .iter()
        .map(|s| s.weights_versions.last().copied().unwrap_or(in_force))
        .collect();
    let body = GenerateResponse {
        prompt_ids: &job.prompts,
        completion_ids: samples.iter().map(|s| s.token_ids.as_slice()).collect(),
        logprobs: want.map(|_| logprobs),
        logprob_token_ids: want.map(|_| logprob_ids),
        weights_versions: versions,
        finish_reasons: samples.iter().map(|s| s.finish_reason).collect(),
    };
    // Through `json_out`: a NaN log-prob is an error, never a silent null.
    let body = crate::cli::json_out::to_value(&body).map_err(internal)?;
    Ok(Json(body))
}

#[derive(Serialize)]
struct GenerateResponse<'a> {
    prompt_ids: &'a [Vec<u32>],
    completion_ids: Vec<&'a [u32]>,
    logprobs: Option<Vec<Vec<Vec<f32>>>>,
    logprob_token_ids: Option<Vec<Vec<Vec<u32>>>>,
    weights_versions: Vec<u64>,
    finish_reasons: Vec<FinishReason>,
}

/// Per token of `s`: the log-probs and their token ids, the sampled token's first with
/// `top` = 0 (from `sampled`: the model's, or under `--logprobs-mode processed_logprobs`
/// the distribution it was drawn from), else the `top` most likely and the sampled one,
/// most likely first.
fn per_token(
    s: &FinishedSample,
    sampled: &[f32],
    top: Option<usize>,
) -> (Vec<Vec<f32>>, Vec<Vec<u32>>) {
    let Some(top) = top else {
        return (Vec::new(), Vec::new());
    };
    let mut logprobs = Vec::with_capacity(s.token_ids.len());
    let mut ids = Vec::with_capacity(s.token_ids.len());
    for (i, (&token, &lp)) in s.token_ids.iter().zip(sampled).enumerate() {
        let mut entries: Vec<(u32, f32)> = vec![(token, lp)];
        if top > 0 {
            for alt in s.top_logprobs.get(i).into_iter().flatten().take(top) {
                if alt.token != token {
                    entries.push((alt.token, alt.logprob));
                }
            }
            // Most likely first; the sampled token keeps its place among equals.
            entries.sort_by(|a, b| b.1.total_cmp(&a.1));
        }
        logprobs.push(entries.iter().map(|e| e.1).collect());
        ids.push(entries.iter().map(|e| e.0).collect());
    }
    (logprobs, ids)
}
