//! The HTTP routes: `POST /v1/completions`, `GET /v1/models`, `GET /health`,
//! `GET /metrics`, with the API-key check and one access-log line per request.
//!
//! A completion request becomes one engine request per prompt, each sampled `n` times,
//! all joining the engine's one continuous batch. Its choices are indexed
//! `prompt * n + sample`. A request holds a [`Pending`] guard from the moment it is
//! queued: dropping it (the response is done, or the client went away and its future or
//! stream was dropped) gives back its share of `--max-queued-requests` and, if samples
//! were still running, aborts them so that their KV blocks are freed.
//!
//! Seeds: a request with a `seed` has its own seed (`SamplingParams::own_seed`), so its
//! draws are keyed by (seed, 0, sample, position) and equal `sprout rollout --prompt ...
//! --seed` whatever else is in the batch. Without one, draws are keyed by the server's
//! random base seed and the request's index, which differs for every prompt served.
//!
//! Streaming: without stop strings or log-probs a sample's tokens go out as they are
//! drawn; with either, its content goes out in one chunk when it finishes (a stop string
//! can cut tokens already drawn, and the alternatives come with the finished sample).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use sprout::sched::{FinishedSample, Request, SamplingParams};
use sprout::tokenizer::IncrementalDecoder;
use tokio::sync::{mpsc, oneshot};

use crate::cli::json_out;
use crate::cli::serve::engine_thread::{Command, EngineHandle, Event, ModelFacts};
use crate::cli::serve::error::ApiError;
use crate::cli::serve::openai::{self, Choice, Completion, CompletionRequest, Prompt, Usage};

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Everything the handlers share.
pub struct AppState {
    pub engine: EngineHandle,
    pub facts: ModelFacts,
    pub served_name: String,
    pub max_model_len: usize,
    pub api_key: Option<String>,
    /// The most samples (each of `n` counted) queued or running at once.
    pub max_queued: usize,
    pub queued: AtomicUsize,
    pub next_index: AtomicU32,
    /// Keys the draws of requests without a seed of their own.
    pub base_seed: u64,
    /// When the server started (Unix seconds): `/v1/models`' `created`.
    pub started: u64,
}

pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route_layer(middleware::from_fn_with_state(state.clone(), check_key));
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(v1)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(refuse_long_bodies))
        .layer(middleware::from_fn(access_log))
        .with_state(state)
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One line per request: method, path, status, duration.
async fn access_log(request: HttpRequest, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let start = Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        "{method} {path} {} {:.1}ms",
        response.status().as_u16(),
        start.elapsed().as_secs_f64() * 1e3
    );
    response
}

/// Refuses a body whose declared length is over the limit before reading any of it (the
/// body limit itself only stops a body once that much has arrived).
async fn refuse_long_bodies(request: HttpRequest, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = declared
        && length > MAX_BODY_BYTES as u64
    {
        return ApiError::status(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is {length} bytes, over the limit of {MAX_BODY_BYTES}"),
        )
        .into_response();
    }
    next.run(request).await
}

/// With `--api-key`, the `/v1` routes need `Authorization: Bearer KEY`.
async fn check_key(
    State(state): State<Arc<AppState>>,
    request: HttpRequest,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return ApiError::status(
                StatusCode::UNAUTHORIZED,
                "a valid API key is required: Authorization: Bearer KEY",
            )
            .into_response();
        }
    }
    next.run(request).await
}

async fn not_found(request: HttpRequest) -> ApiError {
    ApiError::status(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

async fn health(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let m = &state.engine.metrics;
    Json(json!({
        "status": "ok",
        "requests_running": m.num_requests_running.get(),
        "requests_waiting": m.num_requests_waiting.get(),
        "queued_samples": state.queued.load(Ordering::Relaxed),
        "kv_blocks_in_use": m.kv_blocks_in_use.get(),
        "kv_blocks": state.facts.kv_blocks,
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let text = state.engine.metrics.render().map_err(internal)?;
    let kind = "text/plain; version=0.0.4; charset=utf-8";
    Ok(([(header::CONTENT_TYPE, kind)], text).into_response())
}

async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.served_name,
            "object": "model",
            "created": state.started,
            "owned_by": "sprout",
            "root": state.facts.model_path,
            "parent": null,
            "max_model_len": state.max_model_len,
        }],
    }))
}

/// A queued completion's claim on the engine: see the module docs.
struct Pending {
    state: Arc<AppState>,
    indexes: Vec<u32>,
    reserved: usize,
    done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.state
            .queued
            .fetch_sub(self.reserved, Ordering::Relaxed);
        if !self.done {
            let indexes = std::mem::take(&mut self.indexes);
            let _ = self.state.engine.send(Command::Abort { indexes });
        }
    }
}

/// What one completion asked for, once checked.
struct Job {
    id: String,
    created: u64,
    request: CompletionRequest,
    prompts: Vec<Vec<u32>>,
    /// The engine index of the first prompt; prompt i has `base + i`.
    base: u32,
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let body = body.map_err(|e| ApiError::status(e.status(), e.body_text()))?;
    let request = CompletionRequest::parse(&body)?;
    if let Some(model) = &request.model
        && *model != state.served_name
    {
        return Err(ApiError {
            param: Some("model".into()),
            ..ApiError::status(
                StatusCode::NOT_FOUND,
                format!(
                    "the model `{model}` does not exist (this server serves `{}`)",
                    state.served_name
                ),
            )
        });
    }
    let prompts = tokenize(&state, &request)?;
    let params = sampling_params(&state, &request)?;
    let total = prompts.len().saturating_mul(request.n);
    reserve(&state, total)?;
    let base = state
        .next_index
        .fetch_add(prompts.len() as u32, Ordering::Relaxed);
    let mut pending = Pending {
        state: state.clone(),
        indexes: (0..prompts.len() as u32)
            .map(|i| base.wrapping_add(i))
            .collect(),
        reserved: total,
        done: false,
    };
    let requests = prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| Request {
            index: base.wrapping_add(i as u32),
            prompt: prompt.clone(),
            n: request.n,
            params: params.clone(),
            forced: Vec::new(),
        })
        .collect();
    let stream_tokens = request.stream && request.stop.is_empty() && request.logprobs.is_none();
    let (events, receiver) = mpsc::unbounded_channel();
    let (reply, added) = oneshot::channel();
    state
        .engine
        .send(Command::Add {
            requests,
            stream_tokens,
            events,
            arrived,
            reply,
        })
        .map_err(|e| ApiError::status(StatusCode::SERVICE_UNAVAILABLE, e))?;
    match added.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            pending.done = true;
            return Err(ApiError::bad("prompt", e));
        }
        Err(_) => {
            return Err(ApiError::status(
                StatusCode::SERVICE_UNAVAILABLE,
                "the engine has stopped",
            ));
        }
    }
    let created = now_s();
    let job = Job {
        id: format!("cmpl-{created}-{base}"),
        created,
        request,
        prompts,
        base,
    };
    if job.request.stream {
        Ok(stream_response(state, job, receiver, pending))
    } else {
        whole_response(&state, job, receiver, pending).await
    }
}

/// Each prompt's token ids, checked: not empty, inside the vocabulary, and with
/// `max_tokens` within the context.
fn tokenize(state: &AppState, r: &CompletionRequest) -> Result<Vec<Vec<u32>>, ApiError> {
    let vocab = state.facts.vocab_size;
    let mut out = Vec::new();
    for prompt in &r.prompts {
        let ids = match prompt {
            Prompt::Text(text) => state.facts.tokenizer.encode(text).map_err(|e| {
                ApiError::bad("prompt", format!("the prompt could not be tokenized: {e}"))
            })?,
            Prompt::Ids(ids) => ids.clone(),
        };
        if ids.is_empty() {
            return Err(ApiError::bad("prompt", "prompt must not be empty"));
        }
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::bad(
                "prompt",
                format!("prompt token id {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        let wanted = ids.len().saturating_add(r.max_tokens);
        if wanted > state.max_model_len {
            return Err(ApiError::bad(
                "max_tokens",
                format!(
                    "This model's maximum context length is {} tokens. However, you requested \
                     {wanted} tokens ({} in the prompt, {} for the completion). Please reduce \
                     the length of the prompt or completion.",
                    state.max_model_len,
                    ids.len(),
                    r.max_tokens
                ),
            ));
        }
        out.push(ids);
    }
    Ok(out)
}

/// The request's sampling parameters, checked by the one set of rules.
fn sampling_params(state: &AppState, r: &CompletionRequest) -> Result<SamplingParams, ApiError> {
    let vocab = state.facts.vocab_size;
    let mut stop_ids = match r.ignore_eos {
        true => Vec::new(),
        false => state.facts.eos_token_ids.clone(),
    };
    for &id in &r.stop_token_ids {
        if id as usize >= vocab {
            return Err(ApiError::bad(
                "stop_token_ids",
                format!("stop token id {id} is outside the vocabulary of {vocab}"),
            ));
        }
        if !stop_ids.contains(&id) {
            stop_ids.push(id);
        }
    }
    let params = SamplingParams {
        temperature: r.temperature,
        top_k: r.top_k,
        top_p: r.top_p,
        min_p: r.min_p,
        seed: r.seed.unwrap_or(state.base_seed),
        own_seed: r.seed.is_some(),
        max_tokens: r.max_tokens,
        stop_ids,
        min_tokens: r.min_tokens,
        stop: r.stop.clone(),
        top_logprobs: r.logprobs.unwrap_or(0),
    };
    params.validate().map_err(|e| {
        // The field's name in the API, where it differs from the parameter's.
        let param = match e.param {
            "top_logprobs" => "logprobs",
            other => other,
        };
        ApiError::bad(param, e.message_for(param))
    })?;
    Ok(params)
}

/// Claims `samples` of the queue, or a 503 when that would pass `--max-queued-requests`.
fn reserve(state: &AppState, samples: usize) -> Result<(), ApiError> {
    let claimed = state
        .queued
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
            q.checked_add(samples).filter(|&t| t <= state.max_queued)
        });
    match claimed {
        Ok(_) => Ok(()),
        Err(queued) => Err(ApiError {
            retry_after: Some(1),
            ..ApiError::status(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is busy: {queued} samples are queued and this request adds \
                     {samples}, past the limit of {}; retry later",
                    state.max_queued
                ),
            )
        }),
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The choice of a finished sample, as the request asked for it.
fn finished_choice(state: &AppState, job: &Job, s: &FinishedSample) -> Result<Choice, ApiError> {
    let tokenizer = &state.facts.tokenizer;
    let r = &job.request;
    let logprobs = r
        .logprobs
        .map(|_| openai::logprobs(tokenizer, &s.token_ids, &s.logprobs, &s.top_logprobs, 0));
    Ok(Choice {
        index: choice_index(job, s),
        text: openai::sample_text(tokenizer, s)?,
        logprobs,
        finish_reason: Some(s.finish_reason),
        prompt_token_ids: r.return_token_ids.then(|| s.prompt_token_ids.clone()),
        token_ids: r.return_token_ids.then(|| s.token_ids.clone()),
        sprout: Some(openai::sprout_fields(s, state.facts.weights_version)),
    })
}

fn choice_index(job: &Job, s: &FinishedSample) -> usize {
    let prompt = s.request_index.wrapping_sub(job.base) as usize;
    prompt * job.request.n + s.sample_index as usize
}

/// The usage of `job`, whose finished samples gave `completion_tokens` and, summed over
/// its prompts (each counted once), `cached_tokens`.
fn usage(job: &Job, completion_tokens: usize, cached_tokens: usize) -> Usage {
    let prompt_tokens = job.prompts.iter().map(Vec::len).sum();
    Usage::new(prompt_tokens, completion_tokens, cached_tokens)
}

/// A prompt's cached tokens, counted once: from its first sample.
fn cached_share(s: &FinishedSample) -> usize {
    match s.sample_index {
        0 => s.cached_prompt_tokens,
        _ => 0,
    }
}

async fn whole_response(
    state: &AppState,
    job: Job,
    mut events: mpsc::UnboundedReceiver<Event>,
    mut pending: Pending,
) -> Result<Response, ApiError> {
    let total = job.prompts.len() * job.request.n;
    let mut samples: Vec<FinishedSample> = Vec::new();
    while samples.len() < total {
        match events.recv().await {
            Some(Event::Finished(s)) => samples.push(s),
            Some(Event::Token { .. }) => {}
            Some(Event::Failed(e)) => return Err(internal(e)),
            None => return Err(internal("the engine stopped before the request finished")),
        }
    }
    pending.done = true;
    samples.sort_by_key(|s| choice_index(&job, s));
    let choices = samples
        .iter()
        .map(|s| finished_choice(state, &job, s))
        .collect::<Result<Vec<_>, _>>()?;
    let completion_tokens = samples.iter().map(|s| s.token_ids.len()).sum();
    let cached_tokens = samples.iter().map(cached_share).sum();
    let body = Completion {
        id: &job.id,
        object: "text_completion",
        created: job.created,
        model: &state.served_name,
        choices,
        usage: Some(usage(&job, completion_tokens, cached_tokens)),
    };
    let text = json_out::to_line(&body).map_err(internal)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

/// A sample's progress in a stream.
#[derive(Default)]
struct StreamedSample {
    decoder: IncrementalDecoder,
    /// Tokens sent so far.
    tokens: Vec<u32>,
    /// Characters of text sent so far.
    chars: usize,
    started: bool,
    finished: bool,
}

/// The state a stream carries from one chunk to the next.
struct Streaming {
    state: Arc<AppState>,
    job: Job,
    events: mpsc::UnboundedReceiver<Event>,
    pending: Pending,
    samples: Vec<StreamedSample>,
    completion_tokens: usize,
    cached_tokens: usize,
    /// Lines ready to send.
    out: VecDeque<String>,
    ended: bool,
}

fn stream_response(
    state: Arc<AppState>,
    job: Job,
    events: mpsc::UnboundedReceiver<Event>,
    pending: Pending,
) -> Response {
    let total = job.prompts.len() * job.request.n;
    let streaming = Streaming {
        state,
        job,
        events,
        pending,
        samples: (0..total)
            .map(|_| StreamedSample {
                decoder: IncrementalDecoder::new(true),
                ..StreamedSample::default()
            })
            .collect(),
        completion_tokens: 0,
        cached_tokens: 0,
        out: VecDeque::new(),
        ended: false,
    };
    let chunks = futures_util::stream::unfold(streaming, |mut s| async move {
        loop {
            if let Some(line) = s.out.pop_front() {
                return Some((Ok::<_, Infallible>(Bytes::from(line)), s));
            }
            if s.ended {
                return None;
            }
            let event = s.events.recv().await;
            s.handle(event);
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|e| internal(e).into_response())
}

impl Streaming {
    fn chunk(&mut self, choices: Vec<Choice>, usage: Option<Usage>) {
        let body = Completion {
            id: &self.job.id,
            object: "text_completion",
            created: self.job.created,
            model: &self.state.served_name,
            choices,
            usage,
        };
        match json_out::to_line(&body) {
            Ok(line) => self.out.push_back(format!("data: {line}\n\n")),
            Err(e) => self.fail(&e.to_string()),
        }
    }

    fn fail(&mut self, message: &str) {
        let error = json!({"error": {
            "message": message,
            "type": "internal_server_error",
            "param": null,
            "code": 500,
        }});
        self.out.push_back(format!("data: {error}\n\n"));
        self.end();
    }

    fn end(&mut self) {
        self.out.push_back("data: [DONE]\n\n".into());
        self.ended = true;
    }

    fn handle(&mut self, event: Option<Event>) {
        match event {
            Some(Event::Token {
                request_index,
                sample_index,
                token,
                ..
            }) => {
                let prompt = request_index.wrapping_sub(self.job.base) as usize;
                let index = prompt * self.job.request.n + sample_index as usize;
                let tokenizer = &self.state.facts.tokenizer;
                let Some(sample) = self.samples.get_mut(index) else {
                    return;
                };
                if sample.finished {
                    return;
                }
                let text = match sample.decoder.push(tokenizer, token) {
                    Ok(text) => text.unwrap_or_default(),
                    Err(e) => return self.fail(&e.to_string()),
                };
                sample.tokens.push(token);
                sample.chars += text.chars().count();
                let first = !std::mem::replace(&mut sample.started, true);
                let ids = self.job.request.return_token_ids;
                let choice = Choice {
                    index,
                    text,
                    logprobs: None,
                    finish_reason: None,
                    prompt_token_ids: (ids && first).then(|| self.job.prompts[prompt].clone()),
                    token_ids: ids.then(|| vec![token]),
                    sprout: None,
                };
                self.chunk(vec![choice], None);
            }
            Some(Event::Finished(s)) => self.finished(s),
            Some(Event::Failed(e)) => self.fail(&e),
            None => self.fail("the engine stopped before the request finished"),
        }
    }

    /// The last chunk of a finished sample: what was not sent yet, and why it ended.
    fn finished(&mut self, s: FinishedSample) {
        let index = choice_index(&self.job, &s);
        let prompt = s.request_index.wrapping_sub(self.job.base) as usize;
        let tokenizer = &self.state.facts.tokenizer;
        let Some(sample) = self.samples.get_mut(index) else {
            return;
        };
        let r = &self.job.request;
        let (text, new_tokens, offset) = if sample.tokens.is_empty() {
            match openai::sample_text(tokenizer, &s) {
                Ok(text) => (text, s.token_ids.clone(), 0),
                Err(e) => return self.fail(&e.message),
            }
        } else if s.token_ids.starts_with(&sample.tokens) {
            // Tokens streamed one by one: the rest, and the text held back.
            let mut text = String::new();
            for &id in &s.token_ids[sample.tokens.len()..] {
                match sample.decoder.push(tokenizer, id) {
                    Ok(piece) => text.push_str(&piece.unwrap_or_default()),
                    Err(e) => return self.fail(&e.to_string()),
                }
            }
            match sample.decoder.finish(tokenizer) {
                Ok(rest) => text.push_str(&rest),
                Err(e) => return self.fail(&e.to_string()),
            }
            let sent = sample.tokens.len();
            (text, s.token_ids[sent..].to_vec(), sample.chars)
        } else {
            return self.fail("a finished sample differs from the tokens streamed for it");
        };
        let from = s.token_ids.len() - new_tokens.len();
        let logprobs = r.logprobs.map(|_| {
            let top = s.top_logprobs.get(from..).unwrap_or_default();
            let lps = s.logprobs.get(from..).unwrap_or_default();
            openai::logprobs(tokenizer, &new_tokens, lps, top, offset)
        });
        let first = !std::mem::replace(&mut sample.started, true);
        sample.finished = true;
        self.completion_tokens += s.token_ids.len();
        self.cached_tokens += cached_share(&s);
        let ids = r.return_token_ids;
        let choice = Choice {
            index,
            text,
            logprobs,
            finish_reason: Some(s.finish_reason),
            prompt_token_ids: (ids && first).then(|| self.job.prompts[prompt].clone()),
            token_ids: ids.then_some(new_tokens),
            sprout: Some(openai::sprout_fields(&s, self.state.facts.weights_version)),
        };
        self.chunk(vec![choice], None);
        if self.samples.iter().all(|s| s.finished) {
            self.pending.done = true;
            if self.job.request.include_usage {
                let usage = usage(&self.job, self.completion_tokens, self.cached_tokens);
                self.chunk(Vec::new(), Some(usage));
            }
            self.end();
        }
    }
}
