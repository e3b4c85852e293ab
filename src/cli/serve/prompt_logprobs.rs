//! The prompt's own log-probs: vLLM's `prompt_logprobs`, and the prompt's part of a
//! completions choice with `echo` and `logprobs` (scoring through the server).
//!
//! They come from a teacher-forced pass queued beside the request's samples, in the same
//! `Command::Add`: for a prompt `P` of two tokens or more, a request whose prompt is
//! `P[..1]` and whose one sample is forced to `P[1..]`, scored raw (temperature 1, no logit
//! processing, as vLLM's prompt log-probs are), with as many alternatives as asked, in the
//! sampling requests' cache salt. Every kernel is batch-invariant, so the log-prob of `P[i]`
//! has the same bits as a rollout that drew it after `P[..i]`, or `sprout score` scoring it.
//! A one-token prompt has nothing to score: its list is `[null]` and nothing is queued.
//!
//! Shapes: the first prompt token has no log-prob (`null`); each later position is an
//! object keyed by token id (as a string) to `{logprob, rank, decoded_token}`, the prompt's
//! own token first with its rank under the model, then the k most likely (ranks 1..k), a
//! token listed once (vLLM's `append_logprobs_for_next_position`). A log-prob of -inf is
//! written -9999.0, as vLLM's `clamp_prompt_logprobs` does. An aborted scoring pass gives
//! the positions it had scored.

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use sprout::sched::{FinishReason, FinishedSample, Request, SamplingParams};

use crate::cli::serve::text_logprobs::{Logprobs, TopMap};

/// The teacher-forced request that scores the prompt of `sampling` under engine index
/// `index`, with `top` alternatives per position; `None` for a one-token prompt.
pub fn scoring_request(sampling: &Request, index: u32, top: usize) -> Option<Request> {
    let (first, rest) = sampling.prompt.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(Request {
        index,
        prompt: vec![*first],
        n: 1,
        params: SamplingParams {
            temperature: 1.0,
            seed: 0,
            max_tokens: rest.len(),
            stop_ids: Vec::new(),
            top_logprobs: top,
            ..SamplingParams::default()
        },
        forced: vec![rest.to_vec()],
        cache_salt: sampling.cache_salt.clone(),
        lora: sampling.lora,
    })
}

/// A log-prob as vLLM writes a prompt's: -inf as -9999.0.
fn clamp(logprob: f32) -> f32 {
    match logprob == f32::NEG_INFINITY {
        true => -9999.0,
        false => logprob,
    }
}

/// One token of a position: its log-prob, its rank (`None` when the engine gave none) and
/// its text.
pub struct Entry {
    pub token: u32,
    pub logprob: f32,
    pub rank: Option<u32>,
    pub decoded_token: String,
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut entry = s.serialize_struct("Logprob", 3)?;
        entry.serialize_field("logprob", &self.logprob)?;
        entry.serialize_field("rank", &self.rank)?;
        entry.serialize_field("decoded_token", &self.decoded_token)?;
        entry.end()
    }
}

/// One prompt position: token id (a string) to its entry, the prompt's token first.
pub struct Position(pub Vec<Entry>);

impl Serialize for Position {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for e in &self.0 {
            map.serialize_entry(&e.token.to_string(), e)?;
        }
        map.end()
    }
}

/// A prompt's scores: its tokens and its scoring pass's sample (`None` when nothing was
/// scored: a one-token prompt).
#[derive(Clone, Copy)]
pub struct PromptScore<'a> {
    pub prompt: &'a [u32],
    pub sample: Option<&'a FinishedSample>,
}

impl PromptScore<'_> {
    /// Per scored position (prompt token 1 on): the token, its log-prob, its rank and the
    /// alternatives.
    fn scored(
        &self,
    ) -> impl Iterator<Item = (u32, f32, Option<u32>, &[sprout::sched::TopLogprob])> {
        let s = self.sample;
        let tokens = s.map(|s| s.token_ids.as_slice()).unwrap_or_default();
        let logprobs = s.map(|s| s.logprobs.as_slice()).unwrap_or_default();
        tokens
            .iter()
            .zip(logprobs)
            .enumerate()
            .map(move |(i, (&token, &logprob))| {
                let s = s.expect("tokens come from a sample");
                let top = s.top_logprobs.get(i).map(Vec::as_slice).unwrap_or_default();
                (token, logprob, s.ranks.get(i).copied(), top)
            })
    }

    /// vLLM's `prompt_logprobs` with `k` alternatives per position, tokens named by `name`.
    pub fn vllm(&self, name: &dyn Fn(u32) -> String, k: usize) -> Vec<Option<Position>> {
        let mut out = vec![None];
        for (token, logprob, rank, top) in self.scored() {
            let mut entries = vec![Entry {
                token,
                logprob: clamp(logprob),
                rank,
                decoded_token: name(token),
            }];
            for (place, alt) in top.iter().take(k).enumerate() {
                if alt.token != token {
                    entries.push(Entry {
                        token: alt.token,
                        logprob: clamp(alt.logprob),
                        rank: Some(place as u32 + 1),
                        decoded_token: name(alt.token),
                    });
                }
            }
            out.push(Some(Position(entries)));
        }
        out
    }

    /// The prompt's part of a completions choice's `logprobs` with `k` alternatives per
    /// position: `null` for the first token, as for any position not scored, each text
    /// offset counting the names before it.
    pub fn completions(&self, name: &dyn Fn(u32) -> String, k: usize) -> Logprobs {
        let mut out = Logprobs::default();
        let mut scored = self.scored();
        let mut offset = 0;
        for (i, &token) in self.prompt.iter().enumerate() {
            let text = name(token);
            out.text_offset.push(offset);
            offset += text.chars().count();
            out.tokens.push(text);
            let here = if i == 0 { None } else { scored.next() };
            match here {
                None => {
                    out.token_logprobs.push(None);
                    out.top_logprobs.push(None);
                }
                Some((_, logprob, _, top)) => {
                    out.token_logprobs.push(Some(clamp(logprob)));
                    let alternatives = top.iter().take(k).map(|t| (t.token, clamp(t.logprob)));
                    out.top_logprobs
                        .push(Some(TopMap::named(name, alternatives)));
                }
            }
        }
        out
    }
}

/// The sample of a prompt that is not sampled (`max_tokens` 0): no tokens, ended by its
/// length, or by an abort when its scoring pass was aborted.
pub fn unsampled(
    score: Option<&FinishedSample>,
    request_index: u32,
    sample_index: u32,
) -> FinishedSample {
    let aborted = score.is_some_and(|s| s.finish_reason == FinishReason::Abort);
    FinishedSample {
        request: score
            .map(|s| s.request)
            .unwrap_or(sprout::sched::RequestId(0)),
        request_index,
        sample_index,
        prompt_token_ids: Vec::new(),
        token_ids: Vec::new(),
        logprobs: Vec::new(),
        sampling_logprobs: Vec::new(),
        top_logprobs: Vec::new(),
        ranks: Vec::new(),
        weights_versions: Vec::new(),
        finish_reason: match aborted {
            true => FinishReason::Abort,
            false => FinishReason::Length,
        },
        stopped_by: None,
        cached_prompt_tokens: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout::sched::{RequestId, TopLogprob};

    fn sample(
        tokens: &[u32],
        logprobs: &[f32],
        ranks: &[u32],
        top: Vec<Vec<TopLogprob>>,
    ) -> FinishedSample {
        let mut s = unsampled(None, 0, 0);
        s.request = RequestId(1);
        s.token_ids = tokens.to_vec();
        s.logprobs = logprobs.to_vec();
        s.ranks = ranks.to_vec();
        s.top_logprobs = top;
        s
    }

    fn alt(token: u32, logprob: f32) -> TopLogprob {
        TopLogprob { token, logprob }
    }

    #[test]
    fn a_prompt_is_scored_from_its_first_token_in_its_salt() {
        let sampling = Request {
            index: 3,
            prompt: vec![5, 6, 7],
            n: 4,
            params: SamplingParams::default(),
            forced: Vec::new(),
            cache_salt: Some("v2".into()),
            lora: false,
        };
        let r = scoring_request(&sampling, 9, 2).unwrap();
        assert_eq!((r.index, r.prompt.clone(), r.n), (9, vec![5], 1));
        assert_eq!(r.forced, vec![vec![6, 7]]);
        assert_eq!((r.params.top_logprobs, r.params.max_tokens), (2, 2));
        assert_eq!(r.params.temperature, 1.0);
        assert_eq!(r.cache_salt.as_deref(), Some("v2"));
        let one = Request {
            prompt: vec![5],
            ..sampling
        };
        assert!(scoring_request(&one, 9, 2).is_none());
    }

    #[test]
    fn positions_hold_the_prompt_token_first_then_the_top_k_once() {
        let name = |id: u32| format!("t{id}");
        let s = sample(
            &[6, 7],
            &[-0.5, f32::NEG_INFINITY],
            &[1, 300],
            vec![
                vec![alt(6, -0.5), alt(2, -1.5), alt(3, -2.0)],
                vec![alt(1, -0.125), alt(2, -3.0), alt(3, -4.0)],
            ],
        );
        let score = PromptScore {
            prompt: &[5, 6, 7],
            sample: Some(&s),
        };
        let v = serde_json::to_value(score.vllm(&name, 2)).unwrap();
        let expected = serde_json::json!([
            null,
            {"6": {"logprob": -0.5, "rank": 1, "decoded_token": "t6"},
             "2": {"logprob": -1.5, "rank": 2, "decoded_token": "t2"}},
            {"7": {"logprob": -9999.0, "rank": 300, "decoded_token": "t7"},
             "1": {"logprob": -0.125, "rank": 1, "decoded_token": "t1"},
             "2": {"logprob": -3.0, "rank": 2, "decoded_token": "t2"}},
        ]);
        assert_eq!(v, expected);
        // The prompt's token comes first in the object as written.
        let text = serde_json::to_string(&score.vllm(&name, 2)).unwrap();
        assert!(text.contains(r#"{"7":{"#), "{text}");

        let c = serde_json::to_value(score.completions(&name, 1)).unwrap();
        assert_eq!(c["tokens"], serde_json::json!(["t5", "t6", "t7"]));
        assert_eq!(
            c["token_logprobs"],
            serde_json::json!([null, -0.5, -9999.0])
        );
        assert_eq!(
            c["top_logprobs"],
            serde_json::json!([null, {"t6": -0.5}, {"t1": -0.125}])
        );
        assert_eq!(c["text_offset"], serde_json::json!([0, 2, 4]));
    }

    #[test]
    fn a_one_token_or_cut_short_prompt_has_what_was_scored() {
        let name = |id: u32| id.to_string();
        let lone = PromptScore {
            prompt: &[5],
            sample: None,
        };
        assert_eq!(
            serde_json::to_string(&lone.vllm(&name, 3)).unwrap(),
            "[null]"
        );
        let s = sample(&[6], &[-0.25], &[], vec![vec![]]);
        let cut = PromptScore {
            prompt: &[5, 6, 7],
            sample: Some(&s),
        };
        let v = serde_json::to_value(cut.vllm(&name, 0)).unwrap();
        assert_eq!(
            v,
            serde_json::json!([null, {"6": {"logprob": -0.25, "rank": null, "decoded_token": "6"}}])
        );
        let c = serde_json::to_value(cut.completions(&name, 0)).unwrap();
        assert_eq!(c["token_logprobs"], serde_json::json!([null, -0.25, null]));
    }
}
