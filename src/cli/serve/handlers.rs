//! From a body to an answer: the completions and chat handlers, and the steps every
//! generating route shares: reading and checking a body off the async workers
//! ([`prepared`]), a completion or chat body made a checked [`Submission`], and a
//! submission queued and answered ([`answer`]).
//!
//! A handler reads its body (`request`), turns it into checked token ids, queues it
//! (`submit`) and answers from its samples (`reply`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use sprout::tokenizer::chat_template::{Message, RenderOptions};

use crate::cli::serve::chat_fields::ToolChoice;
use crate::cli::serve::error::{ApiError, internal};
use crate::cli::serve::parsing::{self, Parsing};
use crate::cli::serve::reply;
use crate::cli::serve::request::{
    ChatRequest, ChatTokens, CompletionRequest, DEFAULT_MAX_TOKENS, Prompt,
};
use crate::cli::serve::response::Api;
use crate::cli::serve::state::AppState;
use crate::cli::serve::submit::{
    self, Submission, check_context, check_model, echo_texts, tokenize, truncate,
};
use crate::cli::serve::token_prefix;

/// The body's bytes, or the extractor's refusal (413 past the limit) as an OpenAI error.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| ApiError::status(e.status(), e.body_text()))
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(state, body, prepare_completion).await
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(state, body, prepare_chat).await
}

/// Reads and checks a body with `prepare`, queues it and answers it. `prepare` runs off
/// the async workers: tokenizing and rendering a template are CPU work that grows with
/// the body, and one large request must not stall the others.
async fn handle(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    prepare: fn(&AppState, &[u8], Instant) -> Result<Submission, ApiError>,
) -> Result<Response, ApiError> {
    let submission = prepared(&state, body, prepare).await?;
    answer(state, submission).await
}

/// What `prepare` makes of a body, run off the async workers (see [`handle`]).
pub async fn prepared<T: Send + 'static>(
    state: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    prepare: fn(&AppState, &[u8], Instant) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let arrived = Instant::now();
    let body = body_bytes(body)?;
    let shared = state.clone();
    tokio::task::spawn_blocking(move || prepare(&shared, &body, arrived))
        .await
        .map_err(internal)?
}

pub fn prepare_completion(
    state: &AppState,
    body: &[u8],
    arrived: Instant,
) -> Result<Submission, ApiError> {
    let request = CompletionRequest::parse(body)?;
    let f = &request.fields;
    check_model(state, f)?;
    let mut prompts = tokenize(state, &request.prompts, f.add_special_tokens)?;
    let cut = truncate(state, &mut prompts, f.truncate_prompt_tokens)?;
    let max_tokens = f.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    check_context(state, &prompts, max_tokens)?;
    let echo = match f.echo {
        true => echo_texts(
            state,
            &request.prompts,
            &prompts,
            cut,
            f.skip_special_tokens,
        )?,
        false => Vec::new(),
    };
    Ok(Submission {
        api: Api::Completions,
        fields: request.fields,
        prompts,
        max_tokens,
        echo,
        arrived,
        parsing: Parsing::default(),
    })
}

fn prepare_chat(state: &AppState, body: &[u8], arrived: Instant) -> Result<Submission, ApiError> {
    chat_submission(state, body, arrived).map(|(_, submission)| submission)
}

/// A chat body's submission, and the prompt's text as the template rendered it.
pub fn chat_submission(
    state: &AppState,
    body: &[u8],
    arrived: Instant,
) -> Result<(String, Submission), ApiError> {
    let request = ChatRequest::parse(body)?;
    check_model(state, &request.fields)?;
    let has_tools = request.render.tools.is_some();
    let tool_choice_auto = request.tool_choice == ToolChoice::Auto;
    state
        .parsers
        .check_tool_choice(has_tools, tool_choice_auto)?;
    let thinking = parsing::thinking_enabled(&request.render.kwargs);
    let text = render_messages(state, &request.messages, &request.render)?;
    let f = &request.fields;
    let mut prompts = tokenize(state, &[Prompt::Text(text.clone())], f.add_special_tokens)?;
    exact_prefix(
        state,
        &request.messages,
        &request.tokens,
        &request.render,
        f.add_special_tokens,
        &mut prompts[0],
    )?;
    truncate(state, &mut prompts, f.truncate_prompt_tokens)?;
    // Chat's default: the rest of the context.
    let room = state.max_model_len.saturating_sub(prompts[0].len());
    let max_tokens = request.fields.max_tokens.unwrap_or(room.max(1));
    check_context(state, &prompts, max_tokens)?;
    let submission = Submission {
        api: Api::Chat,
        fields: request.fields,
        prompts,
        max_tokens,
        echo: Vec::new(),
        arrived,
        // Tool calls parsed when the request has tools and may call them (the server's
        // parser; `check_tool_choice` refused those it cannot parse), reasoning with the
        // server's parser.
        parsing: state
            .parsers
            .reply_parsing(has_tools, tool_choice_auto, thinking),
    };
    Ok((text, submission))
}

/// With earlier turns' exact tokens (`tokens`, see `token_prefix`), `prompt` (the
/// conversation `messages` as `options` rendered it, tokenized with `add_special_tokens`)
/// made to start with them: the messages through the one the prefix ends with are
/// rendered again, with the same options but no generation prompt, to find where the
/// prefix's turn ends in `prompt`. The chat route and `/tokenize` both splice here.
pub fn exact_prefix(
    state: &AppState,
    messages: &[Message],
    tokens: &ChatTokens,
    options: &RenderOptions,
    add_special_tokens: bool,
    prompt: &mut Vec<u32>,
) -> Result<(), ApiError> {
    let required = tokens.required.as_deref();
    token_prefix::check(
        &tokens.turns,
        required,
        state.facts.vocab_size,
        state.max_model_len,
    )?;
    let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
    let Some(prefix) = token_prefix::required_prefix(&roles, &tokens.turns, required) else {
        return Ok(());
    };
    let partial = RenderOptions {
        add_generation_prompt: false,
        continue_final_message: false,
        ..options.clone()
    };
    let text = render_messages(state, &messages[..=prefix.through], &partial)?;
    let through = state
        .facts
        .tokenizer
        .encode_with(&text, add_special_tokens)
        .map_err(|e| {
            ApiError::bad(
                "messages",
                format!("the prompt could not be tokenized: {e}"),
            )
        })?;
    *prompt = token_prefix::splice(&prefix.tokens, &through, prompt, &state.facts.eos_token_ids)?;
    Ok(())
}

/// `messages` rendered by the server's chat template with `options` (every chat route
/// renders through here: chat completions, its render route, `/tokenize`).
pub fn render_messages(
    state: &AppState,
    messages: &[Message],
    options: &RenderOptions,
) -> Result<String, ApiError> {
    let Some(template) = &state.facts.chat_template else {
        return Err(ApiError::bad(
            "messages",
            "this model has no chat template; start the server with --chat-template FILE",
        ));
    };
    template
        .render_with(messages, options)
        .map_err(|e| ApiError::bad("messages", e.to_string()))
}

/// Queues a checked request and answers it, whole or streamed.
pub async fn answer(state: Arc<AppState>, submission: Submission) -> Result<Response, ApiError> {
    let (job, events, pending) = submit::submit(&state, submission).await?;
    if job.fields.stream {
        Ok(reply::stream(state, job, events, pending))
    } else {
        reply::whole(&state, job, events, pending).await
    }
}
