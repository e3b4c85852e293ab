//! OpenAI's completions log-probs, the one shape both a completion's tokens and an echoed
//! prompt's (`prompt_logprobs`) are written in.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// OpenAI's completions log-probs: per token its text, log-prob, the most likely
/// alternatives (text to log-prob) and where its text starts in the completion; `null`
/// log-prob and alternatives for an echoed prompt's first token.
#[derive(Serialize, Default)]
pub struct Logprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<TopMap>>,
    pub text_offset: Vec<usize>,
}

/// A position's alternatives as a JSON object, most likely first (a text that two tokens
/// share keeps the likelier one).
pub struct TopMap(pub Vec<(String, f32)>);

impl TopMap {
    /// The alternatives `(token, log-prob)`, most likely first, named by `name`.
    pub fn named(
        name: &dyn Fn(u32) -> String,
        alternatives: impl Iterator<Item = (u32, f32)>,
    ) -> TopMap {
        let mut out: Vec<(String, f32)> = Vec::new();
        for (token, logprob) in alternatives {
            let text = name(token);
            if !out.iter().any(|(seen, _)| *seen == text) {
                out.push((text, logprob));
            }
        }
        TopMap(out)
    }
}

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (text, logprob) in &self.0 {
            map.serialize_entry(text, logprob)?;
        }
        map.end()
    }
}
