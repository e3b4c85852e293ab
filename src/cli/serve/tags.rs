//! Text that arrives in pieces: a parser that decides it step by step as it comes
//! ([`Incremental`]), finding a tag in it (searching only past what was searched before),
//! and how much of its end may still begin a tag (to be held back).

/// A parser fed text as it is decoded: the text joins its buffer, and it decides what
/// the buffer allows.
pub trait Incremental {
    /// What it decides.
    type Part;

    /// The text not decided yet.
    fn buffer(&mut self) -> &mut String;

    /// Decides what the buffer allows; whether there may be more to decide.
    fn step(&mut self, out: &mut Vec<Self::Part>) -> bool;

    /// `text`, the next piece: what it decides, in order.
    fn push(&mut self, text: &str, out: &mut Vec<Self::Part>) {
        self.buffer().push_str(text);
        while self.step(out) {}
    }
}

/// The length of the longest end of `text` that begins `tag` without being all of it
/// (text that may still become the tag).
pub fn partial_tag(text: &str, tag: &str) -> usize {
    let most = tag.len().saturating_sub(1).min(text.len());
    (1..=most)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && tag.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

/// The first `tag` in `text` that ends past byte `scanned` (before it, the text was
/// searched already): its start.
pub fn find_from(text: &str, tag: &str, scanned: usize) -> Option<usize> {
    let mut start = scanned.saturating_sub(tag.len()).min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    text[start..].find(tag).map(|i| start + i)
}

/// `text` cut at `cuts` (byte offsets, any: taken modulo its length and moved back to
/// character boundaries), in order.
#[cfg(test)]
pub fn cut<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut cuts: Vec<usize> = cuts
        .iter()
        .map(|&c| {
            let mut c = c % (text.len() + 1);
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    cuts.sort();
    let mut at = 0;
    let mut out = Vec::new();
    for c in cuts.into_iter().chain([text.len()]) {
        out.push(&text[at..c]);
        at = c;
    }
    out
}
