//! `POST /tokenize` and `POST /detokenize`, in vLLM's shapes, so that a trainer never
//! tokenizes text on its own side.
//!
//! `/tokenize` takes `{prompt, add_special_tokens = true}` or `{messages, ...}` (rendered
//! by the server's chat template exactly as `/v1/chat/completions` renders them, with the
//! same `tools`, `chat_template_kwargs`, `add_generation_prompt` and
//! `continue_final_message`, and
//! tokenized as it tokenizes them: `add_special_tokens` defaults to the chat route's
//! default, and earlier turns' exact tokens (`token_prefix`'s fields on assistant
//! messages, `required_prefix_token_ids`) are spliced in as it splices them, so the ids
//! are the ones that route would run) and answers `{count,
//! max_model_len, tokens, token_strs}` (`token_strs`: each id's vocabulary entry, with
//! `return_token_strs`). The other chat options are accepted at their neutral values only,
//! by the field table's chat rules.
//!
//! `/detokenize` takes `{tokens}` and answers `{prompt}`: the text of the ids, special
//! tokens included (transformers' `decode`); an id outside the vocabulary is a 400 naming
//! it.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use serde_json::{Map, Value, json};

use crate::cli::serve::chat_fields;
use crate::cli::serve::error::{ApiError, short};
use crate::cli::serve::fields::{Treatment, rule};
use crate::cli::serve::handlers::{exact_prefix, prepared, render_messages};
use crate::cli::serve::request::{Prompt, chat_tokens, field, get, messages, object};
use crate::cli::serve::state::AppState;
use crate::cli::serve::submit::{check_model_name, tokenize as encode};

/// The chat options a `/tokenize` body may carry besides those `chat_fields` reads, each
/// at a neutral value of the chat route's.
const CHAT_OPTIONS: &[&str] = &["chat_template", "media_io_kwargs", "mm_processor_kwargs"];

/// The token ids of a `/tokenize` body, and whether it asked for their strings.
fn tokens_of(state: &AppState, body: &[u8], _: Instant) -> Result<(Vec<u32>, bool), ApiError> {
    let obj = object(body)?;
    check_model_name(
        state,
        field::<String>(&obj, "model", "a string")?.as_deref(),
    )?;
    let strs = field(&obj, "return_token_strs", "a boolean")?.unwrap_or(false);
    let add: Option<bool> = field(&obj, "add_special_tokens", "a boolean")?;
    let ids = match (get(&obj, "prompt"), get(&obj, "messages")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad("prompt", "give prompt or messages, not both"));
        }
        (Some(Value::String(text)), None) => {
            encode(state, &[Prompt::Text(text.clone())], add.unwrap_or(true))?
        }
        (Some(v), None) => {
            return Err(ApiError::bad(
                "prompt",
                format!("prompt must be a string, not {}", short(v)),
            ));
        }
        (None, messages_value) => {
            chat_options(&obj)?;
            let messages = messages(messages_value)?;
            let (options, _) = chat_fields::render_options(&obj)?;
            let tokens = chat_tokens(&obj)?;
            let text = render_messages(state, &messages, &options)?;
            // The chat route's default, so that these are the ids it runs.
            let add = add.unwrap_or(true);
            let mut ids = encode(state, &[Prompt::Text(text)], add)?;
            exact_prefix(state, &messages, &tokens, &options, add, &mut ids[0])?;
            ids
        }
    };
    Ok((ids.into_iter().next().unwrap_or_default(), strs))
}

/// Refuses a chat option at a value the template cannot honour, as the chat route does.
fn chat_options(obj: &Map<String, Value>) -> Result<(), ApiError> {
    for &name in CHAT_OPTIONS {
        let (Some(value), Some(rule)) = (get(obj, name), rule(name)) else {
            continue;
        };
        if rule.chat == Some(Treatment::Neutral) && rule.is_neutral(value) {
            continue;
        }
        let message = match rule.neutral.is_empty() {
            true => format!("{name} is not supported by sprout: {}", rule.does),
            false => format!(
                "{name} is accepted only as {}, not {}: {}",
                rule.neutral.join(" or "),
                short(value),
                rule.does
            ),
        };
        return Err(ApiError::bad(name, message));
    }
    Ok(())
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let (tokens, strs) = prepared(&state, body, tokens_of).await?;
    let tokenizer = &state.facts.tokenizer;
    let token_strs: Option<Vec<String>> = strs.then(|| {
        tokens
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap_or_default())
            .collect()
    });
    Ok(Json(json!({
        "count": tokens.len(),
        "max_model_len": state.max_model_len,
        "tokens": tokens,
        "token_strs": token_strs,
    })))
}

/// The text of a `/detokenize` body's ids.
fn text_of(state: &AppState, body: &[u8], _: Instant) -> Result<String, ApiError> {
    let obj = object(body)?;
    check_model_name(
        state,
        field::<String>(&obj, "model", "a string")?.as_deref(),
    )?;
    let tokens: Vec<u32> = field(&obj, "tokens", "a list of token ids")?
        .ok_or_else(|| ApiError::bad("tokens", "tokens is required"))?;
    let vocab = state.facts.vocab_size;
    if let Some(bad) = tokens.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::bad(
            "tokens",
            format!("tokens: {bad} is outside the vocabulary of {vocab}"),
        ));
    }
    state
        .facts
        .tokenizer
        .decode_with(&tokens, false)
        .map_err(|e| ApiError::bad("tokens", format!("tokens could not be decoded: {e}")))
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let prompt = prepared(&state, body, text_of).await?;
    Ok(Json(json!({ "prompt": prompt })))
}
