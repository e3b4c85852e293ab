//! How a chat reply's text becomes its message: the server's parsers (`--reasoning-parser`,
//! `--tool-call-parser` with `--enable-auto-tool-choice`) chosen for a request
//! ([`Parsing`]), the reasoning split off first and tool calls read from the content
//! after it ([`ReplyStream`], whole or as the tokens come), and the refusal vLLM gives a
//! request with tools that the server cannot parse calls for ([`check_tool_choice`]).
//!
//! Parsing shapes text only: a choice's token ids and log-probs are the sample's, whatever
//! its text became.

use serde_json::{Map, Value};

use crate::cli::serve::error::ApiError;
use crate::cli::serve::reasoning::{ReasoningParser, ReasoningStream, Split};
use crate::cli::serve::response::{ChatParts, ToolCall};
use crate::cli::serve::tags::Incremental;
use crate::cli::serve::tool_calls::{ParsedCall, Part, ToolCallParser, ToolCallStream};

/// vLLM's refusal of tools with `tool_choice` "auto" on a server that does not parse calls.
pub const AUTO_TOOL_CHOICE_REFUSED: &str =
    "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set";

/// Which parsers a chat request's replies go through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsing {
    pub reasoning: Option<ReasoningParser>,
    pub tool_calls: Option<ToolCallParser>,
}

impl Parsing {
    /// Whether the replies are parsed at all (else their text is the content, as it was).
    pub fn is_active(self) -> bool {
        self.reasoning.is_some() || self.tool_calls.is_some()
    }
}

/// The parsers a server was started with.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerParsers {
    /// `--enable-auto-tool-choice`: requests with tools and `tool_choice` "auto" have
    /// their replies' tool calls parsed (with `tool_call_parser`, which it requires).
    pub enable_auto_tool_choice: bool,
    /// `--tool-call-parser`.
    pub tool_call_parser: Option<ToolCallParser>,
    /// `--reasoning-parser`.
    pub reasoning_parser: Option<ReasoningParser>,
}

impl ServerParsers {
    /// See [`check_tool_choice`].
    pub fn check_tool_choice(
        self,
        has_tools: bool,
        tool_choice_auto: bool,
    ) -> Result<(), ApiError> {
        let parses = self.enable_auto_tool_choice && self.tool_call_parser.is_some();
        match has_tools && tool_choice_auto && !parses {
            true => Err(ApiError::bad("tool_choice", AUTO_TOOL_CHOICE_REFUSED)),
            false => Ok(()),
        }
    }

    /// See [`reply_parsing`].
    pub fn reply_parsing(self, has_tools: bool, tool_choice_auto: bool, thinking: bool) -> Parsing {
        let tools = has_tools && tool_choice_auto && self.enable_auto_tool_choice;
        Parsing {
            reasoning: self
                .reasoning_parser
                .filter(|p| thinking || *p != ReasoningParser::Qwen3),
            tool_calls: self.tool_call_parser.filter(|_| tools),
        }
    }
}

/// Whether `chat_template_kwargs` leave thinking on: `enable_thinking` absent, or a value
/// Python's `bool` holds true (as vLLM's qwen3 parser reads it).
pub fn thinking_enabled(kwargs: &Map<String, Value>) -> bool {
    match kwargs.get("enable_thinking") {
        None => true,
        Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// What a piece of a reply became.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shaped {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ParsedCall>,
}

impl Shaped {
    /// `more`, decided after `self`, added to it.
    pub fn extend(&mut self, more: Shaped) {
        self.reasoning.push_str(&more.reasoning);
        self.content.push_str(&more.content);
        self.calls.extend(more.calls);
    }
}

/// One reply's parsers, fed its text as it is decoded.
pub struct ReplyStream {
    reasoning: Option<ReasoningStream>,
    tools: Option<ToolCallStream>,
    /// Tool calls given out so far.
    calls: usize,
}

impl ReplyStream {
    pub fn new(parsing: Parsing) -> ReplyStream {
        ReplyStream {
            reasoning: parsing.reasoning.map(|_| ReasoningStream::default()),
            tools: parsing.tool_calls.map(ToolCallStream::new),
            calls: 0,
        }
    }

    /// `text`, the next piece of the reply (`end`: its last), as a chat piece: its content,
    /// and its reasoning and tool calls (each under a new id, indexed among the reply's).
    pub fn piece(&mut self, text: &str, end: bool) -> (String, ChatParts) {
        let mut shaped = self.push(text);
        if end {
            shaped.extend(self.finish());
        }
        let first_call = self.calls;
        self.calls += shaped.calls.len();
        let parts = ChatParts {
            reasoning: shaped.reasoning,
            tool_calls: shaped.calls.into_iter().map(ToolCall::new).collect(),
            first_call,
            called: self.calls > 0,
        };
        (shaped.content, parts)
    }

    /// `text`, the next piece of the reply: what it decides.
    pub fn push(&mut self, text: &str) -> Shaped {
        let mut out = Shaped::default();
        match &mut self.reasoning {
            Some(r) => {
                let mut splits = Vec::new();
                r.push(text, &mut splits);
                self.route(splits, &mut out);
            }
            None => self.content(text, &mut out),
        }
        out
    }

    /// The reply has ended: what was held back.
    pub fn finish(&mut self) -> Shaped {
        let mut out = Shaped::default();
        if let Some(r) = &mut self.reasoning {
            let mut splits = Vec::new();
            r.finish(&mut splits);
            self.route(splits, &mut out);
        }
        if let Some(t) = &mut self.tools {
            let mut parts = Vec::new();
            t.finish(&mut parts);
            gather(parts, &mut out);
        }
        out
    }

    fn route(&mut self, splits: Vec<Split>, out: &mut Shaped) {
        for split in splits {
            match split {
                Split::Reasoning(text) => out.reasoning.push_str(&text),
                Split::Content(text) => self.content(&text, out),
            }
        }
    }

    /// Content after the reasoning: through the tool-call parser when there is one.
    fn content(&mut self, text: &str, out: &mut Shaped) {
        match &mut self.tools {
            Some(t) => {
                let mut parts = Vec::new();
                t.push(text, &mut parts);
                gather(parts, out);
            }
            None => out.content.push_str(text),
        }
    }
}

fn gather(parts: Vec<Part>, out: &mut Shaped) {
    for part in parts {
        match part {
            Part::Content(text) => out.content.push_str(&text),
            Part::Call(call) => out.calls.push(call),
        }
    }
}

/// A whole reply, shaped (as a reply's parsers shape it when it has ended).
#[cfg(test)]
pub fn shape(parsing: Parsing, text: &str) -> Shaped {
    let mut stream = ReplyStream::new(parsing);
    let mut out = stream.push(text);
    out.extend(stream.finish());
    out
}

#[cfg(test)]
#[path = "parsing_tests.rs"]
mod tests;
