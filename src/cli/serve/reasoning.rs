//! Reasoning in a model's output, as vLLM's `--reasoning-parser` splits it: `qwen3` and
//! `deepseek_r1` both read `<think>...</think>`. The text up to the first `</think>` is
//! reasoning and the rest content; an opening `<think>` at the start (after whitespace)
//! is dropped, and may be missing, as when the chat template opened the block in the
//! prompt (Qwen3-2507, DeepSeek-R1). A reply without `</think>` is reasoning throughout
//! (cut short while thinking). With `qwen3`, a request whose `chat_template_kwargs` turn
//! `enable_thinking` off is not split at all (its template closed the block in the
//! prompt): that choice is the caller's ([`crate::cli::serve::parsing`]).
//!
//! Like the tool-call parsers, a [`ReasoningStream`] takes text as it is decoded and
//! gives out what is decided; a whole reply is the stream fed at once, so both split a
//! text the same way. What it holds back is bounded: the tail that may begin a tag, and
//! at the start at most [`MAX_GAP_BYTES`] of whitespace.

use crate::cli::serve::tags::{Incremental, find_from, partial_tag};
use crate::cli::serve::tool_calls::MAX_GAP_BYTES;

const START: &str = "<think>";
const END: &str = "</think>";

/// `--reasoning-parser`: how the model marks its reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReasoningParser {
    /// Qwen3: `<think>...</think>`, off when `enable_thinking` is false.
    Qwen3,
    /// DeepSeek-R1: everything up to `</think>` is reasoning.
    #[value(name = "deepseek_r1")]
    DeepseekR1,
}

/// A piece of the reply: reasoning, or content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    Reasoning(String),
    Content(String),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// Before anything but whitespace: an opening tag may come.
    #[default]
    Start,
    Reasoning,
    Content,
}

/// The reasoning parser of one reply.
#[derive(Default)]
pub struct ReasoningStream {
    buf: String,
    state: State,
    /// Bytes of `buf` already searched for the closing tag.
    scanned: usize,
}

impl ReasoningStream {
    pub fn finish(&mut self, out: &mut Vec<Split>) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Start | State::Reasoning => reasoning(out, rest),
            State::Content => content(out, rest),
        }
        self.state = State::Content;
    }
}

impl Incremental for ReasoningStream {
    type Part = Split;

    fn buffer(&mut self) -> &mut String {
        &mut self.buf
    }

    fn step(&mut self, out: &mut Vec<Split>) -> bool {
        match self.state {
            State::Start => {
                let rest = self.buf.trim_start();
                let blank = self.buf.len() - rest.len();
                if blank > MAX_GAP_BYTES {
                    self.state = State::Reasoning;
                } else if rest.starts_with(START) {
                    self.buf.drain(..blank + START.len());
                    self.state = State::Reasoning;
                } else if START.starts_with(rest) {
                    return false;
                } else {
                    self.state = State::Reasoning;
                }
                self.scanned = 0;
                true
            }
            State::Reasoning => {
                if let Some(j) = find_from(&self.buf, END, self.scanned) {
                    reasoning(out, self.buf.drain(..j).collect::<String>());
                    self.buf.drain(..END.len());
                    self.state = State::Content;
                    return true;
                }
                let ready = self.buf.len() - partial_tag(&self.buf, END);
                reasoning(out, self.buf.drain(..ready).collect::<String>());
                self.scanned = 0;
                false
            }
            State::Content => {
                content(out, std::mem::take(&mut self.buf));
                false
            }
        }
    }
}

/// The reasoning and the content of a whole reply.
#[cfg(test)]
pub fn split(text: &str) -> Vec<Split> {
    let mut stream = ReasoningStream::default();
    let mut out = Vec::new();
    stream.push(text, &mut out);
    stream.finish(&mut out);
    out
}

fn reasoning(out: &mut Vec<Split>, text: String) {
    if !text.is_empty() {
        out.push(Split::Reasoning(text));
    }
}

fn content(out: &mut Vec<Split>, text: String) {
    if !text.is_empty() {
        out.push(Split::Content(text));
    }
}
