//! The `hermes` format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any
//! number of blocks. The text before the first call is content; after a call, a gap of
//! whitespace next to a call is a separator (dropped), any other gap is content: between
//! two blocks that are content, whitespace stays, so nothing of the text is lost. A block
//! left open when the reply ends is a call if its JSON is one (a stop string may have cut
//! the closing tag). A block that is not a call is content, tags and all.

use crate::cli::serve::tags::{Incremental, find_from, partial_tag};

use super::{Keys, MAX_CALL_BYTES, MAX_GAP_BYTES, Part, call_of, content};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Where the parser is in the text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// Between blocks (after a call: in a gap that may still be a separator).
    #[default]
    Outside,
    /// After a call, in a gap known to be content (it is not whitespace, or too long to
    /// be a separator).
    OutsideContent,
    /// Inside a block: the buffer holds the text after its opening tag.
    Inside,
    /// Inside a block too long to be a call: content up to its closing tag.
    Spoiled,
}

/// The hermes parser of one reply.
#[derive(Default)]
pub struct Stream {
    /// Text not decided yet.
    buf: String,
    state: State,
    /// Bytes of `buf` already searched for the tag the state waits for.
    scanned: usize,
    /// A call has been found.
    called: bool,
    /// A whitespace gap after a block that was content, held until the next block is
    /// decided: content if that block is content too, a separator if it is a call.
    held: String,
    /// The last block was content (its following whitespace gap is held, not dropped).
    after_content: bool,
}

impl Stream {
    pub fn finish(&mut self, out: &mut Vec<Part>) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Outside | State::OutsideContent => {
                // After a block that was content, no call follows: the gap is content.
                if self.is_content(&rest) || self.after_content {
                    content(out, rest);
                }
            }
            State::Inside => match call_of(&rest, Keys::Arguments) {
                Some(call) => out.push(Part::Call(call)),
                None => self.content_block(out, &rest),
            },
            State::Spoiled => content(out, rest),
        }
        self.held.clear();
        self.enter(State::Outside);
    }

    /// A block (its text after the opening tag) that is content, after the gap held
    /// before it.
    fn content_block(&mut self, out: &mut Vec<Part>, block: &str) {
        let gap = std::mem::take(&mut self.held);
        content(out, format!("{gap}{OPEN}{block}"));
        self.after_content = true;
    }

    /// Whether `gap`, the whole text between two blocks (or after the last), is content.
    fn is_content(&self, gap: &str) -> bool {
        !self.called
            || self.state == State::OutsideContent
            || gap.len() > MAX_GAP_BYTES
            || !gap.trim().is_empty()
    }

    fn enter(&mut self, state: State) {
        self.state = state;
        self.scanned = 0;
    }
}

impl Incremental for Stream {
    type Part = Part;

    fn buffer(&mut self) -> &mut String {
        &mut self.buf
    }

    fn step(&mut self, out: &mut Vec<Part>) -> bool {
        match self.state {
            State::Outside | State::OutsideContent => {
                if let Some(i) = find_from(&self.buf, OPEN, self.scanned) {
                    let gap: String = self.buf.drain(..i).collect();
                    self.buf.drain(..OPEN.len());
                    if self.is_content(&gap) {
                        content(out, gap);
                    } else if self.after_content {
                        self.held = gap;
                    }
                    self.enter(State::Inside);
                    return true;
                }
                // Everything but an end that may begin a tag is decided.
                let ready = self.buf.len() - partial_tag(&self.buf, OPEN);
                if self.called && self.state == State::Outside {
                    // Whitespace after a call waits: it is a separator if a block follows.
                    let from = self.scanned.min(ready);
                    let blank = self
                        .buf
                        .get(from..ready)
                        .is_some_and(|t| t.trim().is_empty());
                    if blank && ready <= MAX_GAP_BYTES {
                        self.scanned = ready;
                        return false;
                    }
                    self.state = State::OutsideContent;
                }
                content(out, self.buf.drain(..ready).collect::<String>());
                self.scanned = 0;
                false
            }
            State::Inside => {
                if let Some(j) = find_from(&self.buf, CLOSE, self.scanned) {
                    let block: String = self.buf.drain(..j + CLOSE.len()).collect();
                    match call_of(&block[..j], Keys::Arguments) {
                        Some(call) => {
                            out.push(Part::Call(call));
                            self.called = true;
                            self.held.clear();
                            self.after_content = false;
                        }
                        None => self.content_block(out, &block),
                    }
                    self.enter(State::Outside);
                    return true;
                }
                let ready = self.buf.len() - partial_tag(&self.buf, CLOSE);
                if ready > MAX_CALL_BYTES {
                    // Whatever ends it, this block is too long to be a call.
                    let start: String = self.buf.drain(..ready).collect();
                    self.content_block(out, &start);
                    self.enter(State::Spoiled);
                    return true;
                }
                self.scanned = ready;
                false
            }
            State::Spoiled => {
                if let Some(j) = find_from(&self.buf, CLOSE, self.scanned) {
                    content(out, self.buf.drain(..j + CLOSE.len()).collect::<String>());
                    self.enter(State::Outside);
                    return true;
                }
                let ready = self.buf.len() - partial_tag(&self.buf, CLOSE);
                content(out, self.buf.drain(..ready).collect::<String>());
                self.scanned = 0;
                false
            }
        }
    }
}
