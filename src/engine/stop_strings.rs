//! Stop strings: finding the first one in a sample's text, and where to cut the sample.
//!
//! Stop strings live in text, samples in tokens, and a match need not begin at a token
//! boundary. The rule: the sample's text is cut where the earliest match begins (the
//! match and everything after it go), and its tokens are cut to the fewest whose text
//! reaches that point. When the match begins on a token boundary (the usual case) the
//! kept tokens decode to exactly the cut text; otherwise the last kept token also holds
//! the first characters of the match, and the trainer still sees every token whose text
//! it was given. Matches that begin inside the text of the first `min_tokens` tokens do
//! not count. Plain data over a `decode` function, tested without a model.

use crate::sched::{FinishReason, FinishedSample, StopMatch};

/// Where a sample stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Tokens to keep.
    pub keep: usize,
    pub stop: StopMatch,
}

/// The stop of a sample whose last `new` tokens came in this step: the first of
/// `tokens[..len - new + 1]`, ..., `tokens` whose text holds a stop string decides (as
/// checking after each token would), by [`find`].
pub fn find_in_new<E>(
    tokens: &[u32],
    new: usize,
    stops: &[String],
    min_tokens: usize,
    decode: impl Fn(&[u32]) -> Result<String, E>,
) -> Result<Option<Cut>, E> {
    let first = tokens.len().saturating_sub(new.max(1)) + 1;
    for end in first..=tokens.len() {
        if let Some(cut) = find(&tokens[..end], stops, min_tokens, &decode)? {
            return Ok(Some(cut));
        }
    }
    Ok(None)
}

/// The earliest stop string in the text of `tokens` (on a tie, the first listed), if any.
/// `decode` gives the text of a prefix of `tokens`.
pub fn find<E>(
    tokens: &[u32],
    stops: &[String],
    min_tokens: usize,
    decode: impl Fn(&[u32]) -> Result<String, E>,
) -> Result<Option<Cut>, E> {
    if stops.is_empty() || tokens.len() < min_tokens.max(1) {
        return Ok(None);
    }
    let text = decode(tokens)?;
    let from = match min_tokens {
        0 => 0,
        n => char_boundary_at_or_after(&text, decode(&tokens[..n])?.len()),
    };
    let found = stops
        .iter()
        .filter_map(|stop| text[from..].find(stop.as_str()).map(|at| (from + at, stop)))
        .min_by_key(|&(at, _)| at);
    let Some((start, stop)) = found else {
        return Ok(None);
    };
    // The fewest tokens (at least min_tokens) whose text reaches `start`: decoded lengths
    // grow with the prefix, so bisect.
    let (mut lo, mut hi) = (min_tokens, tokens.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if decode(&tokens[..mid])?.len() >= start {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(Cut {
        keep: lo,
        stop: StopMatch {
            stop: stop.clone(),
            text: text[..start].to_string(),
        },
    }))
}

/// Applies `cut` to a finished sample: its tokens and their log-probs are cut, and it
/// finished because of the stop string.
pub fn apply(sample: &mut FinishedSample, cut: Cut) {
    let keep = cut.keep;
    sample.token_ids.truncate(keep);
    sample.logprobs.truncate(keep);
    sample.sampling_logprobs.truncate(keep);
    sample.top_logprobs.truncate(keep);
    sample.ranks.truncate(keep);
    sample.weights_versions.truncate(keep);
    sample.finish_reason = FinishReason::Stop;
    sample.stopped_by = Some(cut.stop);
}

fn char_boundary_at_or_after(text: &str, at: usize) -> usize {
    (at.min(text.len())..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy vocabulary: token i is the i-th of these pieces.
    const PIECES: [&str; 6] = ["Hello", " wor", "ld", "\n\n", "ab", "c\n"];

    fn decode(ids: &[u32]) -> Result<String, ()> {
        Ok(ids.iter().map(|&i| PIECES[i as usize]).collect())
    }

    fn stops(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_match_on_a_token_boundary_keeps_the_tokens_before_it() {
        let cut = find(&[0, 1, 2, 3, 0], &stops(&["\n\n"]), 0, decode)
            .unwrap()
            .unwrap();
        assert_eq!(cut.keep, 3);
        assert_eq!(cut.stop.text, "Hello world");
        assert_eq!(decode(&[0, 1, 2]).unwrap(), cut.stop.text);
    }

    #[test]
    fn a_match_inside_a_token_keeps_that_token() {
        // "abc\n" + "\n\n": the match "\n\n" begins inside token 5 ("c\n").
        let cut = find(&[4, 5, 3], &stops(&["\n\n"]), 0, decode)
            .unwrap()
            .unwrap();
        assert_eq!(cut.stop.text, "abc");
        assert_eq!(cut.keep, 2);
    }

    #[test]
    fn the_earliest_match_wins_and_spans_tokens() {
        let cut = find(&[0, 1, 2, 3], &stops(&["\n", "o wo"]), 0, decode)
            .unwrap()
            .unwrap();
        assert_eq!(cut.stop.stop, "o wo");
        assert_eq!(cut.stop.text, "Hell");
        assert_eq!(cut.keep, 1);
    }

    #[test]
    fn matches_inside_the_first_min_tokens_do_not_count() {
        let s = stops(&["Hello"]);
        assert_eq!(find(&[0, 1, 0], &s, 0, decode).unwrap().unwrap().keep, 0);
        let cut = find(&[0, 1, 0], &s, 1, decode).unwrap().unwrap();
        assert_eq!((cut.keep, cut.stop.text.as_str()), (2, "Hello wor"));
        assert_eq!(find(&[0, 1], &s, 1, decode).unwrap(), None);
        // Too few tokens to stop at all.
        assert_eq!(find(&[0], &s, 2, decode).unwrap(), None);
    }

    #[test]
    fn no_stop_strings_or_no_match_is_none() {
        assert_eq!(find(&[0, 1], &[], 0, decode).unwrap(), None);
        assert_eq!(find(&[0, 1], &stops(&["xyz"]), 0, decode).unwrap(), None);
    }

    #[test]
    fn applying_a_cut_trims_every_per_token_list() {
        let mut s = FinishedSample {
            request: crate::sched::RequestId(0),
            request_index: 0,
            sample_index: 0,
            prompt_token_ids: vec![1],
            token_ids: vec![0, 1, 2, 3],
            logprobs: vec![-1.0; 4],
            sampling_logprobs: vec![-2.0; 4],
            top_logprobs: vec![vec![]; 4],
            ranks: Vec::new(),
            weights_versions: vec![0; 4],
            finish_reason: FinishReason::Length,
            stopped_by: None,
            cached_prompt_tokens: 0,
        };
        let cut = find(&s.token_ids, &stops(&["\n\n"]), 0, decode)
            .unwrap()
            .unwrap();
        apply(&mut s, cut);
        assert_eq!(s.token_ids, [0, 1, 2]);
        assert_eq!((s.logprobs.len(), s.sampling_logprobs.len()), (3, 3));
        assert_eq!(s.top_logprobs.len(), 3);
        assert_eq!(s.finish_reason, FinishReason::Stop);
        assert_eq!(s.stopped_by.unwrap().text, "Hello world");
    }
}
