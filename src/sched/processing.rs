//! What a row's draws do to its logits before temperature: vLLM's logits processors
//! (`allowed_token_ids`, `bad_words`, `logit_bias`, the repetition, frequency and presence
//! penalties, and the stop tokens masked before `min_tokens`) turned into plain data for
//! the GPU runner: tokens to mask, an allow-list, and per-token adjustments.
//!
//! A request's [`Processors`] are prepared once, when it is queued (its allow-list sorted
//! and shared, its prompt's distinct tokens when a repetition penalty needs them); each
//! drawing row then gets its [`RowProcessing`] from them and the tokens its sample
//! generated before the row, counted sparsely per sequence (never a vocabulary-sized
//! buffer per row). The order of vLLM's sampler is kept: masks, bias, repetition penalty,
//! frequency and presence penalties. The masks are applied last on the GPU, which gives
//! the same distribution (a masked token's probability is 0 whatever else is done to its
//! logit) and keeps a masked logit exactly at its constant.
//!
//! Invariant: a row's processing depends only on its request and the tokens generated
//! before the position it draws (for a drafted row, the drafted tokens before it too),
//! never on its batch; so a penalised sample draws the same tokens alone or among others,
//! after preemption, and with or without speculative decoding.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::request::{Request, SamplingParams};

/// One token's adjusted logit: `l = ((l + bias) * s) - subtract` with `s = 1/repetition`
/// for a positive `l + bias` and `repetition` otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenAdjust {
    pub token: u32,
    pub bias: f32,
    /// 1 when the token is in neither the prompt nor the generated tokens, or the penalty
    /// is off.
    pub repetition: f32,
    /// `frequency_penalty * count + presence_penalty` for a token generated `count > 0`
    /// times, else 0.
    pub subtract: f32,
}

/// What one logits row's draws do to it before temperature.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowProcessing {
    /// Tokens that must not be drawn (stop tokens before `min_tokens`, bad words' last
    /// tokens): sorted, each once.
    pub forbidden: Vec<u32>,
    /// The only tokens that may be drawn (sorted, each once); `None`: every token.
    pub allowed: Option<Arc<[u32]>>,
    /// Adjusted logits, sorted by token, each token once.
    pub adjusts: Vec<TokenAdjust>,
}

impl RowProcessing {
    /// Whether it leaves the row as it is.
    pub fn is_empty(&self) -> bool {
        self.forbidden.is_empty() && self.allowed.is_none() && self.adjusts.is_empty()
    }
}

/// A request's logit processors, prepared when it is queued.
#[derive(Clone, Debug, Default)]
pub(crate) struct Processors {
    allowed: Option<Arc<[u32]>>,
    /// The prompt's distinct tokens, sorted (only with a repetition penalty).
    prompt_tokens: Vec<u32>,
    /// Bad words of one token (masked everywhere), and the longer ones.
    bad_tokens: Vec<u32>,
    bad_sequences: Vec<Vec<u32>>,
    /// The processors produce nothing.
    neutral: bool,
}

impl Processors {
    pub fn new(request: &Request) -> Processors {
        let x = &request.params.processing;
        let sorted = |ids: &mut Vec<u32>| {
            ids.sort_unstable();
            ids.dedup();
        };
        let allowed = x.allowed_token_ids.as_ref().map(|ids| {
            let mut ids = ids.clone();
            sorted(&mut ids);
            Arc::from(ids)
        });
        let mut prompt_tokens = Vec::new();
        if x.repetition_penalty != 1.0 {
            prompt_tokens = request.prompt.clone();
            sorted(&mut prompt_tokens);
        }
        let (mut bad_tokens, mut bad_sequences) = (Vec::new(), Vec::new());
        for word in &x.bad_words {
            match word.as_slice() {
                [one] => bad_tokens.push(*one),
                _ => bad_sequences.push(word.clone()),
            }
        }
        sorted(&mut bad_tokens);
        Processors {
            allowed,
            prompt_tokens,
            bad_tokens,
            bad_sequences,
            neutral: x.is_neutral(),
        }
    }

    /// The processing of a row drawing the token after `generated` (counted in `counts`)
    /// and then `drafted` (the draft's tokens before the row), under `params`.
    pub fn for_row(
        &self,
        params: &SamplingParams,
        generated: &[u32],
        counts: &BTreeMap<u32, u32>,
        drafted: &[u32],
    ) -> RowProcessing {
        let before = generated.len() + drafted.len();
        let mut forbidden = match before < params.min_tokens {
            true => params.stop_ids.clone(),
            false => Vec::new(),
        };
        if self.neutral {
            forbidden.sort_unstable();
            forbidden.dedup();
            return RowProcessing {
                forbidden,
                ..RowProcessing::default()
            };
        }
        forbidden.extend_from_slice(&self.bad_tokens);
        for word in &self.bad_sequences {
            let prefix = &word[..word.len() - 1];
            if ends_with(generated, drafted, prefix) {
                forbidden.push(word[word.len() - 1]);
            }
        }
        forbidden.sort_unstable();
        forbidden.dedup();
        RowProcessing {
            forbidden,
            allowed: self.allowed.clone(),
            adjusts: self.adjusts(params, counts, drafted),
        }
    }

    /// The adjusted logits: every biased token, and with penalties every token of the
    /// prompt (repetition) and of the generated tokens.
    fn adjusts(
        &self,
        params: &SamplingParams,
        counts: &BTreeMap<u32, u32>,
        drafted: &[u32],
    ) -> Vec<TokenAdjust> {
        let x = &params.processing;
        let neutral = |token| TokenAdjust {
            token,
            bias: 0.0,
            repetition: 1.0,
            subtract: 0.0,
        };
        let mut by_token: BTreeMap<u32, TokenAdjust> = BTreeMap::new();
        for &(token, bias) in &x.logit_bias {
            by_token.insert(
                token,
                TokenAdjust {
                    bias,
                    ..neutral(token)
                },
            );
        }
        if !x.has_penalties() {
            return by_token.into_values().collect();
        }
        // A drafted row counts the draft's tokens before it too (rarely any: copy then).
        let counted = match drafted.is_empty() {
            true => std::borrow::Cow::Borrowed(counts),
            false => {
                let mut counted = counts.clone();
                for &t in drafted {
                    *counted.entry(t).or_default() += 1;
                }
                std::borrow::Cow::Owned(counted)
            }
        };
        let repetition = x.repetition_penalty;
        for &token in &self.prompt_tokens {
            by_token.entry(token).or_insert(neutral(token)).repetition = repetition;
        }
        for (&token, &count) in counted.iter() {
            let a = by_token.entry(token).or_insert(neutral(token));
            a.repetition = repetition;
            a.subtract = x.frequency_penalty * count as f32 + x.presence_penalty;
        }
        by_token.into_values().collect()
    }
}

/// Whether `generated` followed by `drafted` ends with `suffix`.
fn ends_with(generated: &[u32], drafted: &[u32], suffix: &[u32]) -> bool {
    let n = suffix.len();
    if generated.len() + drafted.len() < n {
        return false;
    }
    let tail = generated
        .iter()
        .chain(drafted)
        .skip(generated.len() + drafted.len() - n);
    tail.eq(suffix.iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::LogitProcessing;

    fn request(prompt: &[u32], processing: LogitProcessing) -> Request {
        Request {
            index: 0,
            prompt: prompt.to_vec(),
            n: 1,
            params: SamplingParams {
                processing,
                ..SamplingParams::default()
            },
            forced: Vec::new(),
            cache_salt: None,
            lora: false,
        }
    }

    fn counts(tokens: &[u32]) -> BTreeMap<u32, u32> {
        let mut c = BTreeMap::new();
        for &t in tokens {
            *c.entry(t).or_default() += 1;
        }
        c
    }

    fn row(r: &Request, generated: &[u32], drafted: &[u32]) -> RowProcessing {
        Processors::new(r).for_row(&r.params, generated, &counts(generated), drafted)
    }

    #[test]
    fn neutral_processing_leaves_every_row_alone() {
        let r = request(&[1, 2, 3], LogitProcessing::default());
        assert!(row(&r, &[4, 4, 5], &[6]).is_empty());
    }

    #[test]
    fn stop_tokens_are_forbidden_before_min_tokens_counting_drafted_tokens() {
        let mut r = request(&[1], LogitProcessing::default());
        r.params.stop_ids = vec![9, 2, 9];
        r.params.min_tokens = 3;
        assert_eq!(row(&r, &[5], &[]).forbidden, [2, 9]);
        assert_eq!(row(&r, &[5], &[6]).forbidden, [2, 9]);
        assert!(row(&r, &[5], &[6, 7]).forbidden.is_empty());
    }

    #[test]
    fn penalties_cover_the_prompt_and_count_the_generated_tokens() {
        let x = LogitProcessing {
            logit_bias: vec![(8, 2.5), (1, -1.0)],
            repetition_penalty: 1.5,
            frequency_penalty: 0.25,
            presence_penalty: 0.5,
            ..LogitProcessing::default()
        };
        let r = request(&[1, 2, 2], x);
        // Generated 4 twice and 2 once, then the draft 4 before the row.
        let adjusts = row(&r, &[4, 2, 4], &[4]);
        let a = |token, bias, repetition, subtract| TokenAdjust {
            token,
            bias,
            repetition,
            subtract,
        };
        assert_eq!(
            adjusts.adjusts,
            [
                a(1, -1.0, 1.5, 0.0),
                a(2, 0.0, 1.5, 0.25 + 0.5),
                a(4, 0.0, 1.5, 0.25 * 3.0 + 0.5),
                a(8, 2.5, 1.0, 0.0),
            ]
        );
    }

    #[test]
    fn bias_alone_touches_only_the_biased_tokens() {
        let x = LogitProcessing {
            logit_bias: vec![(3, 1.0)],
            ..LogitProcessing::default()
        };
        let r = request(&[3, 4], x);
        let p = row(&r, &[5, 5], &[]);
        assert_eq!(p.adjusts.len(), 1);
        assert_eq!((p.adjusts[0].token, p.adjusts[0].repetition), (3, 1.0));
    }

    #[test]
    fn a_bad_word_masks_its_last_token_where_the_output_ends_with_the_rest() {
        let x = LogitProcessing {
            bad_words: vec![vec![7], vec![1, 2, 3], vec![2, 4]],
            allowed_token_ids: Some(vec![9, 3, 3, 1]),
            ..LogitProcessing::default()
        };
        let r = request(&[1, 2], x);
        // The prompt does not count: only generated (and drafted) tokens.
        assert_eq!(row(&r, &[], &[]).forbidden, [7]);
        assert_eq!(row(&r, &[1, 2], &[]).forbidden, [3, 4, 7]);
        assert_eq!(row(&r, &[1], &[2]).forbidden, [3, 4, 7]);
        assert_eq!(row(&r, &[5, 2], &[]).forbidden, [4, 7]);
        assert_eq!(row(&r, &[2, 1], &[]).forbidden, [7]);
        assert_eq!(row(&r, &[], &[]).allowed.as_deref(), Some(&[1, 3, 9][..]));
    }
}
