//! The `llama3_json` format: the reply is a JSON object `{"name": ..., "parameters":
//! {...}}` (or `"arguments"`), optionally after `<|python_tag|>` and whitespace, and
//! further calls follow it after `;`. The calls are read from the start of the reply, one
//! after another: the first thing that is not a valid call ends them, and from there (or
//! from the start, when the reply does not begin with a call) the text is content.
//! Whitespace and one `;` after a call separate it from the next; after the last they are
//! dropped.

use crate::cli::serve::tags::Incremental;

use super::{Keys, MAX_CALL_BYTES, MAX_GAP_BYTES, Part, call_of, content};

const PYTHON_TAG: &str = "<|python_tag|>";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// Before anything but whitespace and the python tag.
    #[default]
    Start,
    /// In a JSON object that may be a call: the buffer holds it from its `{`.
    Object,
    /// After a call: whitespace, one `;`, whitespace, then `{` begins the next.
    Between,
    /// Content to the end.
    Plain,
}

/// How far a JSON value's end has been looked for.
#[derive(Default)]
struct ValueEnd {
    /// Bytes scanned.
    pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl ValueEnd {
    /// Scans `text` (which begins with `{` or `[`) past the bytes seen before: the end of
    /// its first balanced value, once it is there. Quotes, backslashes and brackets are
    /// ASCII, so bytes of other characters never match them.
    fn scan(&mut self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        while let Some(&b) = bytes.get(self.pos) {
            self.pos += 1;
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(self.pos);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// What the start of a reply (or a gap after a call) is.
enum Lead {
    /// Not known yet: all of it may still lead to a call.
    Open,
    /// A call may begin at this byte.
    Object(usize),
    /// Not a call.
    Plain,
}

/// The start of a reply: whitespace, the python tag and whitespace before a `{`.
fn lead(text: &str) -> Lead {
    let rest = text.trim_start();
    if rest.is_empty() {
        return Lead::Open;
    }
    if rest.starts_with('{') {
        return Lead::Object(text.len() - rest.len());
    }
    match rest.strip_prefix(PYTHON_TAG) {
        Some(after) => {
            let after = after.trim_start();
            match after.chars().next() {
                None => Lead::Open,
                Some('{') => Lead::Object(text.len() - after.len()),
                Some(_) => Lead::Plain,
            }
        }
        None if PYTHON_TAG.starts_with(rest) => Lead::Open,
        None => Lead::Plain,
    }
}

/// The gap after a call: whitespace, at most one `;`, whitespace, before a `{`.
fn separator(text: &str) -> Lead {
    let rest = text.trim_start();
    let rest = match rest.strip_prefix(';') {
        Some(after) => after.trim_start(),
        None if rest.is_empty() => return Lead::Open,
        None => return Lead::Plain,
    };
    match rest.chars().next() {
        None => Lead::Open,
        Some('{') => Lead::Object(text.len() - rest.len()),
        Some(_) => Lead::Plain,
    }
}

/// The llama3_json parser of one reply.
#[derive(Default)]
pub struct Stream {
    /// Text not decided yet.
    buf: String,
    /// What came before the object in `buf`: the reply's lead, or the gap after a call
    /// (content if the object is not a call after all).
    held: String,
    state: State,
    end: ValueEnd,
}

impl Stream {
    pub fn finish(&mut self, out: &mut Vec<Part>) {
        let rest = std::mem::take(&mut self.buf);
        let held = std::mem::take(&mut self.held);
        match self.state {
            // A separator after the last call is dropped.
            State::Between => {}
            State::Start | State::Object | State::Plain => content(out, held + &rest),
        }
        self.state = State::Plain;
    }

    /// From here to the end, the text is content.
    fn plain(&mut self, out: &mut Vec<Part>) {
        let held = std::mem::take(&mut self.held);
        content(out, held + &std::mem::take(&mut self.buf));
        self.state = State::Plain;
    }
}

impl Incremental for Stream {
    type Part = Part;

    fn buffer(&mut self) -> &mut String {
        &mut self.buf
    }

    fn step(&mut self, out: &mut Vec<Part>) -> bool {
        let gap = match self.state {
            State::Start => lead(&self.buf),
            State::Between => separator(&self.buf),
            State::Object => {
                match self.end.scan(&self.buf) {
                    Some(end) => match call_of(&self.buf[..end], Keys::ArgumentsOrParameters) {
                        Some(call) => {
                            self.held.clear();
                            self.buf.drain(..end);
                            out.push(Part::Call(call));
                            self.state = State::Between;
                        }
                        None => self.plain(out),
                    },
                    None if self.buf.len() > MAX_CALL_BYTES => self.plain(out),
                    None => return false,
                }
                return true;
            }
            State::Plain => {
                content(out, std::mem::take(&mut self.buf));
                return false;
            }
        };
        match gap {
            Lead::Open if self.buf.len() > MAX_GAP_BYTES => self.plain(out),
            Lead::Open => return false,
            Lead::Object(k) if k > MAX_GAP_BYTES => self.plain(out),
            Lead::Object(k) => {
                self.held = self.buf.drain(..k).collect();
                self.end = ValueEnd::default();
                self.state = State::Object;
            }
            Lead::Plain => self.plain(out),
        }
        true
    }
}
