//! The OpenAI completions API's shapes: reading a request body (every field checked, each
//! error naming its field) and the response and stream-chunk bodies.
//!
//! A body is read field by field from a JSON object rather than derived, so that a wrong
//! type is a 400 naming the field and the value, never a generic serde message. Fields
//! this server does not know are ignored, as OpenAI-compatible servers do.
//!
//! Responses are typed structs written with their f32 numbers in shortest form, and every
//! one goes through `json_out` first, so a NaN never reaches a client as `null`.

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use sprout::sched::{FinishReason, FinishedSample, MAX_TOP_LOGPROBS, TopLogprob};
use sprout::tokenizer::Tokenizer;

use crate::cli::serve::error::ApiError;

/// A prompt as the client gave it.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

/// A `POST /v1/completions` body, read and type-checked (ranges are checked later, by the
/// one set of sampling rules).
#[derive(Clone, Debug)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompts: Vec<Prompt>,
    pub n: usize,
    pub max_tokens: usize,
    pub temperature: f32,
    pub top_p: f32,
    /// 0 (or -1, as vLLM writes it): every token.
    pub top_k: usize,
    pub min_p: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub min_tokens: usize,
    pub ignore_eos: bool,
    /// Alternatives per position; `None`: no log-probs in the choices.
    pub logprobs: Option<usize>,
    pub return_token_ids: bool,
    pub stream: bool,
    pub include_usage: bool,
}

/// OpenAI's default for `max_tokens` in completions.
pub const DEFAULT_MAX_TOKENS: usize = 16;

/// The value of field `name` of `obj` as a `T`, `None` when absent or null; `what` says
/// what the field must be, in the error.
fn field<T: DeserializeOwned>(
    obj: &Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<Option<T>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|_| ApiError::bad(name, format!("{name} must be {what}, not {}", short(v)))),
    }
}

/// A value's JSON text, cut short for an error message.
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

impl CompletionRequest {
    pub fn parse(body: &[u8]) -> Result<CompletionRequest, ApiError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::status(
                axum::http::StatusCode::BAD_REQUEST,
                format!("the body is not valid JSON: {e}"),
            )
        })?;
        let Value::Object(obj) = value else {
            return Err(ApiError::status(
                axum::http::StatusCode::BAD_REQUEST,
                format!("the body must be a JSON object, not {}", short(&value)),
            ));
        };
        let prompts = prompts(obj.get("prompt"))?;
        // i128 holds every JSON integer, so a huge n is refused by the queue, not here.
        let n: i128 = field(&obj, "n", "an integer")?.unwrap_or(1);
        if n < 1 {
            return Err(ApiError::bad("n", format!("n must be at least 1, not {n}")));
        }
        let top_k: i64 = field(&obj, "top_k", "an integer")?.unwrap_or(0);
        if top_k < -1 {
            return Err(ApiError::bad(
                "top_k",
                format!("top_k must be -1, 0 (every token) or a positive integer, not {top_k}"),
            ));
        }
        let stop = match obj.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(_) => field(&obj, "stop", "a string or a list of strings")?.unwrap_or_default(),
        };
        let logprobs: Option<usize> = field(&obj, "logprobs", "a non-negative integer")?;
        if let Some(k) = logprobs
            && k > MAX_TOP_LOGPROBS
        {
            return Err(ApiError::bad(
                "logprobs",
                format!("logprobs must be at most {MAX_TOP_LOGPROBS}, not {k}"),
            ));
        }
        let stream: bool = field(&obj, "stream", "a boolean")?.unwrap_or(false);
        let include_usage = match obj.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(Value::Object(options)) => {
                if !stream {
                    return Err(ApiError::bad(
                        "stream_options",
                        "stream_options is only allowed when stream is true",
                    ));
                }
                field(options, "include_usage", "a boolean")?.unwrap_or(false)
            }
            Some(v) => {
                return Err(ApiError::bad(
                    "stream_options",
                    format!("stream_options must be an object, not {}", short(v)),
                ));
            }
        };
        Ok(CompletionRequest {
            model: field(&obj, "model", "a string")?,
            prompts,
            n: usize::try_from(n).unwrap_or(usize::MAX),
            max_tokens: field(&obj, "max_tokens", "a non-negative integer")?
                .unwrap_or(DEFAULT_MAX_TOKENS),
            temperature: field(&obj, "temperature", "a number")?.unwrap_or(1.0),
            top_p: field(&obj, "top_p", "a number")?.unwrap_or(1.0),
            top_k: top_k.max(0) as usize,
            min_p: field(&obj, "min_p", "a number")?.unwrap_or(0.0),
            seed: field(&obj, "seed", "a non-negative integer")?,
            stop,
            stop_token_ids: field(&obj, "stop_token_ids", "a list of token ids")?
                .unwrap_or_default(),
            min_tokens: field(&obj, "min_tokens", "a non-negative integer")?.unwrap_or(0),
            ignore_eos: field(&obj, "ignore_eos", "a boolean")?.unwrap_or(false),
            logprobs,
            return_token_ids: field(&obj, "return_token_ids", "a boolean")?.unwrap_or(false),
            stream,
            include_usage,
        })
    }
}

/// `prompt`: a string, a list of strings, a list of token ids, or a list of those lists.
fn prompts(value: Option<&Value>) -> Result<Vec<Prompt>, ApiError> {
    let wrong = |v: &Value| {
        ApiError::bad(
            "prompt",
            format!(
                "prompt must be a string, a list of strings, a list of token ids or a list of \
                 lists of token ids, not {}",
                short(v)
            ),
        )
    };
    let empty = || ApiError::bad("prompt", "prompt must not be empty");
    let ids = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|i| {
                i.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| wrong(i))
            })
            .collect()
    };
    let one = |v: &Value| -> Result<Prompt, ApiError> {
        match v {
            Value::String(s) if s.is_empty() => Err(empty()),
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Array(items) if items.is_empty() => Err(empty()),
            Value::Array(items) => Ok(Prompt::Ids(ids(items)?)),
            other => Err(wrong(other)),
        }
    };
    match value {
        None | Some(Value::Null) => Err(ApiError::bad("prompt", "prompt is required")),
        Some(Value::Array(items)) if items.is_empty() => Err(empty()),
        // A list of numbers is one prompt of token ids.
        Some(Value::Array(items)) if items[0].is_number() => Ok(vec![Prompt::Ids(ids(items)?)]),
        Some(Value::Array(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

/// One choice of a response, or of a stream chunk.
#[derive(Serialize)]
pub struct Choice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<Logprobs>,
    pub finish_reason: Option<FinishReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// sprout's own fields, on a finished sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sprout: Option<SproutFields>,
}

/// OpenAI's completions log-probs: per token its text, log-prob, the most likely
/// alternatives (text to log-prob) and where its text starts in the completion.
#[derive(Serialize, Default)]
pub struct Logprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<TopMap>,
    pub text_offset: Vec<usize>,
}

/// A position's alternatives as a JSON object, most likely first (a text that two tokens
/// share keeps the likelier one).
pub struct TopMap(pub Vec<(String, f32)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (text, logprob) in &self.0 {
            map.serialize_entry(text, logprob)?;
        }
        map.end()
    }
}

/// What sprout returns besides OpenAI's fields.
#[derive(Serialize)]
pub struct SproutFields {
    /// Each token's log-prob under the distribution it was drawn from.
    pub sampling_logprobs: Vec<f32>,
    /// Each token's log-prob under the model (temperature 1), as a plain list.
    pub logprobs: Vec<f32>,
    pub weights_version: u64,
    /// The stop string that ended the sample, if one did.
    pub stop_string: Option<String>,
}

#[derive(Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache when each prompt was admitted.
    pub cached_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// A response body, or one stream chunk (`usage` only in the last, when asked for).
#[derive(Serialize)]
pub struct Completion<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<Choice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The text of one token by itself, as the log-probs show it.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer.decode_with(&[id], false).unwrap_or_default()
}

/// The log-probs of `tokens` (with their model log-probs and alternatives), their text
/// starting `offset` characters into the completion.
pub fn logprobs(
    tokenizer: &Tokenizer,
    tokens: &[u32],
    logprobs: &[f32],
    top: &[Vec<TopLogprob>],
    mut offset: usize,
) -> Logprobs {
    let mut out = Logprobs::default();
    for (i, (&id, &lp)) in tokens.iter().zip(logprobs).enumerate() {
        let text = token_text(tokenizer, id);
        out.text_offset.push(offset);
        offset += text.chars().count();
        let mut alternatives: Vec<(String, f32)> = Vec::new();
        for t in top.get(i).map(Vec::as_slice).unwrap_or_default() {
            let text = token_text(tokenizer, t.token);
            if !alternatives.iter().any(|(seen, _)| *seen == text) {
                alternatives.push((text, t.logprob));
            }
        }
        out.tokens.push(text);
        out.token_logprobs.push(lp);
        out.top_logprobs.push(TopMap(alternatives));
    }
    out
}

/// The text of a finished sample: cut before its stop string when one ended it.
pub fn sample_text(tokenizer: &Tokenizer, sample: &FinishedSample) -> Result<String, ApiError> {
    match &sample.stopped_by {
        Some(m) => Ok(m.text.clone()),
        None => tokenizer.decode_with(&sample.token_ids, true).map_err(|e| {
            ApiError::status(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }),
    }
}

/// sprout's fields of a finished sample.
pub fn sprout_fields(sample: &FinishedSample, weights_version: u64) -> SproutFields {
    SproutFields {
        sampling_logprobs: sample.sampling_logprobs.clone(),
        logprobs: sample.logprobs.clone(),
        weights_version,
        stop_string: sample.stopped_by.as_ref().map(|m| m.stop.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<CompletionRequest, ApiError> {
        CompletionRequest::parse(body.as_bytes())
    }

    #[test]
    fn every_prompt_form_reads() {
        let p = |body: &str| parse(body).unwrap().prompts;
        assert_eq!(p(r#"{"prompt": "hi"}"#), vec![Prompt::Text("hi".into())]);
        assert_eq!(
            p(r#"{"prompt": ["a", "b"]}"#),
            vec![Prompt::Text("a".into()), Prompt::Text("b".into())]
        );
        assert_eq!(p(r#"{"prompt": [1, 2]}"#), vec![Prompt::Ids(vec![1, 2])]);
        assert_eq!(
            p(r#"{"prompt": [[1], [2, 3]]}"#),
            vec![Prompt::Ids(vec![1]), Prompt::Ids(vec![2, 3])]
        );
    }

    #[test]
    fn a_wrong_type_or_range_names_the_field() {
        let cases = [
            (r#"{"prompt": "x", "n": "two"}"#, "n"),
            (r#"{"prompt": "x", "n": 0}"#, "n"),
            (r#"{"prompt": "x", "temperature": "hot"}"#, "temperature"),
            (r#"{"prompt": "x", "logprobs": 21}"#, "logprobs"),
            (r#"{"prompt": "x", "stop": 3}"#, "stop"),
            (r#"{"prompt": "x", "top_k": -2}"#, "top_k"),
            (r#"{"prompt": "x", "stream_options": {}}"#, "stream_options"),
            (r#"{"prompt": ""}"#, "prompt"),
            (r#"{"prompt": []}"#, "prompt"),
            (r#"{"prompt": [1, -1]}"#, "prompt"),
            (r#"{"prompt": {"a": 1}}"#, "prompt"),
            (r#"{}"#, "prompt"),
        ];
        for (body, param) in cases {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            assert!(e.message.contains(param), "{body}: {}", e.message);
        }
        for body in ["{", "[1]", "null"] {
            assert_eq!(parse(body).unwrap_err().status, 400, "{body}");
        }
    }

    #[test]
    fn the_defaults_are_openai_s() {
        let r = parse(r#"{"prompt": "x", "top_k": -1, "stop": "a"}"#).unwrap();
        assert_eq!((r.n, r.max_tokens, r.top_k), (1, DEFAULT_MAX_TOKENS, 0));
        assert_eq!((r.temperature, r.top_p, r.min_p), (1.0, 1.0, 0.0));
        assert_eq!(r.stop, vec!["a".to_string()]);
        assert!(r.logprobs.is_none() && !r.stream && !r.include_usage);
    }

    #[test]
    fn alternatives_serialize_as_an_ordered_object() {
        let m = TopMap(vec![("b".into(), -0.5), ("a".into(), -1.25)]);
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"b":-0.5,"a":-1.25}"#
        );
    }
}
