//! Answering a queued request from its samples: a whole response once every sample has
//! finished, or a stream of server-sent events.
//!
//! Streaming: without stop strings a sample's tokens go out as they are drawn, each with
//! its log-prob and alternatives when asked (text held back while it ends inside a
//! character); with stop strings (which may cut tokens already drawn) or an echo with
//! log-probs (which starts with the prompt's), its content goes out in one chunk when it
//! finishes. Each sample's last chunk carries its finish reason
//! and sprout's fields; after the last sample, usage (when asked for) and `[DONE]`.
//! A chat reply with parsers (`parsing`) goes through them as its text comes: each chunk
//! carries the reasoning and content they decided and each tool call once it is whole,
//! while the tokens and log-probs go out as they would without them.
//! Generate's bodies and chunks take vLLM's token shapes (`TokensBody`) around the same
//! choices.
//!
//! The prompt's log-probs (`prompt_logprobs`, `echo` with `logprobs`) come from each
//! prompt's scoring request (`prompt_logprobs`), whose finished sample is told apart from
//! the sampling ones by its engine index and is never a choice. A choice that carries them
//! waits for them: in a stream, a sample that finishes before its prompt's score is held
//! until the score comes (`prompt_logprobs` themselves are refused with `stream`, as vLLM
//! does). With `max_tokens` 0 nothing is sampled: each prompt's choices hold the prompt
//! alone, once its score has come.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body as HttpBody, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sprout::engine::DrawnToken;
use sprout::sched::FinishedSample;
use sprout::tokenizer::IncrementalDecoder;
use tokio::sync::mpsc;

use crate::cli::json_out;
use crate::cli::serve::error::{ApiError, internal};
use crate::cli::serve::logprobs_mode::LogprobsMode;
use crate::cli::serve::messages::Event;
use crate::cli::serve::parsing::ReplyStream;
use crate::cli::serve::prompt_logprobs::{Position, PromptScore, unsampled};
use crate::cli::serve::response::{
    self, Api, Asked, Body, ChatParts, Choice, Piece, TextOptions, TokensBody, TokensWhole, Usage,
};
use crate::cli::serve::state::AppState;
use crate::cli::serve::submit::{Job, Pending, cached_share};

/// The prompt of a sample, as its index among the job's prompts.
fn prompt_number(job: &Job, request_index: u32) -> usize {
    request_index.wrapping_sub(job.base) as usize
}

/// The scores of prompt `p`, when the request asked for the prompt's log-probs.
fn score_of<'a>(
    job: &'a Job,
    scores: &'a [Option<FinishedSample>],
    p: usize,
) -> Option<PromptScore<'a>> {
    (!job.scored.is_empty()).then(|| PromptScore {
        prompt: job.prompts.get(p).map(Vec::as_slice).unwrap_or_default(),
        sample: scores.get(p).and_then(Option::as_ref),
    })
}

/// What the request asked each choice to carry, for a sample of engine request
/// `request_index`.
fn asked_of<'a>(
    state: &AppState,
    job: &'a Job,
    scores: &'a [Option<FinishedSample>],
    request_index: u32,
) -> Asked<'a> {
    let f = &job.fields;
    let p = prompt_number(job, request_index);
    Asked {
        api: job.api,
        stream: f.stream,
        logprobs: f.logprobs.is_some(),
        return_token_ids: f.return_token_ids,
        tokens_as_ids: f.return_tokens_as_token_ids,
        prompt: job.prompt_of(request_index),
        score: score_of(job, scores, p),
        prompt_logprobs: f.prompt_logprobs,
        echo_logprobs: f.logprobs.filter(|_| f.echo),
        weights_version: version_in_force(state, job),
    }
}

/// The version a job's tokens are drawn under now: its LoRA adapter's when it runs with
/// one (the tokens of such a request are labelled with the adapter's version), else the
/// weights'.
fn version_in_force(state: &AppState, job: &Job) -> u64 {
    let lora = job.adapter.as_ref().and_then(|name| {
        let served = state.adapters.get()?;
        (served.name == *name).then_some(served.version)
    });
    lora.unwrap_or_else(|| state.weights_version.load(Ordering::Acquire))
}

/// Chat and generate with `prompt_logprobs` name their (one) prompt's log-probs at the top of
/// the body.
fn top_prompt_logprobs(
    state: &AppState,
    job: &Job,
    scores: &[Option<FinishedSample>],
) -> Option<Vec<Option<Position>>> {
    let k = job
        .fields
        .prompt_logprobs
        .filter(|_| matches!(job.api, Api::Chat | Api::Generate))?;
    let name = response::namer(
        &state.facts.tokenizer,
        job.fields.return_tokens_as_token_ids,
    );
    score_of(job, scores, 0).map(|score| score.vllm(&name, k))
}

/// How the request asked its samples' text to be written.
fn text_options(job: &Job) -> TextOptions {
    TextOptions {
        skip_special_tokens: job.fields.skip_special_tokens,
        include_stop_str: job.fields.include_stop_str_in_output,
    }
}

/// The log-probs a choice reports under `--logprobs-mode`: the model's, or those of the
/// distribution each token was drawn from.
pub fn reported<'a>(state: &AppState, s: &'a FinishedSample) -> &'a [f32] {
    match state.logprobs_mode {
        LogprobsMode::Raw => &s.logprobs,
        LogprobsMode::Processed => &s.sampling_logprobs,
    }
}

/// Chat with `return_token_ids` names its (one) prompt at the top of the body.
fn top_prompt(job: &Job) -> Option<Vec<u32>> {
    (job.api == Api::Chat && job.fields.return_token_ids).then(|| job.prompts[0].clone())
}

/// The usage of `job`, whose finished samples gave `completion_tokens` and, summed over
/// its prompts (each counted once), `cached_tokens`.
fn usage(job: &Job, completion_tokens: usize, cached_tokens: usize) -> Usage {
    let prompt_tokens = job.prompts.iter().map(Vec::len).sum();
    Usage::new(prompt_tokens, completion_tokens, cached_tokens)
}

/// A body of `job`'s API as one line of JSON: the whole response (`chunk`: `None`), or a
/// stream chunk (`Some(first)`: whether it is the stream's first).
fn body_line(
    state: &AppState,
    job: &Job,
    choices: Vec<Choice>,
    usage: Option<Usage>,
    chunk: Option<bool>,
    prompt_logprobs: Option<Vec<Option<Position>>>,
) -> anyhow::Result<String> {
    if job.api == Api::Generate {
        return json_out::to_line(&TokensBody {
            request_id: &job.id,
            choices,
            whole: chunk.is_none().then_some(TokensWhole {
                prompt_logprobs,
                kv_transfer_params: None,
            }),
            usage,
        });
    }
    json_out::to_line(&Body {
        id: &job.id,
        object: job.api.object(chunk.is_some()),
        created: job.created,
        model: job.adapter.as_deref().unwrap_or(&state.served_name),
        prompt_token_ids: top_prompt(job).filter(|_| chunk != Some(false)),
        prompt_logprobs,
        choices,
        usage,
    })
}

/// Waits for every sample, then answers with all of them.
pub async fn whole(
    state: &AppState,
    job: Job,
    events: mpsc::UnboundedReceiver<Event>,
    pending: Pending,
) -> Result<Response, ApiError> {
    let Collected { samples, scores } = collect_all(&job, events, pending).await?;
    let tokenizer = &state.facts.tokenizer;
    let mut choices = Vec::with_capacity(samples.len());
    for s in &samples {
        let text = response::sample_text(tokenizer, s, text_options(&job))?;
        let (text, parsed) = parse(&mut reply_parser(&job), text, true);
        let piece = Piece {
            index: job.choice_index(s.request_index, s.sample_index),
            text: format!("{}{text}", job.echo_of(s.request_index)),
            tokens: &s.token_ids,
            logprobs: reported(state, s),
            top: &s.top_logprobs,
            text_offset: 0,
            first: true,
            finished: Some(s),
            parsed,
        };
        let asked = asked_of(state, &job, &scores, s.request_index);
        choices.push(response::choice(tokenizer, &asked, piece));
    }
    let completion_tokens = samples.iter().map(|s| s.token_ids.len()).sum();
    let cached_tokens = samples.iter().map(cached_share).sum();
    let usage = usage(&job, completion_tokens, cached_tokens);
    let prompt_logprobs = top_prompt_logprobs(state, &job, &scores);
    let text =
        body_line(state, &job, choices, Some(usage), None, prompt_logprobs).map_err(internal)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

/// Waits for every sample of `job`; returns them in choice order.
pub async fn collect(
    job: &Job,
    events: mpsc::UnboundedReceiver<Event>,
    pending: Pending,
) -> Result<Vec<FinishedSample>, ApiError> {
    collect_all(job, events, pending).await.map(|c| c.samples)
}

/// A request's finished samples, and its prompts' scoring passes.
pub struct Collected {
    /// In choice order (with `max_tokens` 0, each prompt's empty samples).
    pub samples: Vec<FinishedSample>,
    /// Per prompt, its scoring pass (`None` when none was queued).
    pub scores: Vec<Option<FinishedSample>>,
}

/// Waits for every sample and scoring pass of `job`.
pub async fn collect_all(
    job: &Job,
    mut events: mpsc::UnboundedReceiver<Event>,
    mut pending: Pending,
) -> Result<Collected, ApiError> {
    let mut samples: Vec<FinishedSample> = Vec::new();
    let mut scores: Vec<Option<FinishedSample>> = job.scored.iter().map(|_| None).collect();
    for _ in 0..job.expected_events() {
        match events.recv().await {
            Some(Event::Finished(s)) => match job.scored_prompt(s.request_index) {
                Some(p) => scores[p] = Some(*s),
                None => samples.push(*s),
            },
            Some(Event::Token(_)) => {}
            Some(Event::Failed(e)) => return Err(internal(e)),
            None => return Err(internal("the engine stopped before the request finished")),
        }
    }
    pending.done = true;
    if !job.sampled {
        samples = unsampled_choices(job, &scores, 0..job.prompts.len());
    }
    samples.sort_by_key(|s| job.choice_index(s.request_index, s.sample_index));
    Ok(Collected { samples, scores })
}

/// The choices of `prompts` when nothing is sampled (`max_tokens` 0): `n` empty samples
/// each.
fn unsampled_choices(
    job: &Job,
    scores: &[Option<FinishedSample>],
    prompts: impl Iterator<Item = usize>,
) -> Vec<FinishedSample> {
    let mut out = Vec::new();
    for p in prompts {
        let score = scores.get(p).and_then(Option::as_ref);
        for j in 0..job.fields.n {
            out.push(unsampled(score, job.base.wrapping_add(p as u32), j as u32));
        }
    }
    out
}

/// The reply parsers of a sample of `job` (chat with a parser only).
fn reply_parser(job: &Job) -> Option<ReplyStream> {
    (job.api == Api::Chat && job.parsing.is_active()).then(|| ReplyStream::new(job.parsing))
}

/// `text`, the next of a reply's text, through its parsers if it has them (`end`: the
/// reply has ended): the piece's content, and what else they made of it.
fn parse(parser: &mut Option<ReplyStream>, text: String, end: bool) -> (String, Option<ChatParts>) {
    match parser {
        Some(parser) => {
            let (content, parts) = parser.piece(&text, end);
            (content, Some(parts))
        }
        None => (text, None),
    }
}

/// A sample's progress in a stream.
struct StreamedSample {
    decoder: IncrementalDecoder,
    /// Chat with a reply parser: its parsers.
    parser: Option<ReplyStream>,
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
    /// Per prompt, its scoring pass once finished.
    scores: Vec<Option<FinishedSample>>,
    /// Finished samples waiting for their prompt's score.
    held: Vec<FinishedSample>,
    completion_tokens: usize,
    cached_tokens: usize,
    /// The stream's first chunk has gone out.
    began: bool,
    /// Lines ready to send.
    out: VecDeque<String>,
    ended: bool,
}

/// Answers with a stream of chunks as the samples progress.
pub fn stream(
    state: Arc<AppState>,
    job: Job,
    events: mpsc::UnboundedReceiver<Event>,
    pending: Pending,
) -> Response {
    let skip_special_tokens = job.fields.skip_special_tokens;
    let samples = (0..job.total_samples())
        .map(|_| StreamedSample {
            decoder: IncrementalDecoder::new(skip_special_tokens),
            parser: reply_parser(&job),
            tokens: Vec::new(),
            chars: 0,
            started: false,
            finished: false,
        })
        .collect();
    let scores = job.scored.iter().map(|_| None).collect();
    let mut streaming = Streaming {
        state,
        job,
        events,
        pending,
        samples,
        scores,
        held: Vec::new(),
        completion_tokens: 0,
        cached_tokens: 0,
        began: false,
        out: VecDeque::new(),
        ended: false,
    };
    // Prompts neither sampled nor scored have their choices now: no event will come.
    if !streaming.job.sampled {
        let now: Vec<usize> = (0..streaming.job.prompts.len())
            .filter(|&p| !streaming.job.scored.get(p).copied().unwrap_or(false))
            .collect();
        for s in unsampled_choices(&streaming.job, &[], now.into_iter()) {
            streaming.finished(s);
        }
    }
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
        .body(HttpBody::from_stream(chunks))
        .unwrap_or_else(|e| internal(e).into_response())
}

impl Streaming {
    fn chunk(&mut self, choices: Vec<Choice>, usage: Option<Usage>) {
        let first = !std::mem::replace(&mut self.began, true);
        // Prompt log-probs are refused with `stream`, as in vLLM.
        match body_line(&self.state, &self.job, choices, usage, Some(first), None) {
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
            Some(Event::Token(drawn)) => {
                if self.job.scored_prompt(drawn.request_index).is_none() {
                    self.token(drawn)
                }
            }
            Some(Event::Finished(s)) => match self.job.scored_prompt(s.request_index) {
                Some(p) => self.scored(p, *s),
                None => self.finished(*s),
            },
            Some(Event::Failed(e)) => self.fail(&e),
            None => self.fail("the engine stopped before the request finished"),
        }
    }

    /// A drawn token: its text as far as it is whole, its log-probs and alternatives.
    fn token(&mut self, drawn: DrawnToken) {
        let (request_index, token) = (drawn.request_index, drawn.token);
        let index = self.job.choice_index(request_index, drawn.sample_index);
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
        let offset = sample.chars;
        sample.tokens.push(token);
        sample.chars += text.chars().count();
        let (text, parsed) = parse(&mut sample.parser, text, false);
        let first = !std::mem::replace(&mut sample.started, true);
        let echo = if first {
            self.job.echo_of(request_index)
        } else {
            ""
        };
        let logprob = match self.state.logprobs_mode {
            LogprobsMode::Raw => drawn.logprob,
            LogprobsMode::Processed => drawn.sampling_logprob,
        };
        let top = [drawn.top];
        let piece = Piece {
            index,
            text: format!("{echo}{text}"),
            tokens: &[token],
            logprobs: &[logprob],
            top: match top[0].is_empty() {
                true => &[],
                false => &top,
            },
            text_offset: offset,
            first,
            finished: None,
            parsed,
        };
        let asked = asked_of(&self.state, &self.job, &self.scores, request_index);
        let choice = response::choice(tokenizer, &asked, piece);
        self.chunk(vec![choice], None);
    }

    /// Prompt `p`'s scoring pass: the samples that waited for it go out, and with
    /// `max_tokens` 0 the prompt's choices.
    fn scored(&mut self, p: usize, score: FinishedSample) {
        if let Some(slot) = self.scores.get_mut(p) {
            *slot = Some(score);
        }
        let (ready, waiting) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|s| prompt_number(&self.job, s.request_index) == p);
        self.held = waiting;
        let ready: Vec<FinishedSample> = match self.job.sampled {
            true => ready,
            false => unsampled_choices(&self.job, &self.scores, std::iter::once(p)),
        };
        for s in ready {
            self.finished(s);
        }
    }

    /// The last chunk of a finished sample: what was not sent yet, and why it ended.
    fn finished(&mut self, s: FinishedSample) {
        let p = prompt_number(&self.job, s.request_index);
        let unscored = self.scores.get(p).is_some_and(Option::is_none);
        if unscored && self.job.scored[p] {
            self.held.push(s);
            return;
        }
        let index = self.job.choice_index(s.request_index, s.sample_index);
        let tokenizer = &self.state.facts.tokenizer;
        let Some(sample) = self.samples.get_mut(index) else {
            return;
        };
        let sent = sample.tokens.len();
        let text = if sent == 0 {
            match response::sample_text(tokenizer, &s, text_options(&self.job)) {
                Ok(text) => text,
                Err(e) => return self.fail(&e.message),
            }
        } else if s.token_ids.starts_with(&sample.tokens) {
            // Tokens streamed one by one: the rest, and the text held back.
            let mut text = String::new();
            for &id in &s.token_ids[sent..] {
                match sample.decoder.push(tokenizer, id) {
                    Ok(piece) => text.push_str(&piece.unwrap_or_default()),
                    Err(e) => return self.fail(&e.to_string()),
                }
            }
            match sample.decoder.finish(tokenizer) {
                Ok(rest) => text.push_str(&rest),
                Err(e) => return self.fail(&e.to_string()),
            }
            text
        } else {
            return self.fail("a finished sample differs from the tokens streamed for it");
        };
        let (text, parsed) = parse(&mut sample.parser, text, true);
        let first = !std::mem::replace(&mut sample.started, true);
        sample.finished = true;
        let echo = if first {
            self.job.echo_of(s.request_index)
        } else {
            ""
        };
        let piece = Piece {
            index,
            text: format!("{echo}{text}"),
            tokens: &s.token_ids[sent..],
            logprobs: reported(&self.state, &s).get(sent..).unwrap_or_default(),
            top: s.top_logprobs.get(sent..).unwrap_or_default(),
            text_offset: sample.chars,
            first,
            finished: Some(&s),
            parsed,
        };
        let asked = asked_of(&self.state, &self.job, &self.scores, s.request_index);
        let choice = response::choice(tokenizer, &asked, piece);
        self.completion_tokens += s.token_ids.len();
        self.cached_tokens += cached_share(&s);
        self.chunk(vec![choice], None);
        if self.samples.iter().all(|s| s.finished) {
            self.pending.done = true;
            if self.job.fields.include_usage {
                let usage = usage(&self.job, self.completion_tokens, self.cached_tokens);
                self.chunk(Vec::new(), Some(usage));
            }
            self.end();
        }
    }
}
