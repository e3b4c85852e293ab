//! Tool calls in a model's output, as vLLM's `--tool-call-parser` finds them: `hermes`
//! (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, the format of
//! Qwen2.5, Qwen3 and Hermes templates) and `llama3_json` (Llama 3.x's JSON object
//! `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`, several
//! separated by `;`).
//!
//! A parser is a stream ([`ToolCallStream`]): text goes in as it is decoded, and out come
//! [`Part`]s, content and whole calls, as soon as they are decided; text that may still
//! become a call is held back. A whole reply is the same stream fed at once
//! ([`extract`]), so a streamed reply and a whole one split a text the same way wherever
//! the deltas fall (every decision depends on the text, never on where a delta ends).
//!
//! Model output is untrusted: a block that is not a valid call (unbalanced tags, invalid
//! JSON, a name that is not a non-empty string, arguments that are not an object, a call
//! past [`MAX_CALL_BYTES`]) is content, verbatim, never an error. Every byte of the text
//! is either content or part of a call's span, except whitespace (and llama3_json's `;`)
//! between and after calls, which separates them (at most [`MAX_GAP_BYTES`] of it: a
//! longer run is content). What is held back is bounded by those two limits.
//!
//! A call's `arguments` is the model's own JSON text of its arguments object, byte for
//! byte (vLLM re-serializes it with Python's `json.dumps`): a later turn that renders the
//! call renders what was sampled.

mod hermes;
mod llama3_json;
/// A new tool call id in vLLM's shape: `chatcmpl-tool-` and 32 random hex digits.
pub fn tool_call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // std's per-process random keys, with a counter so that no two ids repeat.
    let keys = RandomState::new();
    let mut high = keys.build_hasher();
    high.write_u64(n);
    let mut low = keys.build_hasher();
    low.write_u64(!n);
    format!("chatcmpl-tool-{:016x}{:016x}", high.finish(), low.finish())
}

#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::value::RawValue;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cli::serve::tags::Incremental;

/// The longest call sprout parses, in bytes of its JSON: a longer one is content.
pub const MAX_CALL_BYTES: usize = 1 << 20;

/// The longest run of separating whitespace held back between calls: a longer one is
/// content.
pub const MAX_GAP_BYTES: usize = 4096;

/// `--tool-call-parser`: how the model writes its tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolCallParser {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5, Qwen3, Hermes).
    Hermes,
    /// `{"name": ..., "parameters": {...}}` (Llama 3.x), several separated by `;`.
    #[value(name = "llama3_json")]
    Llama3Json,
}

/// A call found in the text: the function's name and its arguments' JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// What a parser makes of the text: content, or a whole call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Content(String),
    Call(ParsedCall),
}

/// One reply's tool-call parser, fed its text as it is decoded.
pub enum ToolCallStream {
    Hermes(hermes::Stream),
    Llama3Json(llama3_json::Stream),
}

impl ToolCallStream {
    pub fn new(parser: ToolCallParser) -> ToolCallStream {
        match parser {
            ToolCallParser::Hermes => ToolCallStream::Hermes(hermes::Stream::default()),
            ToolCallParser::Llama3Json => {
                ToolCallStream::Llama3Json(llama3_json::Stream::default())
            }
        }
    }

    /// `text`, the next piece of the reply: the parts it decides, in order.
    pub fn push(&mut self, text: &str, out: &mut Vec<Part>) {
        match self {
            ToolCallStream::Hermes(s) => s.push(text, out),
            ToolCallStream::Llama3Json(s) => s.push(text, out),
        }
    }

    /// The reply has ended: the parts of what was held back.
    pub fn finish(&mut self, out: &mut Vec<Part>) {
        match self {
            ToolCallStream::Hermes(s) => s.finish(out),
            ToolCallStream::Llama3Json(s) => s.finish(out),
        }
    }
}

/// The parts of a whole reply.
#[cfg(test)]
pub fn extract(parser: ToolCallParser, text: &str) -> Vec<Part> {
    let mut stream = ToolCallStream::new(parser);
    let mut out = Vec::new();
    stream.push(text, &mut out);
    stream.finish(&mut out);
    out
}

/// Adds `text` to `out` as content (nothing when it is empty).
fn content(out: &mut Vec<Part>, text: impl Into<String>) {
    let text = text.into();
    if !text.is_empty() {
        out.push(Part::Content(text));
    }
}

/// A call's JSON, `{"name": "...", KEY: {...}}` with the arguments under one of `keys`
/// (exactly one present), as a call; `None` when it is not one.
fn call_of(json: &str, keys: Keys) -> Option<ParsedCall> {
    #[derive(Deserialize)]
    struct Call<'a> {
        name: String,
        #[serde(borrow, default)]
        arguments: Option<&'a RawValue>,
        #[serde(borrow, default)]
        parameters: Option<&'a RawValue>,
    }
    if json.len() > MAX_CALL_BYTES {
        return None;
    }
    let call: Call = serde_json::from_str(json).ok()?;
    let arguments = match (keys, call.arguments, call.parameters) {
        (Keys::Arguments, Some(a), _) | (Keys::ArgumentsOrParameters, Some(a), None) => a,
        (Keys::ArgumentsOrParameters, None, Some(p)) => p,
        _ => return None,
    };
    let arguments = arguments.get();
    (!call.name.is_empty() && arguments.starts_with('{')).then(|| ParsedCall {
        name: call.name,
        arguments: arguments.to_string(),
    })
}

/// Where a call's arguments may be.
#[derive(Clone, Copy)]
enum Keys {
    /// `arguments` (hermes).
    Arguments,
    /// `arguments` or `parameters`, not both (llama3_json).
    ArgumentsOrParameters,
}
