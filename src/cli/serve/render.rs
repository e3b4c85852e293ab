//! `POST /v1/chat/completions/render` and `POST /v1/completions/render`: a request of
//! either route, read and checked exactly as the route reads it (the same parser, template,
//! tokenization, truncation and `max_tokens` default), answered with what the route would
//! have run instead of running it: vLLM's `GenerateRequest` (`token_ids`, and
//! `sampling_params` in vLLM's `SamplingParams` names), one for chat (plus `prompt`, the
//! rendered text) and a list of them, one per prompt, for completions.
//!
//! Posting a rendered request to `/inference/v1/generate` samples what the route would
//! have: the same ids, the same parameters (the `max_tokens` the route resolved, the seed
//! when the request had one), so the same tokens and log-probs.
//!
//! With earlier turns' exact tokens (`token_prefix`), `token_ids` are the spliced prompt
//! the route runs, while `prompt` stays the template's text of the whole conversation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::cli::json_out;
use crate::cli::serve::error::{ApiError, internal};
use crate::cli::serve::handlers::{chat_submission, prepare_completion, prepared};
use crate::cli::serve::sampling;
use crate::cli::serve::state::AppState;
use crate::cli::serve::submit::{Submission, now_s};

/// vLLM's `GenerateRequest`, as a route would have run it.
#[derive(Serialize)]
struct Rendered<'a> {
    request_id: String,
    token_ids: &'a [u32],
    sampling_params: Params<'a>,
    model: Option<&'a str>,
    stream: bool,
    stream_options: Option<StreamOptions>,
    cache_salt: Option<&'a str>,
    priority: u8,
    kv_transfer_params: Option<()>,
    features: Option<()>,
    /// Chat: the prompt's text as the template rendered it.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The sampling fields sprout implements, in `SamplingParams` names.
#[derive(Serialize)]
struct Params<'a> {
    n: usize,
    temperature: f32,
    top_p: f32,
    top_k: usize,
    min_p: f32,
    seed: Option<u64>,
    stop: &'a [String],
    stop_token_ids: &'a [u32],
    ignore_eos: bool,
    max_tokens: usize,
    min_tokens: usize,
    logprobs: Option<usize>,
    prompt_logprobs: Option<usize>,
    presence_penalty: f32,
    frequency_penalty: f32,
    repetition_penalty: f32,
    logit_bias: Option<BTreeMap<String, f32>>,
    allowed_token_ids: Option<&'a [u32]>,
    bad_words: &'a [String],
    skip_special_tokens: bool,
    include_stop_str_in_output: bool,
}

/// What `s` would run for its prompt `ids`, under `request_id`.
fn rendered<'a>(s: &'a Submission, ids: &'a [u32], request_id: String) -> Rendered<'a> {
    let f = &s.fields;
    Rendered {
        request_id,
        token_ids: ids,
        sampling_params: Params {
            n: f.n,
            temperature: f.temperature,
            top_p: f.top_p,
            top_k: f.top_k,
            min_p: f.min_p,
            seed: f.seed,
            stop: &f.stop,
            stop_token_ids: &f.stop_token_ids,
            ignore_eos: f.ignore_eos,
            max_tokens: s.max_tokens,
            min_tokens: f.min_tokens,
            logprobs: f.logprobs,
            prompt_logprobs: f.prompt_logprobs,
            presence_penalty: f.presence_penalty,
            frequency_penalty: f.frequency_penalty,
            repetition_penalty: f.repetition_penalty,
            logit_bias: (!f.logit_bias.is_empty()).then(|| {
                f.logit_bias
                    .iter()
                    .map(|(t, b)| (t.to_string(), *b))
                    .collect()
            }),
            allowed_token_ids: f.allowed_token_ids.as_deref(),
            bad_words: &f.bad_words,
            skip_special_tokens: f.skip_special_tokens,
            include_stop_str_in_output: f.include_stop_str_in_output,
        },
        model: f.model.as_deref(),
        stream: f.stream,
        stream_options: f.stream.then_some(StreamOptions {
            include_usage: f.include_usage,
        }),
        cache_salt: f.cache_salt.as_deref(),
        priority: 0,
        kv_transfer_params: None,
        features: None,
        prompt: None,
    }
}

/// The request's own id, else a new one (each rendered request may be posted while the
/// others run, so no two share one).
fn request_id(state: &AppState, s: &Submission, prompt: usize) -> String {
    match (&s.fields.request_id, prompt) {
        (Some(id), 0) => id.clone(),
        (Some(id), k) => format!("{id}-{k}"),
        (None, _) => {
            let serial = state.next_index.fetch_add(1, Ordering::Relaxed);
            format!("{}-render-{}-{serial}", s.api.id_prefix(), now_s())
        }
    }
}

/// The checks the route makes when it queues `s`: the sampling rules and the request
/// limits (not the queue's room: nothing is queued).
fn check(state: &AppState, s: &Submission) -> Result<(), ApiError> {
    sampling::params(state, s.api, &s.fields, s.max_tokens)?;
    sampling::check_limits(state, s.prompts.len(), s.fields.n)?;
    Ok(())
}

fn json(value: &impl Serialize) -> Result<Response, ApiError> {
    let text = json_out::to_line(value).map_err(internal)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

pub async fn chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (text, s) = prepared(&state, body, chat_submission).await?;
    check(&state, &s)?;
    let mut one = rendered(&s, &s.prompts[0], request_id(&state, &s, 0));
    one.prompt = Some(&text);
    json(&one)
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = prepared(&state, body, render_completion).await?;
    check(&state, &s)?;
    let all: Vec<Rendered> = s
        .prompts
        .iter()
        .enumerate()
        .map(|(k, ids)| rendered(&s, ids, request_id(&state, &s, k)))
        .collect();
    json(&all)
}

/// A completions body as the route reads it; `echo` puts the prompt's text in the answer,
/// which a generate request cannot ask for.
fn render_completion(
    state: &AppState,
    body: &[u8],
    arrived: Instant,
) -> Result<Submission, ApiError> {
    let s = prepare_completion(state, body, arrived)?;
    match s.fields.echo {
        true => Err(ApiError::bad(
            "echo",
            "echo has no generate equivalent: the rendered request would not echo",
        )),
        false => Ok(s),
    }
}
