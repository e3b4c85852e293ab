//! Reading request bodies: `POST /v1/completions` and `POST /v1/chat/completions`, every
//! field type-checked, each error naming its field.
//!
//! A body is first screened against the field table (`fields`: refused fields, neutral-only
//! ones at another value, fields of the other route), then read field by field from a JSON
//! object rather than derived, so that a wrong type is a 400 naming the field and the
//! value, never a generic serde message. Ranges are checked later, by the one set of
//! sampling rules (`SamplingParams::validate`), except where the API's shape decides them
//! (`n`, `top_k`, log-prob counts, `truncate_prompt_tokens`).

use axum::http::StatusCode;
use serde_json::{Map, Value};
use sprout::sched::MAX_TOP_LOGPROBS;
use sprout::tokenizer::chat_template::{Message, RenderOptions};

pub(super) use crate::cli::serve::body_fields::{field, get};
use crate::cli::serve::chat_fields::{self, ToolChoice};
use crate::cli::serve::error::{ApiError, short};
use crate::cli::serve::fields::screen;
use crate::cli::serve::response::Api;
use crate::cli::serve::token_prefix::{self, TurnTokens};

/// A prompt as the client gave it.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

/// The fields both APIs share: how to sample, and what to return.
#[derive(Clone, Debug)]
pub struct SamplingFields {
    pub model: Option<String>,
    /// The client's name for the request (its response's `id`; `/abort_requests` takes it).
    pub request_id: Option<String>,
    pub n: usize,
    /// `None`: the API's default (16 for completions, the rest of the context for chat).
    pub max_tokens: Option<usize>,
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
    pub return_token_ids: bool,
    /// vLLM's `return_tokens_as_token_ids`: log-probs name tokens `token_id:ID`, not text.
    pub return_tokens_as_token_ids: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// Alternatives per position; `None`: no log-probs in the choices.
    pub logprobs: Option<usize>,
    /// vLLM's `prompt_logprobs`: each prompt token's log-prob and this many alternatives
    /// (`None`: not asked).
    pub prompt_logprobs: Option<usize>,
    /// What is done to the logits (token ids as given; `bad_words` still words).
    pub logit_bias: Vec<(u32, f32)>,
    pub allowed_token_ids: Option<Vec<u32>>,
    pub bad_words: Vec<String>,
    pub repetition_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Completions: the prompt's text goes before each completion's.
    pub echo: bool,
    /// Keep the prompt's last k tokens (`Some(None)`: -1, the context's length).
    pub truncate_prompt_tokens: Option<Option<usize>>,
    pub add_special_tokens: bool,
    pub skip_special_tokens: bool,
    pub include_stop_str_in_output: bool,
    /// Who sent the request (`user`, `session_id`, ...), for its log line.
    pub provenance: Vec<(&'static str, String)>,
    /// vLLM's `cache_salt`: the request's prompt blocks are shared only with requests of
    /// the same salt (`None`: with every unsalted request).
    pub cache_salt: Option<String>,
}

/// A `POST /v1/completions` body.
#[derive(Clone, Debug)]
pub struct CompletionRequest {
    pub prompts: Vec<Prompt>,
    pub fields: SamplingFields,
}

/// A `POST /v1/chat/completions` body.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub fields: SamplingFields,
    /// How the template renders the messages (tools, generation prompt, kwargs).
    pub render: RenderOptions,
    /// Whether the model may call the tools; what parses the answer's calls reads it.
    pub tool_choice: ToolChoice,
    /// The earlier turns' exact tokens (`token_prefix`), read beside the messages so
    /// that they never reach the template.
    pub tokens: ChatTokens,
}

/// NeMo Gym's token fields of a chat body (see `token_prefix`).
#[derive(Clone, Debug, Default)]
pub struct ChatTokens {
    /// Per message, the token fields it carries.
    pub turns: Vec<Option<TurnTokens>>,
    /// `required_prefix_token_ids`.
    pub required: Option<Vec<u32>>,
}

/// The longest `request_id` accepted.
pub const MAX_REQUEST_ID_BYTES: usize = 256;

/// The longest `cache_salt` accepted.
pub const MAX_CACHE_SALT_BYTES: usize = 1024;

/// OpenAI's default for `max_tokens` in completions.
pub const DEFAULT_MAX_TOKENS: usize = 16;

/// The body as a JSON object.
pub(super) fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::status(
            StatusCode::BAD_REQUEST,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    match value {
        Value::Object(obj) => Ok(obj),
        other => Err(ApiError::status(
            StatusCode::BAD_REQUEST,
            format!("the body must be a JSON object, not {}", short(&other)),
        )),
    }
}

/// At most [`MAX_TOP_LOGPROBS`] alternatives per position.
pub(super) fn check_top(name: &str, k: usize) -> Result<usize, ApiError> {
    match k > MAX_TOP_LOGPROBS {
        true => Err(ApiError::bad(
            name,
            format!("{name} must be at most {MAX_TOP_LOGPROBS}, not {k}"),
        )),
        false => Ok(k),
    }
}

impl SamplingFields {
    /// The shared fields of `obj`; `logprobs` is left for the API to read.
    pub(super) fn parse(obj: &Map<String, Value>) -> Result<SamplingFields, ApiError> {
        let mut fields = SamplingFields::sampling(obj)?;
        fields.envelope(obj)?;
        fields.return_token_ids = field(obj, "return_token_ids", "a boolean")?.unwrap_or(false);
        fields.return_tokens_as_token_ids =
            field(obj, "return_tokens_as_token_ids", "a boolean")?.unwrap_or(false);
        fields.add_special_tokens = field(obj, "add_special_tokens", "a boolean")?.unwrap_or(true);
        fields.provenance = provenance(obj, &["user", "session_id"])?;
        Ok(fields)
    }

    /// The fields of `obj` that vLLM's `SamplingParams` names alike (all but `logprobs`,
    /// whose type differs by API); the rest at their defaults.
    pub(super) fn sampling(obj: &Map<String, Value>) -> Result<SamplingFields, ApiError> {
        // i128 holds every JSON integer, so a huge n is refused by the queue, not here.
        let n: i128 = field(obj, "n", "an integer")?.unwrap_or(1);
        if n < 1 {
            return Err(ApiError::bad("n", format!("n must be at least 1, not {n}")));
        }
        let top_k: i64 = field(obj, "top_k", "an integer")?.unwrap_or(0);
        if top_k < -1 {
            return Err(ApiError::bad(
                "top_k",
                format!("top_k must be -1, 0 (every token) or a positive integer, not {top_k}"),
            ));
        }
        let stop = match get(obj, "stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(_) => field(obj, "stop", "a string or a list of strings")?.unwrap_or_default(),
        };
        let whole = "a non-negative integer";
        let prompt_logprobs = prompt_logprobs(obj)?;
        Ok(SamplingFields {
            model: None,
            request_id: None,
            n: usize::try_from(n).unwrap_or(usize::MAX),
            max_tokens: field(obj, "max_tokens", whole)?,
            temperature: field(obj, "temperature", "a number")?.unwrap_or(1.0),
            top_p: field(obj, "top_p", "a number")?.unwrap_or(1.0),
            top_k: top_k.max(0) as usize,
            min_p: field(obj, "min_p", "a number")?.unwrap_or(0.0),
            seed: field(obj, "seed", whole)?,
            stop,
            stop_token_ids: field(obj, "stop_token_ids", "a list of token ids")?
                .unwrap_or_default(),
            min_tokens: field(obj, "min_tokens", whole)?.unwrap_or(0),
            ignore_eos: field(obj, "ignore_eos", "a boolean")?.unwrap_or(false),
            return_token_ids: false,
            return_tokens_as_token_ids: false,
            stream: false,
            include_usage: false,
            logprobs: None,
            prompt_logprobs,
            logit_bias: logit_bias(obj)?,
            allowed_token_ids: field(obj, "allowed_token_ids", "a list of token ids")?,
            bad_words: field(obj, "bad_words", "a list of strings")?.unwrap_or_default(),
            repetition_penalty: field(obj, "repetition_penalty", "a number")?.unwrap_or(1.0),
            presence_penalty: field(obj, "presence_penalty", "a number")?.unwrap_or(0.0),
            frequency_penalty: field(obj, "frequency_penalty", "a number")?.unwrap_or(0.0),
            echo: false,
            truncate_prompt_tokens: truncation(obj)?,
            add_special_tokens: true,
            skip_special_tokens: field(obj, "skip_special_tokens", "a boolean")?.unwrap_or(true),
            include_stop_str_in_output: field(obj, "include_stop_str_in_output", "a boolean")?
                .unwrap_or(false),
            provenance: Vec::new(),
            cache_salt: None,
        })
    }

    /// The fields of `obj` about the request rather than its sampling, which every API
    /// has at its top level: `model`, `request_id`, `stream`, `stream_options`,
    /// `cache_salt`.
    pub(super) fn envelope(&mut self, obj: &Map<String, Value>) -> Result<(), ApiError> {
        self.stream = field(obj, "stream", "a boolean")?.unwrap_or(false);
        self.include_usage = match get(obj, "stream_options") {
            None => false,
            Some(Value::Object(options)) => stream_options(options, self.stream)?,
            Some(v) => {
                return Err(ApiError::bad(
                    "stream_options",
                    format!("stream_options must be an object, not {}", short(v)),
                ));
            }
        };
        self.model = field(obj, "model", "a string")?;
        self.request_id = bounded(obj, "request_id", MAX_REQUEST_ID_BYTES)?;
        self.cache_salt = bounded(obj, "cache_salt", MAX_CACHE_SALT_BYTES)?;
        if self.stream && self.prompt_logprobs.is_some() {
            // vLLM refuses them there too: its chunks have no place for them.
            return Err(ApiError::bad(
                "prompt_logprobs",
                "prompt_logprobs are not available when stream is true",
            ));
        }
        Ok(())
    }
}

/// String field `name` of `obj`, 1 to `max` bytes long.
fn bounded(obj: &Map<String, Value>, name: &str, max: usize) -> Result<Option<String>, ApiError> {
    let value: Option<String> = field(obj, name, "a string")?;
    match &value {
        Some(text) if text.is_empty() || text.len() > max => Err(ApiError::bad(
            name,
            format!("{name} must be 1 to {max} bytes long, not {}", text.len()),
        )),
        _ => Ok(value),
    }
}

/// `prompt_logprobs`: at most [`MAX_TOP_LOGPROBS`] alternatives (and not in a stream:
/// see [`SamplingFields::envelope`]).
fn prompt_logprobs(obj: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    let k: Option<usize> = field(obj, "prompt_logprobs", "a non-negative integer")?;
    k.map(|k| check_top("prompt_logprobs", k)).transpose()
}

/// `stream_options`: `include_usage`; vLLM's `continuous_usage_stats` and OpenAI's
/// `include_obfuscation` only off (sprout sends neither).
fn stream_options(options: &Map<String, Value>, stream: bool) -> Result<bool, ApiError> {
    let bad = |message: String| ApiError::bad("stream_options", message);
    if !stream {
        return Err(bad(
            "stream_options is only allowed when stream is true".into()
        ));
    }
    // Read directly (not with `field`): these are keys of stream_options, not fields.
    let flag = |key: &str| match options.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(on)) => Ok(*on),
        Some(v) => Err(bad(format!(
            "stream_options.{key} must be a boolean, not {}",
            short(v)
        ))),
    };
    for key in ["continuous_usage_stats", "include_obfuscation"] {
        if flag(key)? {
            return Err(bad(format!(
                "stream_options.{key} is not supported (only false)"
            )));
        }
    }
    flag("include_usage")
}

/// `logit_bias`: an object of token ids (as strings) to numbers.
fn logit_bias(obj: &Map<String, Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |message: String| ApiError::bad("logit_bias", message);
    let map = match get(obj, "logit_bias") {
        None => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(v) => {
            return Err(bad(format!(
                "logit_bias must be an object of token ids to numbers, not {}",
                short(v)
            )));
        }
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let token: u32 = key
            .trim()
            .parse()
            .map_err(|_| bad(format!("logit_bias keys must be token ids, not {key:?}")))?;
        let bias = value.as_f64().filter(|b| b.is_finite()).ok_or_else(|| {
            bad(format!(
                "logit_bias[{key:?}] must be a number, not {}",
                short(value)
            ))
        })?;
        out.push((token, bias as f32));
    }
    Ok(out)
}

/// `truncate_prompt_tokens`: -1 (the context's length) or a count of at least 1.
fn truncation(obj: &Map<String, Value>) -> Result<Option<Option<usize>>, ApiError> {
    let k: Option<i128> = field(obj, "truncate_prompt_tokens", "an integer")?;
    match k {
        None => Ok(None),
        Some(-1) => Ok(Some(None)),
        Some(k) if k >= 1 => Ok(Some(Some(usize::try_from(k).unwrap_or(usize::MAX)))),
        Some(k) => Err(ApiError::bad(
            "truncate_prompt_tokens",
            format!("truncate_prompt_tokens must be -1 or at least 1, not {k}"),
        )),
    }
}

/// The strings of `names` that say who sent the request.
fn provenance(
    obj: &Map<String, Value>,
    names: &[&'static str],
) -> Result<Vec<(&'static str, String)>, ApiError> {
    let mut out = Vec::new();
    for &name in names {
        if let Some(value) = field::<String>(obj, name, "a string")? {
            out.push((name, value));
        }
    }
    Ok(out)
}

impl CompletionRequest {
    pub fn parse(body: &[u8]) -> Result<CompletionRequest, ApiError> {
        let obj = object(body)?;
        screen(&obj, Api::Completions)?;
        let prompts = prompts(get(&obj, "prompt"), "prompt")?;
        let mut fields = SamplingFields::parse(&obj)?;
        let logprobs: Option<usize> = field(&obj, "logprobs", "a non-negative integer")?;
        fields.logprobs = logprobs.map(|k| check_top("logprobs", k)).transpose()?;
        fields.echo = field(&obj, "echo", "a boolean")?.unwrap_or(false);
        Ok(CompletionRequest { prompts, fields })
    }
}

impl ChatRequest {
    pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
        let obj = object(body)?;
        screen(&obj, Api::Chat)?;
        let messages = messages(get(&obj, "messages"))?;
        let (render, tool_choice) = chat_fields::render_options(&obj)?;
        let mut fields = SamplingFields::parse(&obj)?;
        let who = provenance(&obj, &["safety_identifier", "prompt_cache_key"])?;
        fields.provenance.extend(who);
        // The newer name wins, as OpenAI's API has it.
        let whole = "a non-negative integer";
        if let Some(max) = field(&obj, "max_completion_tokens", whole)? {
            fields.max_tokens = Some(max);
        }
        let logprobs: bool = field(&obj, "logprobs", "a boolean")?.unwrap_or(false);
        let top: Option<usize> = field(&obj, "top_logprobs", whole)?;
        fields.logprobs = match (logprobs, top) {
            (false, Some(_)) => {
                return Err(ApiError::bad(
                    "top_logprobs",
                    "top_logprobs needs logprobs to be true",
                ));
            }
            (false, None) => None,
            (true, top) => Some(check_top("top_logprobs", top.unwrap_or(0))?),
        };
        let tokens = chat_tokens(&obj)?;
        Ok(ChatRequest {
            messages,
            fields,
            render,
            tool_choice,
            tokens,
        })
    }
}

/// The token fields of a chat body whose `messages` have been read: each message's and
/// `required_prefix_token_ids`.
pub(super) fn chat_tokens(obj: &Map<String, Value>) -> Result<ChatTokens, ApiError> {
    let items = match get(obj, "messages") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    Ok(ChatTokens {
        turns: token_prefix::read_turns(items)?,
        required: token_prefix::read_required(get(obj, token_prefix::REQUIRED_PREFIX))?,
    })
}

/// The prompts of field `name`: a string, a list of strings, a list of token ids, or a
/// list of those lists.
pub(super) fn prompts(value: Option<&Value>, name: &str) -> Result<Vec<Prompt>, ApiError> {
    let wrong = |v: &Value| {
        ApiError::bad(
            name,
            format!(
                "{name} must be a string, a list of strings, a list of token ids or a list of \
                 lists of token ids, not {}",
                short(v)
            ),
        )
    };
    let empty = || ApiError::bad(name, format!("{name} must not be empty"));
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
        None | Some(Value::Null) => Err(ApiError::bad(name, format!("{name} is required"))),
        Some(Value::Array(items)) if items.is_empty() => Err(empty()),
        // A list of numbers is one prompt of token ids.
        Some(Value::Array(items)) if items[0].is_number() => Ok(vec![Prompt::Ids(ids(items)?)]),
        Some(Value::Array(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

/// `messages`: a non-empty list of `{"role": ..., "content": ...}`, the content a string,
/// null, or a list of text parts (`{"type": "text", "text": ...}`, joined), and the
/// tool-calling and reasoning keys `chat_fields` reads.
pub(super) fn messages(value: Option<&Value>) -> Result<Vec<Message>, ApiError> {
    let bad = |message: String| ApiError::bad("messages", message);
    let items = match value {
        None | Some(Value::Null) => return Err(bad("messages is required".into())),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(bad("messages must not be empty".into()));
        }
        Some(Value::Array(items)) => items,
        Some(v) => return Err(bad(format!("messages must be a list, not {}", short(v)))),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(bad(format!(
                "messages[{i}] must be an object, not {}",
                short(item)
            )));
        };
        let role = match m.get("role") {
            Some(Value::String(role)) if !role.is_empty() => role.clone(),
            other => {
                let given = other.map(short).unwrap_or_else(|| "nothing".into());
                return Err(bad(format!(
                    "messages[{i}].role must be a non-empty string, not {given}"
                )));
            }
        };
        let content = match m.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.get("type"), part.get("text")) {
                        (Some(t), Some(Value::String(piece))) if t == "text" => {
                            text.push_str(piece)
                        }
                        _ => {
                            return Err(bad(format!(
                                "messages[{i}].content: only text parts \
                                 ({{\"type\": \"text\", \"text\": ...}}) are supported, not {}",
                                short(part)
                            )));
                        }
                    }
                }
                text
            }
            Some(v) => {
                return Err(bad(format!(
                    "messages[{i}].content must be a string or a list of text parts, not {}",
                    short(v)
                )));
            }
        };
        let mut message = Message {
            role,
            content,
            ..Message::default()
        };
        chat_fields::message_fields(i, m, &mut message)?;
        out.push(message);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any JSON value: scalars of every kind (huge, negative, fractional numbers, odd
    /// strings) nested in lists and objects.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            prop_oneof![Just(String::new()), ".{0,12}".prop_map(String::from)]
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::vec(("[a-z_]{1,8}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// A body with some of the fields either API reads, each set to any value.
    fn hostile_body() -> impl Strategy<Value = Vec<u8>> {
        const FIELDS: &[&str] = &[
            "model",
            "prompt",
            "messages",
            "n",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "seed",
            "stop",
            "stop_token_ids",
            "min_tokens",
            "ignore_eos",
            "logprobs",
            "top_logprobs",
            "prompt_logprobs",
            "return_token_ids",
            "stream",
            "stream_options",
            "logit_bias",
            "allowed_token_ids",
            "bad_words",
            "repetition_penalty",
            "presence_penalty",
            "truncate_prompt_tokens",
            "echo",
            "user",
            "best_of",
            "tools",
            "suffix",
        ];
        prop::collection::vec((prop::sample::select(FIELDS), any_json()), 0..8).prop_map(|fields| {
            let obj: Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            serde_json::to_vec(&Value::Object(obj)).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// No body panics either parser; every refusal is a 400 that says something.
        #[test]
        fn any_body_is_read_or_refused_with_a_400(body in hostile_body()) {
            for result in [
                CompletionRequest::parse(&body).map(|_| ()),
                ChatRequest::parse(&body).map(|_| ()),
            ] {
                if let Err(e) = result {
                    prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
                    prop_assert!(!e.message.is_empty());
                }
            }
        }

        /// Nor do arbitrary bytes.
        #[test]
        fn any_bytes_are_read_or_refused(body in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = CompletionRequest::parse(&body);
            let _ = ChatRequest::parse(&body);
        }
    }

    fn parse(body: &str) -> Result<CompletionRequest, ApiError> {
        CompletionRequest::parse(body.as_bytes())
    }

    fn chat(body: &str) -> Result<ChatRequest, ApiError> {
        ChatRequest::parse(body.as_bytes())
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
            (
                r#"{"prompt": "x", "prompt_logprobs": 21}"#,
                "prompt_logprobs",
            ),
            (
                r#"{"prompt": "x", "prompt_logprobs": -1}"#,
                "prompt_logprobs",
            ),
            (
                r#"{"prompt": "x", "prompt_logprobs": 0, "stream": true}"#,
                "prompt_logprobs",
            ),
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
        let f = &r.fields;
        assert_eq!((f.n, f.max_tokens, f.top_k), (1, None, 0));
        assert_eq!((f.temperature, f.top_p, f.min_p), (1.0, 1.0, 0.0));
        assert_eq!(f.stop, vec!["a".to_string()]);
        assert!(f.logprobs.is_none() && !f.stream && !f.include_usage);
    }

    #[test]
    fn chat_messages_and_log_probs_read() {
        let r = chat(
            r#"{"messages": [{"role": "system", "content": null},
                {"role": "user", "content": [{"type": "text", "text": "a"},
                                             {"type": "text", "text": "b"}]}],
                "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 9}"#,
        )
        .unwrap();
        let m = Message::new;
        assert_eq!(r.messages, vec![m("system", ""), m("user", "ab")]);
        assert_eq!((r.fields.logprobs, r.fields.max_tokens), (Some(3), Some(9)));
        let r = chat(r#"{"messages": [{"role": "user", "content": "x"}], "logprobs": true}"#);
        assert_eq!(r.unwrap().fields.logprobs, Some(0));
    }

    #[test]
    fn a_bad_chat_body_names_the_field() {
        let cases = [
            (r#"{}"#, "messages"),
            (r#"{"messages": []}"#, "messages"),
            (r#"{"messages": "hi"}"#, "messages"),
            (r#"{"messages": [3]}"#, "messages"),
            (r#"{"messages": [{"content": "x"}]}"#, "messages"),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                "messages",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}"#,
                "top_logprobs",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                    "top_logprobs": 21}"#,
                "top_logprobs",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "logprobs": 2}"#,
                "logprobs",
            ),
        ];
        for (body, param) in cases {
            let e = chat(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            assert!(e.message.contains(param), "{body}: {}", e.message);
        }
    }
}
