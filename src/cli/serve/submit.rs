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
//! Prompt log-probs (`prompt_logprobs`, or completions' `echo` with `logprobs`): each
//! prompt of two tokens or more also gets a teacher-forced scoring request
//! (`prompt_logprobs`), queued in the same `Command::Add` under engine index
//! `base + prompts + i`. With `max_tokens` 0 (allowed only then) the prompts are not
//! sampled at all: only the scoring requests run.
//!
//! LoRA: a `model` naming the adapter in force (not the served model) runs the request
//! with it (`Request::lora`, its prompt scoring too); the engine thread refuses it (404)
//! should that adapter no longer be in force when it is queued.
//!
//! Seeds: a request with a `seed` has its own seed (`SamplingParams::own_seed`), so its
//! draws are keyed by (seed, 0, sample, position) and equal `sprout rollout --prompt ...
//! --seed` whatever else is in the batch. Without one, draws are keyed by the server's
//! random base seed and the request's index, which differs for every prompt served.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::http::StatusCode;
use sprout::sched::{FinishedSample, Request};
use tokio::sync::{mpsc, oneshot};

use crate::cli::serve::error::ApiError;
use crate::cli::serve::messages::{Command, Event, Refusal};
use crate::cli::serve::parsing::Parsing;
use crate::cli::serve::prompt_logprobs::scoring_request;
use crate::cli::serve::request::{Prompt, SamplingFields};
use crate::cli::serve::response::Api;
use crate::cli::serve::sampling;
use crate::cli::serve::state::AppState;

/// Retry-After for a request refused while the server sleeps: a trainer's step is
/// seconds long.
const RETRY_AFTER_ASLEEP_S: u64 = 5;
/// Retry-After for a request past `--max-queued-requests`: the queue drains in a second or
/// so.
const RETRY_AFTER_BUSY_S: u64 = 1;

/// A request queued in the engine.
pub struct Job {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub fields: SamplingFields,
    pub prompts: Vec<Vec<u32>>,
    /// With `echo`: each prompt's text, put before its completions (else empty).
    pub echo: Vec<String>,
    /// The engine index of the first prompt; prompt i has `base + i`.
    pub base: u32,
    /// Whether the prompts are sampled (not with `max_tokens` 0: then the choices hold
    /// the prompt alone).
    pub sampled: bool,
    /// Which prompts have a scoring request (prompt i under `base + prompts + i`); empty
    /// when the prompt's log-probs were not asked.
    pub scored: Vec<bool>,
    /// How the replies' text is parsed.
    pub parsing: Parsing,
    /// The LoRA adapter it runs with, by name (`None`: the base model).
    pub adapter: Option<String>,
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

    /// What goes before a sample's text: its prompt's with `echo`, else nothing.
    pub fn echo_of(&self, request_index: u32) -> &str {
        let prompt = request_index.wrapping_sub(self.base) as usize;
        self.echo
            .get(prompt)
            .map(String::as_str)
            .unwrap_or_default()
    }

    pub fn total_samples(&self) -> usize {
        self.prompts.len() * self.fields.n
    }

    /// The prompt a scoring request scores, `None` for a sampling request.
    pub fn scored_prompt(&self, request_index: u32) -> Option<usize> {
        let prompts = self.prompts.len();
        let offset = request_index.wrapping_sub(self.base) as usize;
        (offset >= prompts && offset - prompts < self.scored.len()).then(|| offset - prompts)
    }

    /// The finished samples the engine will send: the samples, and one per scoring
    /// request.
    pub fn expected_events(&self) -> usize {
        let samples = if self.sampled {
            self.total_samples()
        } else {
            0
        };
        samples + self.scored.iter().filter(|&&q| q).count()
    }
}

/// The alternatives per position the prompt's scoring asks for, `None` when the request
/// wants no prompt log-probs: vLLM's `prompt_logprobs`, or completions' `echo` with
/// `logprobs` (the larger when both).
pub fn prompt_scoring(f: &SamplingFields) -> Option<usize> {
    let echoed = f.logprobs.filter(|_| f.echo);
    match (f.prompt_logprobs, echoed) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).max(b.unwrap_or(0))),
    }
}

/// `max_tokens` 0 asks for no generation: only a request that returns the prompt (echo)
/// or its log-probs has anything to answer with.
fn check_no_generation(f: &SamplingFields, max_tokens: usize) -> Result<(), ApiError> {
    match max_tokens == 0 && !f.echo && f.prompt_logprobs.is_none() {
        true => Err(ApiError::bad(
            "max_tokens",
            "max_tokens must be at least 1; 0 (no generation) only with echo or prompt_logprobs",
        )),
        false => Ok(()),
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
    check_model_name(state, fields.model.as_deref())
}

/// Refuses a `model` this server does not serve (absent: the served one; the LoRA
/// adapter in force is served too).
pub fn check_model_name(state: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    model_adapter(state, model).map(|_| ())
}

/// The LoRA adapter a request's `model` names (`None`: the base model, by its name or by
/// none), or a 404 for a model this server does not serve.
pub fn model_adapter(state: &AppState, model: Option<&str>) -> Result<Option<String>, ApiError> {
    match model {
        None => Ok(None),
        Some(model) if model == state.served_name => Ok(None),
        Some(model) if state.adapters.serves(model) => Ok(Some(model.to_string())),
        Some(model) => Err(ApiError {
            param: Some("model".into()),
            ..ApiError::status(
                StatusCode::NOT_FOUND,
                format!(
                    "the model `{model}` does not exist (this server serves `{}`{})",
                    state.served_name,
                    state
                        .adapters
                        .get()
                        .map(|l| format!(" and its LoRA adapter `{}`", l.name))
                        .unwrap_or_default()
                ),
            )
        }),
    }
}

/// Each prompt's token ids (`add_special_tokens`: with the BOS/EOS the tokenizer adds),
/// checked: not empty and inside the vocabulary.
pub fn tokenize(
    state: &AppState,
    prompts: &[Prompt],
    add_special_tokens: bool,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let vocab = state.facts.vocab_size;
    let mut out = Vec::new();
    for prompt in prompts {
        let ids = match prompt {
            Prompt::Text(text) => state
                .facts
                .tokenizer
                .encode_with(text, add_special_tokens)
                .map_err(|e| {
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

/// vLLM's `truncate_prompt_tokens`: keeps each prompt's last `k` tokens (`Some(None)`:
/// -1, the context's length); a `k` past the context is a 400, as in vLLM. Returns
/// whether a prompt was cut.
pub fn truncate(
    state: &AppState,
    prompts: &mut [Vec<u32>],
    k: Option<Option<usize>>,
) -> Result<bool, ApiError> {
    let Some(k) = k else { return Ok(false) };
    let k = k.unwrap_or(state.max_model_len);
    if k > state.max_model_len {
        return Err(ApiError::bad(
            "truncate_prompt_tokens",
            format!(
                "truncate_prompt_tokens must be at most the maximum context length ({}), not {k}",
                state.max_model_len
            ),
        ));
    }
    let mut cut = false;
    for ids in prompts {
        if ids.len() > k {
            ids.drain(..ids.len() - k);
            cut = true;
        }
    }
    Ok(cut)
}

/// What `echo` puts before each prompt's completions: the prompt's text as given, or,
/// for token prompts and prompts `cut` short, the text of the tokens the model saw.
pub fn echo_texts(
    state: &AppState,
    given: &[Prompt],
    ids: &[Vec<u32>],
    cut: bool,
    skip_special_tokens: bool,
) -> Result<Vec<String>, ApiError> {
    given
        .iter()
        .zip(ids)
        .map(|(prompt, ids)| match prompt {
            Prompt::Text(text) if !cut => Ok(text.clone()),
            _ => state
                .facts
                .tokenizer
                .decode_with(ids, skip_special_tokens)
                .map_err(|e| {
                    ApiError::bad("echo", format!("the prompt could not be decoded: {e}"))
                }),
        })
        .collect()
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

/// Claims `samples` of the queue, or a 503 when that would pass `--max-queued-requests`.
fn reserve(state: &AppState, samples: usize) -> Result<(), ApiError> {
    let claimed = state
        .queued
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
            q.checked_add(samples).filter(|&t| t <= state.max_queued)
        });
    match claimed {
        Ok(_) => Ok(()),
        Err(queued) => Err(ApiError::unavailable(
            format!(
                "the server is busy: {queued} samples are queued and this request adds \
                 {samples}, past the limit of {}; retry later",
                state.max_queued
            ),
            RETRY_AFTER_BUSY_S,
        )),
    }
}

/// What one checked request asks of the engine.
pub struct Submission {
    pub api: Api,
    pub fields: SamplingFields,
    pub prompts: Vec<Vec<u32>>,
    pub max_tokens: usize,
    /// With `echo`: each prompt's text (see [`Job::echo`]).
    pub echo: Vec<String>,
    /// When the HTTP request arrived.
    pub arrived: Instant,
    /// Chat: how the replies' text is parsed (nothing for the other APIs).
    pub parsing: Parsing,
}

/// Queues `s` in the engine: its job, the channel its samples come on, and its claim.
pub async fn submit(
    state: &Arc<AppState>,
    s: Submission,
) -> Result<(Job, mpsc::UnboundedReceiver<Event>, Pending), ApiError> {
    check_no_generation(&s.fields, s.max_tokens)?;
    let adapter = model_adapter(state, s.fields.model.as_deref())?;
    let sampled = s.max_tokens > 0;
    // Checked as if sampled, so that a request is refused for the same fields whatever
    // its max_tokens.
    let params = sampling::params(state, s.api, &s.fields, s.max_tokens.max(1))?;
    let n = s.fields.n;
    sampling::check_limits(state, s.prompts.len(), n)?;
    let scoring = prompt_scoring(&s.fields);
    let prompts = s.prompts.len() as u32;
    // Scoring requests take the indexes after the prompts' (see `Job::scored_prompt`).
    let indexes_taken = if scoring.is_some() {
        2 * prompts
    } else {
        prompts
    };
    let base = state.next_index.fetch_add(indexes_taken, Ordering::Relaxed);
    let created = now_s();
    let id = match &s.fields.request_id {
        Some(id) => id.clone(),
        None => format!("{}-{created}-{base}", s.api.id_prefix()),
    };
    let sampling_requests: Vec<Request> = s
        .prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| Request {
            index: base.wrapping_add(i as u32),
            prompt: prompt.clone(),
            n,
            params: params.clone(),
            forced: Vec::new(),
            cache_salt: s.fields.cache_salt.clone(),
            lora: adapter.is_some(),
        })
        .collect();
    let scoring_requests: Vec<Option<Request>> = match scoring {
        Some(top) => sampling_requests
            .iter()
            .map(|r| scoring_request(r, r.index.wrapping_add(prompts), top))
            .collect(),
        None => Vec::new(),
    };
    let scored: Vec<bool> = scoring_requests.iter().map(Option::is_some).collect();
    let requests: Vec<Request> = match sampled {
        true => sampling_requests,
        false => Vec::new(),
    }
    .into_iter()
    .chain(scoring_requests.into_iter().flatten())
    .collect();
    let indexes: Vec<u32> = requests.iter().map(|r| r.index).collect();
    // Each sample, and each scoring pass, holds a share of the queue.
    let total = requests.iter().map(|r| r.n).sum();
    reserve(state, total)?;
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
    // A stop string can cut tokens already drawn, and an echo with log-probs starts with
    // the prompt's scores: with either, a stream sends each sample whole when it finishes.
    let f = &s.fields;
    let stream_tokens = f.stream && f.stop.is_empty() && !(f.echo && f.logprobs.is_some());
    let (events, receiver) = mpsc::unbounded_channel();
    let (reply, added) = oneshot::channel();
    state
        .engine
        .send(Command::Add {
            requests,
            stream_tokens,
            events,
            arrived: s.arrived,
            adapter: adapter.clone(),
            reply,
        })
        .map_err(|_| ApiError::engine_stopped())?;
    match added.await {
        Ok(Ok(())) => {}
        Ok(Err(Refusal::Invalid(e))) => {
            pending.done = true;
            return Err(ApiError::bad("prompt", e));
        }
        Ok(Err(Refusal::UnknownModel(e))) => {
            pending.done = true;
            return Err(ApiError {
                param: Some("model".into()),
                ..ApiError::status(StatusCode::NOT_FOUND, e)
            });
        }
        Ok(Err(Refusal::Unavailable(e))) => {
            pending.done = true;
            return Err(ApiError::unavailable(e, RETRY_AFTER_ASLEEP_S));
        }
        Err(_) => return Err(ApiError::engine_stopped()),
    }
    let who: Vec<String> = s
        .fields
        .provenance
        .iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    tracing::info!(
        "queued {id}: {} prompts, n = {n}{}{}",
        s.prompts.len(),
        if who.is_empty() { "" } else { ", " },
        who.join(", ")
    );
    let job = Job {
        api: s.api,
        id,
        created,
        fields: s.fields,
        prompts: s.prompts,
        echo: s.echo,
        base,
        sampled,
        scored,
        parsing: s.parsing,
        adapter,
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
