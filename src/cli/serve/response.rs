//! What clients are sent: the bodies and stream chunks of the three APIs, in the shapes
//! vLLM's clients parse.
//!
//! A sample reaches a client as pieces ([`Piece`]): the whole sample in one (a whole
//! response, or a stream that could not send tokens as they came), or its tokens one by
//! one and then a last piece that says why it ended. [`choice`] shapes a piece for either
//! API, so the two differ only in the shape, never in what they report.
//!
//! Responses are typed structs written with their f32 numbers in shortest form, and every
//! one goes through `json_out` first, so a NaN never reaches a client as `null`.

use serde::Serialize;
use sprout::sched::{FinishReason, FinishedSample, TopLogprob};
use sprout::tokenizer::Tokenizer;

use crate::cli::serve::error::ApiError;
use crate::cli::serve::prompt_logprobs::{Position, PromptScore};
use crate::cli::serve::text_logprobs::{Logprobs, TopMap};
use crate::cli::serve::token_prefix::TurnTokens;
use crate::cli::serve::tool_calls::{ParsedCall, tool_call_id};

/// Which API a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
    /// vLLM's `/inference/v1/generate`: token ids in, token ids out.
    Generate,
}

impl Api {
    /// The `object` of a whole response, or of a stream chunk (generate's bodies have
    /// none: [`TokensBody`]).
    pub fn object(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Api::Completions | Api::Generate, _) => "text_completion",
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
        }
    }

    /// The prefix of a response's `id`.
    pub fn id_prefix(self) -> &'static str {
        match self {
            Api::Completions => "cmpl",
            Api::Chat => "chatcmpl",
            Api::Generate => "gen",
        }
    }
}

/// One choice of a response or stream chunk, of either API.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Choice {
    Text(TextChoice),
    Chat(ChatChoice),
    Tokens(TokensChoice),
}

/// A generate choice: token ids, and their log-probs keyed `token_id:ID`.
#[derive(Serialize)]
pub struct TokensChoice {
    pub index: usize,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<FinishReason>,
    pub token_ids: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sprout: Option<SproutFields>,
}

/// A completions choice.
#[derive(Serialize)]
pub struct TextChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<Logprobs>,
    pub finish_reason: Option<FinishReason>,
    /// vLLM's `prompt_logprobs` of the choice's prompt, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<Position>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// sprout's own fields, on a finished sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sprout: Option<SproutFields>,
}

/// A chat choice: `message` in a whole response, `delta` in a stream chunk.
#[derive(Serialize)]
pub struct ChatChoice {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<ChatMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<ChatDelta>,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<ChatFinishReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sprout: Option<SproutFields>,
}

/// Why a chat choice ended: the sample's reason, or `tool_calls` when it stopped after
/// making calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatFinishReason {
    Stop,
    Length,
    Abort,
    ToolCalls,
}

impl ChatFinishReason {
    /// A sample's finish reason as its chat choice's; `called`: the reply made tool calls
    /// (a sample cut by its length keeps `length`, as in vLLM's streams).
    pub fn of(reason: FinishReason, called: bool) -> ChatFinishReason {
        match reason {
            FinishReason::Stop if called => ChatFinishReason::ToolCalls,
            FinishReason::Stop => ChatFinishReason::Stop,
            FinishReason::Length => ChatFinishReason::Length,
            FinishReason::Abort => ChatFinishReason::Abort,
        }
    }
}

/// A whole chat reply. With a reply parser, `content` is null when nothing is left of it,
/// and the reasoning goes under both vLLM's names (`reasoning`, and `reasoning_content`,
/// which older vLLM releases and many clients read).
#[derive(Serialize)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// With `return_token_ids`: the turn's exact tokens, NeMo Gym's fields beside the
    /// message's own (a client sends them back with its history: `token_prefix`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TurnTokens>,
}

/// What a stream chunk adds to a chat choice: the role in its first chunk, the text, and
/// the reasoning and tool calls the parsers decided in it.
#[derive(Serialize)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<DeltaToolCall>>,
}

/// A tool call of a whole reply, in OpenAI's shape.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

/// A called function: its name and its arguments' JSON text.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// A parsed call under a new id.
    pub fn new(call: ParsedCall) -> ToolCall {
        ToolCall {
            id: tool_call_id(),
            kind: "function",
            function: FunctionCall {
                name: call.name,
                arguments: call.arguments,
            },
        }
    }
}

/// A tool call in a stream chunk: sent once, whole, with its index among the reply's.
#[derive(Serialize)]
pub struct DeltaToolCall {
    pub index: usize,
    #[serde(flatten)]
    pub call: ToolCall,
}

/// What the reply parsers made of a chat piece (its content is the piece's `text`).
pub struct ChatParts {
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    /// The index of the first of `tool_calls` among the reply's.
    pub first_call: usize,
    /// The reply has made tool calls, in this piece or before.
    pub called: bool,
}

/// OpenAI's chat log-probs: per token its text, log-prob, UTF-8 bytes and alternatives.
#[derive(Serialize, Default)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatAlternative>,
}

#[derive(Serialize)]
pub struct ChatAlternative {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// What sprout returns besides OpenAI's fields.
#[derive(Serialize)]
pub struct SproutFields {
    /// Each token's log-prob under the distribution it was drawn from.
    pub sampling_logprobs: Vec<f32>,
    /// Each token's log-prob under the model (temperature 1), as a plain list.
    pub logprobs: Vec<f32>,
    /// The weights version of the sample's last token.
    pub weights_version: u64,
    /// Each token's weights version, when an update came while the sample ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_versions: Option<Vec<u64>>,
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
pub struct Body<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    /// Chat with `return_token_ids`: the prompt (in the whole response, or the first chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// Chat with `prompt_logprobs`: vLLM's `prompt_logprobs` of the prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<Position>>>,
    pub choices: Vec<Choice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// A generate response (`whole`) or stream chunk, in vLLM's `GenerateResponse` and
/// `GenerateStreamResponse` shapes.
#[derive(Serialize)]
pub struct TokensBody<'a> {
    pub request_id: &'a str,
    pub choices: Vec<Choice>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub whole: Option<TokensWhole>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// What a whole generate response has besides its choices: vLLM's prompt log-probs (null
/// unless asked for) and KV transfer parameters, which sprout does not produce (null).
#[derive(Serialize, Default)]
pub struct TokensWhole {
    pub prompt_logprobs: Option<Vec<Option<Position>>>,
    pub kv_transfer_params: Option<()>,
}

/// Part of one sample, to be sent as one choice.
pub struct Piece<'a> {
    /// The choice's index: `prompt * n + sample`.
    pub index: usize,
    pub text: String,
    pub tokens: &'a [u32],
    /// Log-probs and alternatives of `tokens` (empty when not asked for).
    pub logprobs: &'a [f32],
    pub top: &'a [Vec<TopLogprob>],
    /// Characters of the sample's text before this piece.
    pub text_offset: usize,
    /// The sample's first piece (it carries the prompt and the chat role).
    pub first: bool,
    /// The last piece: the finished sample.
    pub finished: Option<&'a FinishedSample>,
    /// Chat with a reply parser: what it made of the piece.
    pub parsed: Option<ChatParts>,
}

/// What the request asked each choice to carry.
pub struct Asked<'a> {
    pub api: Api,
    pub stream: bool,
    pub logprobs: bool,
    pub return_token_ids: bool,
    /// Log-probs name tokens `token_id:ID` (vLLM's `return_tokens_as_token_ids`).
    pub tokens_as_ids: bool,
    pub prompt: &'a [u32],
    /// The prompt's scores, when `prompt_logprobs` or `echo` with `logprobs` asked for them.
    pub score: Option<PromptScore<'a>>,
    /// vLLM's `prompt_logprobs`: alternatives per prompt position.
    pub prompt_logprobs: Option<usize>,
    /// Completions' `echo` with `logprobs` (k alternatives): the prompt's log-probs go
    /// before the completion's, in the sample's first piece.
    pub echo_logprobs: Option<usize>,
    /// The version in force when the answer is shaped (for a sample with no tokens).
    pub weights_version: u64,
}

/// How log-probs name a token: its text, or `token_id:ID` with `tokens_as_ids` (vLLM's
/// `return_tokens_as_token_ids`).
pub fn namer(tokenizer: &Tokenizer, tokens_as_ids: bool) -> impl Fn(u32) -> String + '_ {
    move |id: u32| match tokens_as_ids {
        true => format!("token_id:{id}"),
        false => token_text(tokenizer, id),
    }
}

/// `piece` as a choice of `asked.api`.
pub fn choice(tokenizer: &Tokenizer, asked: &Asked, piece: Piece) -> Choice {
    let name = namer(tokenizer, asked.tokens_as_ids);
    let finish_reason = piece.finished.map(|s| s.finish_reason);
    let sprout = piece
        .finished
        .map(|s| sprout_fields(s, asked.weights_version));
    let token_ids = asked.return_token_ids.then(|| piece.tokens.to_vec());
    match asked.api {
        Api::Generate => Choice::Tokens(TokensChoice {
            index: piece.index,
            logprobs: asked
                .logprobs
                .then(|| chat_logprobs(&name, piece.tokens, piece.logprobs, piece.top)),
            finish_reason,
            token_ids: piece.tokens.to_vec(),
            sprout,
        }),
        Api::Completions => Choice::Text(TextChoice {
            index: piece.index,
            logprobs: asked.logprobs.then(|| {
                let echoed = match (asked.echo_logprobs, asked.score) {
                    (Some(k), Some(score)) if piece.first => score.completions(&name, k),
                    _ => Logprobs::default(),
                };
                let offset = match echoed.tokens.last() {
                    Some(last) => {
                        echoed.text_offset.last().copied().unwrap_or(0) + last.chars().count()
                    }
                    None => piece.text_offset,
                };
                let mut out = echoed;
                let own = text_logprobs(&name, piece.tokens, piece.logprobs, piece.top, offset);
                out.tokens.extend(own.tokens);
                out.token_logprobs.extend(own.token_logprobs);
                out.top_logprobs.extend(own.top_logprobs);
                out.text_offset.extend(own.text_offset);
                out
            }),
            text: piece.text,
            finish_reason,
            prompt_logprobs: match (asked.prompt_logprobs, asked.score) {
                (Some(k), Some(score)) if piece.first => Some(score.vllm(&name, k)),
                _ => None,
            },
            prompt_token_ids: (asked.return_token_ids && piece.first)
                .then(|| asked.prompt.to_vec()),
            token_ids,
            sprout,
        }),
        Api::Chat => {
            let called = piece.parsed.as_ref().is_some_and(|p| p.called);
            let tokens = (asked.return_token_ids && !asked.stream).then(|| TurnTokens {
                prompt_token_ids: asked.prompt.to_vec(),
                generation_token_ids: piece.tokens.to_vec(),
                generation_log_probs: Some(piece.logprobs.to_vec()),
            });
            let (message, delta) =
                chat_body(asked.stream, piece.first, piece.text, piece.parsed, tokens);
            Choice::Chat(ChatChoice {
                index: piece.index,
                message,
                delta,
                logprobs: asked
                    .logprobs
                    .then(|| chat_logprobs(&name, piece.tokens, piece.logprobs, piece.top)),
                finish_reason: finish_reason.map(|r| ChatFinishReason::of(r, called)),
                token_ids,
                sprout,
            })
        }
    }
}

/// A chat piece as a whole message or a stream delta.
fn chat_body(
    stream: bool,
    first: bool,
    text: String,
    parsed: Option<ChatParts>,
    tokens: Option<TurnTokens>,
) -> (Option<ChatMessage>, Option<ChatDelta>) {
    let was_parsed = parsed.is_some();
    let (reasoning, calls, first_call) = match parsed {
        Some(p) => (non_empty(&p.reasoning), p.tool_calls, p.first_call),
        None => (None, Vec::new(), 0),
    };
    if !stream {
        // A parsed reply's empty content is null, as vLLM's.
        let content = (!was_parsed || !text.is_empty()).then_some(text);
        let message = ChatMessage {
            role: "assistant",
            content,
            reasoning_content: reasoning.clone(),
            reasoning,
            tool_calls: calls,
            tokens,
        };
        return (Some(message), None);
    }
    let tool_calls = (!calls.is_empty()).then(|| {
        (first_call..)
            .zip(calls)
            .map(|(index, call)| DeltaToolCall { index, call })
            .collect()
    });
    let delta = ChatDelta {
        role: first.then_some("assistant"),
        content: text,
        reasoning_content: reasoning.clone(),
        reasoning,
        tool_calls,
    };
    (None, Some(delta))
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

/// The text of one token by itself, as the log-probs show it.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer.decode_with(&[id], false).unwrap_or_default()
}

/// The completions log-probs of `tokens`, their text starting `offset` characters into
/// the completion.
fn text_logprobs(
    name: &dyn Fn(u32) -> String,
    tokens: &[u32],
    logprobs: &[f32],
    top: &[Vec<TopLogprob>],
    mut offset: usize,
) -> Logprobs {
    let mut out = Logprobs::default();
    for (i, (&id, &lp)) in tokens.iter().zip(logprobs).enumerate() {
        let text = name(id);
        out.text_offset.push(offset);
        offset += text.chars().count();
        let top = top.get(i).map(Vec::as_slice).unwrap_or_default();
        let alternatives = TopMap::named(name, top.iter().map(|t| (t.token, t.logprob)));
        out.tokens.push(text);
        out.token_logprobs.push(Some(lp));
        out.top_logprobs.push(Some(alternatives));
    }
    out
}

/// The chat log-probs of `tokens`.
fn chat_logprobs(
    name: &dyn Fn(u32) -> String,
    tokens: &[u32],
    logprobs: &[f32],
    top: &[Vec<TopLogprob>],
) -> ChatLogprobs {
    let content = tokens
        .iter()
        .zip(logprobs)
        .enumerate()
        .map(|(i, (&id, &logprob))| {
            let token = name(id);
            let top_logprobs = top
                .get(i)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    let token = name(t.token);
                    ChatAlternative {
                        bytes: token.as_bytes().to_vec(),
                        token,
                        logprob: t.logprob,
                    }
                })
                .collect();
            ChatTokenLogprob {
                bytes: token.as_bytes().to_vec(),
                token,
                logprob,
                top_logprobs,
            }
        })
        .collect();
    ChatLogprobs { content }
}

/// How a sample's text is written (vLLM's `skip_special_tokens` and
/// `include_stop_str_in_output`).
#[derive(Clone, Copy, Debug)]
pub struct TextOptions {
    pub skip_special_tokens: bool,
    pub include_stop_str: bool,
}

/// The text of a finished sample: cut before its stop string when one ended it (after it,
/// with `include_stop_str`).
pub fn sample_text(
    tokenizer: &Tokenizer,
    sample: &FinishedSample,
    options: TextOptions,
) -> Result<String, ApiError> {
    match &sample.stopped_by {
        Some(m) if options.include_stop_str => Ok(format!("{}{}", m.text, m.stop)),
        Some(m) => Ok(m.text.clone()),
        None => tokenizer
            .decode_with(&sample.token_ids, options.skip_special_tokens)
            .map_err(|e| {
                ApiError::status(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }),
    }
}

/// sprout's fields of a finished sample.
fn sprout_fields(sample: &FinishedSample, in_force: u64) -> SproutFields {
    let versions = &sample.weights_versions;
    let weights_version = versions.last().copied().unwrap_or(in_force);
    let spans = versions.iter().any(|&v| v != weights_version);
    SproutFields {
        weights_versions: spans.then(|| versions.clone()),
        sampling_logprobs: sample.sampling_logprobs.clone(),
        logprobs: sample.logprobs.clone(),
        weights_version,
        stop_string: sample.stopped_by.as_ref().map(|m| m.stop.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternatives_serialize_as_an_ordered_object() {
        let m = TopMap(vec![("b".into(), -0.5), ("a".into(), -1.25)]);
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"b":-0.5,"a":-1.25}"#
        );
    }
}
