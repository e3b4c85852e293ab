//! From a parsed request to samples on their way: the prompts checked against the model,
//! the sampling parameters checked by the one set of rules, a share of the queue claimed,
//! and the engine requests queued.
//!
//! A request becomes one engine request per prompt, each sampled `n` times, all joining
//! the engine's one continuous batch; its choices are indexed `prompt * n + sample`. It
//! holds a [`Pending`] guard from the moment it is queued: dropping it (the response is
//! done, or the client went away and its future or stream was dropped) gives back its
//! share of `--max-queued-requests` and, if samples were still running, aborts them so
//! that their KV blocks are freed.
//!
//! Seeds: a request with a `seed` has its own seed (`SamplingParams::own_seed`), so its
//! draws are keyed by (seed, 0, sample, position) and equal `sprout rollout --prompt ...
//! --seed` whatever else is in the batch. Without one, draws are keyed by the server's
//! random base seed and the request's index, which differs for every prompt served.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::http::StatusCode;
use sprout::sched::{FinishedSample, Request, SamplingParams};
use tokio::sync::{mpsc, oneshot};

use crate::cli::serve::error::ApiError;
use crate::cli::serve::messages::{Command, Event};
use crate::cli::serve::request::{Prompt, SamplingFields};
use crate::cli::serve::response::Api;
use crate::cli::serve::state::AppState;

/// A request queued in the engine.
pub struct Job {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub fields: SamplingFields,
    pub prompts: Vec<Vec<u32>>,
    /// The engine index of the first prompt; prompt i has `base + i`.
    pub base: u32,
}

impl Job {
    /// The choice index of a sample.
    pub fn choice_index(&self, request_index: u32, sample_index: u32) -> usize {
        let prompt = request_index.wrapping_sub(self.base) as usize;
        prompt * self.fields.n + sample_index as usize
    }

    /// The prompt a sample continues.
    pub fn prompt_of(&self, request_index: u32) -> &[u32] {
        let prompt = request_index.wrapping_sub(self.base) as usize;
        self.prompts
            .get(prompt)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn total_samples(&self) -> usize {
        self.prompts.len() * self.fields.n
    }
}

/// A queued request's claim on the engine: see the module docs.
pub struct Pending {
    state: Arc<AppState>,
    /// Its id among the requests in flight.
    id: String,
    indexes: Vec<u32>,
    reserved: usize,
    /// Every sample has been received: nothing to abort.
    pub done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.state
            .queued
            .fetch_sub(self.reserved, Ordering::Relaxed);
        if let Ok(mut jobs) = self.state.jobs.lock() {
            jobs.remove(&self.id);
        }
        if !self.done {
            let indexes = std::mem::take(&mut self.indexes);
            let _ = self.state.engine.send(Command::Abort { indexes });
        }
    }
}

/// Refuses a request for a model this server does not serve.
pub fn check_model(state: &AppState, fields: &SamplingFields) -> Result<(), ApiError> {
    match &fields.model {
        Some(model) if *model != state.served_name => Err(ApiError {
            param: Some("model".into()),
            ..ApiError::status(
                StatusCode::NOT_FOUND,
                format!(
                    "the model `{model}` does not exist (this server serves `{}`)",
                    state.served_name
                ),
            )
        }),
        _ => Ok(()),
    }
}

/// Each prompt's token ids, checked: not empty and inside the vocabulary.
pub fn tokenize(state: &AppState, prompts: &[Prompt]) -> Result<Vec<Vec<u32>>, ApiError> {
    let vocab = state.facts.vocab_size;
    let mut out = Vec::new();
    for prompt in prompts {
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
        out.push(ids);
    }
    Ok(out)
}

/// Refuses prompts that, with `max_tokens` more, would not fit the context.
pub fn check_context(
    state: &AppState,
    prompts: &[Vec<u32>],
    max_tokens: usize,
) -> Result<(), ApiError> {
    for ids in prompts {
        let wanted = ids.len().saturating_add(max_tokens);
        if wanted > state.max_model_len {
            return Err(ApiError::bad(
                "max_tokens",
                format!(
                    "This model's maximum context length is {} tokens. However, you requested \
                     {wanted} tokens ({} in the prompt, {max_tokens} for the completion). \
                     Please reduce the length of the prompt or completion.",
                    state.max_model_len,
                    ids.len(),
                ),
            ));
        }
    }
    Ok(())
}

/// The request's sampling parameters, checked by the one set of rules.
fn sampling_params(
    state: &AppState,
    f: &SamplingFields,
    max_tokens: usize,
) -> Result<SamplingParams, ApiError> {
    let vocab = state.facts.vocab_size;
    let mut stop_ids = match f.ignore_eos {
        true => Vec::new(),
        false => state.facts.eos_token_ids.clone(),
    };
    for &id in &f.stop_token_ids {
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
        processing: Default::default(),
        temperature: f.temperature,
        top_k: f.top_k,
        top_p: f.top_p,
        min_p: f.min_p,
        seed: f.seed.unwrap_or(state.base_seed),
        own_seed: f.seed.is_some(),
        max_tokens,
        stop_ids,
        min_tokens: f.min_tokens,
        stop: f.stop.clone(),
        top_logprobs: f.logprobs.unwrap_or(0),
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

/// What one checked request asks of the engine.
pub struct Submission {
    pub api: Api,
    pub fields: SamplingFields,
    pub prompts: Vec<Vec<u32>>,
    pub max_tokens: usize,
    /// When the HTTP request arrived.
    pub arrived: Instant,
}

/// Queues `s` in the engine: its job, the channel its samples come on, and its claim.
pub async fn submit(
    state: &Arc<AppState>,
    s: Submission,
) -> Result<(Job, mpsc::UnboundedReceiver<Event>, Pending), ApiError> {
    let params = sampling_params(state, &s.fields, s.max_tokens)?;
    let n = s.fields.n;
    let total = s.prompts.len().saturating_mul(n);
    reserve(state, total)?;
    let base = state
        .next_index
        .fetch_add(s.prompts.len() as u32, Ordering::Relaxed);
    let created = now_s();
    let id = match &s.fields.request_id {
        Some(id) => id.clone(),
        None => format!("{}-{created}-{base}", s.api.id_prefix()),
    };
    let indexes: Vec<u32> = (0..s.prompts.len() as u32)
        .map(|i| base.wrapping_add(i))
        .collect();
    let mut pending = Pending {
        state: state.clone(),
        id: id.clone(),
        indexes: indexes.clone(),
        reserved: total,
        done: false,
    };
    register(state, &id, indexes).inspect_err(|_| {
        // Not ours to remove: the id belongs to the request in flight.
        pending.id.clear();
        pending.done = true;
    })?;
    let requests = s
        .prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| Request {
            index: base.wrapping_add(i as u32),
            prompt: prompt.clone(),
            n,
            params: params.clone(),
            forced: Vec::new(),
        })
        .collect();
    // A stop string can cut tokens already drawn, and the alternatives come with the
    // finished sample: with either, a stream sends each sample whole when it finishes.
    let f = &s.fields;
    let stream_tokens = f.stream && f.stop.is_empty() && f.logprobs.is_none();
    let (events, receiver) = mpsc::unbounded_channel();
    let (reply, added) = oneshot::channel();
    state
        .engine
        .send(Command::Add {
            requests,
            stream_tokens,
            events,
            arrived: s.arrived,
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
    let job = Job {
        api: s.api,
        id,
        created,
        fields: s.fields,
        prompts: s.prompts,
        base,
    };
    Ok((job, receiver, pending))
}

/// Records `id` among the requests in flight, or a 400 when it is there already.
fn register(state: &AppState, id: &str, indexes: Vec<u32>) -> Result<(), ApiError> {
    let mut jobs = state
        .jobs
        .lock()
        .map_err(|_| crate::cli::serve::error::poisoned())?;
    if jobs.contains_key(id) {
        return Err(ApiError::bad(
            "request_id",
            format!("a request with request_id {id:?} is already in flight"),
        ));
    }
    jobs.insert(id.to_string(), indexes);
    Ok(())
}

/// Seconds since the Unix epoch.
pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A prompt's cached tokens, counted once: from its first sample.
pub fn cached_share(s: &FinishedSample) -> usize {
    match s.sample_index {
        0 => s.cached_prompt_tokens,
        _ => 0,
    }
}
