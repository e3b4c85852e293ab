//! `POST /inference/v1/generate`: vLLM's tokens-in, tokens-out route. The body is
//! `GenerateRequest` (`token_ids`, `sampling_params` in vLLM's `SamplingParams` names,
//! `request_id`, `model`, `stream`, `stream_options`, `cache_salt`, ...), screened by the
//! field table's generate column; the answer is `GenerateResponse`: per choice its token
//! ids, log-probs keyed `token_id:ID` (with `sampling_params.logprobs`), finish reason and
//! sprout's fields (the weights version(s)), then usage. Streamed as vLLM streams it: a
//! chunk per delta, a usage chunk with no choices when asked for, then `[DONE]`.
//!
//! The request goes through the same checks, queue and answer as the completions route
//! (`submit`, `reply`), so the same prompt ids and seed give the same tokens and log-probs,
//! bitwise, and aborts answer what was drawn with finish reason "abort". A missing
//! `max_tokens` is the rest of the context, as vLLM's server has it.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use serde_json::{Map, Value};

use crate::cli::serve::error::{ApiError, short};
use crate::cli::serve::fields::screen_generate;
use crate::cli::serve::handlers::{self, answer};
use crate::cli::serve::parsing::Parsing;
use crate::cli::serve::request::{SamplingFields, check_top, field, get, object};
use crate::cli::serve::response::Api;
use crate::cli::serve::state::AppState;
use crate::cli::serve::submit::{Submission, check_context, check_model, truncate};

/// A `POST /inference/v1/generate` body.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub token_ids: Vec<u32>,
    pub fields: SamplingFields,
}

impl GenerateRequest {
    pub fn parse(body: &[u8]) -> Result<GenerateRequest, ApiError> {
        let top = object(body)?;
        let params = match get(&top, "sampling_params") {
            None => Map::new(),
            Some(Value::Object(params)) => params.clone(),
            Some(v) => {
                return Err(ApiError::bad(
                    "sampling_params",
                    format!("sampling_params must be an object, not {}", short(v)),
                ));
            }
        };
        screen_generate(&top, &params)?;
        let token_ids: Vec<u32> = field(&top, "token_ids", "a list of token ids")?
            .ok_or_else(|| ApiError::bad("token_ids", "token_ids is required"))?;
        if token_ids.is_empty() {
            return Err(ApiError::bad("token_ids", "token_ids must not be empty"));
        }
        let mut fields = SamplingFields::sampling(&params)?;
        fields.envelope(&top)?;
        let logprobs: Option<usize> = field(&params, "logprobs", "a non-negative integer")?;
        fields.logprobs = logprobs.map(|k| check_top("logprobs", k)).transpose()?;
        // Read for its type only: the answer is token ids whether or not text is made.
        let _: Option<bool> = field(&params, "detokenize", "a boolean")?;
        // The answer is ids, and log-probs name tokens by id, as vLLM's route does.
        fields.return_token_ids = true;
        fields.return_tokens_as_token_ids = true;
        Ok(GenerateRequest { token_ids, fields })
    }
}

/// The checked submission of a generate body.
fn prepare(state: &AppState, body: &[u8], arrived: Instant) -> Result<Submission, ApiError> {
    let request = GenerateRequest::parse(body)?;
    let f = &request.fields;
    check_model(state, f)?;
    let vocab = state.facts.vocab_size;
    if let Some(bad) = request.token_ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::bad(
            "token_ids",
            format!("token_ids: {bad} is outside the vocabulary of {vocab}"),
        ));
    }
    let mut prompts = vec![request.token_ids];
    truncate(state, &mut prompts, f.truncate_prompt_tokens)?;
    let room = state.max_model_len.saturating_sub(prompts[0].len());
    let max_tokens = f.max_tokens.unwrap_or(room.max(1));
    check_context(state, &prompts, max_tokens)?;
    Ok(Submission {
        api: Api::Generate,
        fields: request.fields,
        prompts,
        max_tokens,
        echo: Vec::new(),
        arrived,
        parsing: Parsing::default(),
    })
}

pub async fn generate(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let submission = handlers::prepared(&state, body, prepare).await?;
    answer(state, submission).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<GenerateRequest, ApiError> {
        GenerateRequest::parse(body.as_bytes())
    }

    #[test]
    fn a_body_reads_in_vllm_s_names() {
        let r = parse(
            r#"{"token_ids": [1, 2, 3], "request_id": "g", "cache_salt": "s",
                "sampling_params": {"n": 2, "temperature": 0.5, "seed": 7, "logprobs": 3,
                                    "max_tokens": 4, "stop": "x", "detokenize": false}}"#,
        )
        .unwrap();
        let f = &r.fields;
        assert_eq!(r.token_ids, vec![1, 2, 3]);
        assert_eq!(
            (f.n, f.seed, f.logprobs, f.max_tokens),
            (2, Some(7), Some(3), Some(4))
        );
        assert_eq!(f.temperature, 0.5);
        assert_eq!(f.stop, vec!["x".to_string()]);
        assert_eq!(f.request_id.as_deref(), Some("g"));
        assert_eq!(f.cache_salt.as_deref(), Some("s"));
        assert!(f.return_token_ids && f.return_tokens_as_token_ids);
    }

    #[test]
    fn a_bad_body_names_the_field() {
        let cases = [
            (r#"{}"#, "token_ids"),
            (r#"{"token_ids": []}"#, "token_ids"),
            (r#"{"token_ids": [1, -1]}"#, "token_ids"),
            (r#"{"token_ids": "hi"}"#, "token_ids"),
            (
                r#"{"token_ids": [1], "sampling_params": 3}"#,
                "sampling_params",
            ),
            (r#"{"token_ids": [1], "temperature": 0.5}"#, "temperature"),
            (
                r#"{"token_ids": [1], "sampling_params": {"model": "m"}}"#,
                "model",
            ),
            (
                r#"{"token_ids": [1], "sampling_params": {"top_logprobs": 2}}"#,
                "top_logprobs",
            ),
            (
                r#"{"token_ids": [1], "sampling_params": {"prompt_logprobs": 21}}"#,
                "prompt_logprobs",
            ),
            (
                r#"{"token_ids": [1], "sampling_params": {"logprobs": true}}"#,
                "logprobs",
            ),
            (
                r#"{"token_ids": [1], "sampling_params": {"output_kind": 3}}"#,
                "output_kind",
            ),
            (
                r#"{"token_ids": [1], "stream": true, "sampling_params": {"prompt_logprobs": 0}}"#,
                "prompt_logprobs",
            ),
            (r#"{"token_ids": [1], "priority": 1}"#, "priority"),
            (
                r#"{"token_ids": [1], "kv_transfer_params": {}}"#,
                "kv_transfer_params",
            ),
            (r#"{"token_ids": [1], "cache_salt": ""}"#, "cache_salt"),
            (r#"{"token_ids": [1], "cache_salt": 3}"#, "cache_salt"),
        ];
        for (body, param) in cases {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            assert!(e.message.contains(param), "{body}: {}", e.message);
        }
        let long = format!(
            r#"{{"token_ids": [1], "cache_salt": "{}"}}"#,
            "s".repeat(1025)
        );
        assert_eq!(
            parse(&long).unwrap_err().param.as_deref(),
            Some("cache_salt")
        );
    }
}
