//! A suffix index over token streams: where the last few tokens of a sequence occurred
//! before, and what followed them there. The drafts of speculative decoding come from it.
//!
//! Each stream is a list of tokens that only grows (a prompt, a sample as it is drawn, an
//! earlier rollout's completion). For every position and every key length `n` in
//! `1..=MAX_KEY`, the index maps the `n` tokens ending there to that place. A draft for a
//! stream takes its longest suffix (at most `MAX_KEY` tokens) that occurred elsewhere
//! with something after it, then walks forward through those occurrences, at each step
//! taking the continuation most of them agree on (a frequency-weighted walk down the
//! suffix tree, as suffix decoding does) while the product of the agreeing fractions
//! stays above [`MIN_DRAFT_PROB`]; it is at most [`DRAFT_PER_MATCHED`] times the matched
//! length, so a long match drafts further than a one-token coincidence. Each fraction is
//! `agreeing / (places + 1/m)`, with `m` the tokens of context the places share with the
//! stream so far (the matched suffix, then the drafted tokens): some weight is held back
//! for a continuation not seen yet, less the longer the shared context. So a continuation
//! seen once after a one-token match is trusted for about three tokens (1/2, 2/3, 3/4),
//! after an eight-token match for the whole draft, and one seen in many places for longer.
//!
//! Invariants: a stream's entries are added as its tokens are pushed, never removed; keys
//! are hashes, and every occurrence a draft uses is checked token by token, so a hash
//! collision can only cost a lookup, never give a wrong match. Drafts only ever change
//! speed: the verifier accepts a drafted token only when it is the token the model draws.

use std::collections::HashMap;

/// The longest suffix looked up (tokens).
pub const MAX_KEY: usize = 8;
/// A draft goes on while the fraction of occurrences agreeing with it, multiplied over its
/// tokens, is at least this.
pub const MIN_DRAFT_PROB: f32 = 0.2;
/// A draft is at most this many tokens per token of matched suffix.
pub const DRAFT_PER_MATCHED: usize = 3;

/// A stream's name in its index.
pub type StreamId = usize;

#[derive(Clone, Debug, Default)]
pub struct SuffixIndex {
    streams: Vec<Vec<u32>>,
    /// Tokens at the start of each stream that are context only (a prompt's tail before a
    /// completion): keys may cover them, but nothing is drafted from them.
    context_len: Vec<usize>,
    /// (key length, hash of the key's tokens) -> (stream, end of the key) for every key.
    places: HashMap<(u8, u64), Vec<(u32, u32)>>,
    tokens: usize,
}

/// Drafted tokens, with how long the suffix they continue is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub matched: usize,
}

impl SuffixIndex {
    /// A new stream whose first `context.len()` tokens are context only (e.g. the last
    /// tokens of the prompt a completion follows), so that its first tokens' keys can span
    /// them.
    pub fn add_stream(&mut self, context: &[u32]) -> StreamId {
        let context = &context[context.len().saturating_sub(MAX_KEY - 1)..];
        self.streams.push(context.to_vec());
        self.context_len.push(context.len());
        self.streams.len() - 1
    }

    /// A new stream of `tokens`, every one of which may be drafted from (a prompt, or a
    /// completion given with its prompt's tail as `context`).
    pub fn add_tokens(&mut self, context: &[u32], tokens: &[u32]) -> StreamId {
        let id = self.add_stream(context);
        self.push_all(id, tokens);
        id
    }

    pub fn push_all(&mut self, id: StreamId, tokens: &[u32]) {
        for &t in tokens {
            self.push(id, t);
        }
    }

    /// Appends `token` to stream `id` and indexes the keys that end with it.
    pub fn push(&mut self, id: StreamId, token: u32) {
        let stream = &mut self.streams[id];
        stream.push(token);
        let end = stream.len();
        for n in 1..=MAX_KEY.min(end) {
            let key = (n as u8, hash(&stream[end - n..]));
            self.places
                .entry(key)
                .or_default()
                .push((id as u32, end as u32));
        }
        self.tokens += 1;
    }

    /// Tokens indexed, over all streams.
    pub fn num_tokens(&self) -> usize {
        self.tokens
    }

    pub fn stream(&self, id: StreamId) -> &[u32] {
        &self.streams[id]
    }

    /// A draft of at most `max_len` tokens to follow stream `id`; empty when its last
    /// tokens occur nowhere else with something after them.
    pub fn draft(&self, id: StreamId, max_len: usize) -> Draft {
        let own = &self.streams[id];
        let end = own.len();
        for n in (1..=MAX_KEY.min(end)).rev() {
            let suffix = &own[end - n..];
            let Some(places) = self.places.get(&(n as u8, hash(suffix))) else {
                continue;
            };
            let alive: Vec<(usize, usize)> = places
                .iter()
                .map(|&(s, e)| (s as usize, e as usize))
                .filter(|&(s, e)| {
                    let stream = &self.streams[s];
                    !(s == id && e == end)
                        && e < stream.len()
                        && e >= self.context_len[s]
                        && stream[e - n..e] == *suffix
                })
                .collect();
            if alive.is_empty() {
                continue;
            }
            let limit = max_len.min(DRAFT_PER_MATCHED * n);
            return Draft {
                tokens: self.walk(alive, n, limit),
                matched: n,
            };
        }
        Draft::default()
    }

    /// Follows `alive` (places whose next token continues the matched suffix of
    /// `matched` tokens) for at most `limit` tokens, taking the continuation most of them
    /// share each time.
    fn walk(&self, mut alive: Vec<(usize, usize)>, matched: usize, limit: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut prob = 1.0f32;
        while out.len() < limit && !alive.is_empty() {
            let j = out.len();
            let mut counts: Vec<(u32, usize)> = Vec::new();
            let mut total = 0;
            for &(s, e) in &alive {
                let Some(&t) = self.streams[s].get(e + j) else {
                    continue;
                };
                total += 1;
                match counts.iter_mut().find(|(c, _)| *c == t) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((t, 1)),
                }
            }
            // The most frequent; on a tie the one met first (deterministic).
            let Some(&(token, count)) = counts.iter().rev().max_by_key(|&&(_, n)| n) else {
                break;
            };
            // What is held back for a continuation not seen yet shrinks as the context
            // the places share with the stream grows (the suffix, then the drafted tokens).
            let unseen = 1.0 / (matched + j) as f32;
            prob *= count as f32 / (total as f32 + unseen);
            if prob < MIN_DRAFT_PROB {
                break;
            }
            out.push(token);
            alive.retain(|&(s, e)| self.streams[s].get(e + j) == Some(&token));
        }
        out
    }
}

/// FNV-1a over the tokens' bytes.
fn hash(tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tokens {
        for b in t.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_longest_matching_suffix() {
        let mut index = SuffixIndex::default();
        index.add_tokens(&[], &[1, 2, 3, 4, 5, 6, 1, 2, 9, 9, 1, 2, 8]);
        let s = index.add_tokens(&[], &[7, 1, 2]);
        // "7 1 2" occurs nowhere else, so the key is "1 2", which occurs three times:
        // followed by 3, 9 and 8, a tie, which the first met wins (1 / (3 + 1/2) = 2/7);
        // then 4 (x 1 / (1 + 1/3): 3/14), then 5 (x 4/5: 6/35 < 0.2).
        let d = index.draft(s, 10);
        assert_eq!(d.matched, 2);
        assert_eq!(d.tokens, vec![3, 4]);
        index.push(s, 3);
        let d = index.draft(s, 5);
        assert_eq!(
            d.matched, 3,
            "now `1 2 3` matches, in one place: 3/4, 3/5, 1/2, 3/7, 3/8, cut at 5 tokens"
        );
        assert_eq!(d.tokens, vec![4, 5, 6, 1, 2]);
    }

    #[test]
    fn follows_the_majority_and_stops_when_they_disagree() {
        let mut index = SuffixIndex::default();
        for tail in [[8, 1], [8, 1], [8, 2], [5, 5]] {
            index.add_tokens(&[], &[3, 4, tail[0], tail[1]]);
        }
        let s = index.add_tokens(&[], &[3, 4]);
        let d = index.draft(s, 10);
        // After "3 4" (four places): 8 in three (3/5), then 1 in two of those three (2/4:
        // 0.3), and nothing after that.
        assert_eq!(d.tokens, vec![8, 1]);
    }

    #[test]
    fn nothing_to_draft_without_a_match_or_a_continuation() {
        let mut index = SuffixIndex::default();
        let a = index.add_tokens(&[], &[1, 2, 3]);
        assert!(index.draft(a, 4).tokens.is_empty(), "only itself");
        let b = index.add_tokens(&[], &[9, 3]);
        assert!(index.draft(b, 4).tokens.is_empty(), "3 ends stream a");
        assert!(index.draft(a, 0).tokens.is_empty());
    }

    #[test]
    fn context_tokens_key_but_are_never_drafted() {
        let mut index = SuffixIndex::default();
        // A completion after the prompt tail [5, 6]: its first key can be "6 7".
        let c = index.add_tokens(&[5, 6], &[7, 8]);
        assert_eq!(index.stream(c), &[5, 6, 7, 8]);
        let s = index.add_tokens(&[], &[6, 7]);
        assert_eq!(
            index.draft(s, 4).tokens,
            vec![8],
            "seen once after two tokens: 2/3"
        );
        // "5" appears only in context, where nothing may be drafted from.
        let t = index.add_tokens(&[], &[4]);
        index.push(t, 5);
        assert!(index.draft(t, 4).tokens.is_empty());
    }

    #[test]
    fn a_long_match_drafts_further_than_a_short_one() {
        let mut index = SuffixIndex::default();
        // The same text in four places, every place agreeing: the drafts go on to
        // DRAFT_PER_MATCHED tokens per matched token (the product stays above 0.6).
        let text: Vec<u32> = (0..40).collect();
        for _ in 0..4 {
            index.add_tokens(&[], &text);
        }
        let one = index.add_tokens(&[], &[10]);
        assert_eq!(index.draft(one, 100).tokens, vec![11, 12, 13]);
        let two = index.add_tokens(&[], &[9, 10]);
        assert_eq!(index.draft(two, 100).tokens, (11..17).collect::<Vec<_>>());
        let eight = index.add_tokens(&[], &(2..10).collect::<Vec<_>>());
        assert_eq!(index.draft(eight, 100).tokens, (10..34).collect::<Vec<_>>());
    }
}
