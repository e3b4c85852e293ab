//! The rollout workload `sprout bench` runs in every mode: P prompts of about L tokens cut
//! from a built-in text, each sampled G times, with an output length per sample.
//!
//! Without a tokenizer (dummy weights) the text is random token ids instead, long enough
//! that no prompt wraps around, avoiding the ids that begin or end a sequence.
//!
//! Lengths are decided up front so that every mode generates exactly the same tokens'
//! worth of work: `fixed` gives every sample N tokens; `heavy-tail` gives the P x G samples
//! the quantiles of a Pareto distribution (tail index 1, scale N/16) capped at N, shuffled,
//! so they span 16x when there are 16 or more samples (a few hit the cap, many are short,
//! as in real RL rollouts); `natural` has no target: a sample ends at end of sequence or N.

use anyhow::{Result, bail};
use clap::ValueEnum;
use serde::Serialize;
use sprout::rng::SplitMix64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lengths {
    Fixed,
    Natural,
    HeavyTail,
}

/// Prose the prompts are cut from (written for sprout; any text serves).
const TEXT: &str = "The lighthouse keeper kept a notebook of every ship that passed the point, \
and by the third winter the notebook had become a kind of almanac. She wrote down the \
colour of the hulls, the hour of the tide, the shape of the smoke from the funnels and the \
names painted on the bows, and beside each entry she guessed where the ship was going and \
what it carried. Some guesses were easy: the grain boats rode low in autumn and high in \
spring, and the ferries crossed twice a day whatever the weather. Others took years to \
settle. A grey schooner with patched sails came by every eleventh week, always heading \
north, never returning by the same channel, and she filled three pages with theories \
before a fisherman told her it carried letters to the islands and came home the long way \
round to avoid the harbour dues. Mathematics crept into the notebook without her \
noticing. She began to count how often the fog arrived before noon, to average the days \
between storms, to draw small tables of the wind against the month. When the inspector \
from the mainland visited, he found the tables more useful than his own instruments and \
asked to copy them. She let him, on the condition that he bring back a book on \
navigation, and the next spring he arrived with two: one on the stars and one on the \
tides, with diagrams of the moon pulling the sea across the world like a blanket across \
a bed. Rivers, she learned, have tides of their own where they meet the ocean; sand \
moves along a coast at the speed of a slow walk over a century; and the light she tended \
could be seen from twenty miles away on a clear night because the earth curves gently \
enough for a tower to look over its shoulder. She kept the notebook for forty years. \
When it was finally given to the museum in the town, the curator counted more than nine \
thousand ships, four hundred storms, and one small drawing in the margin of the last \
page: a lighthouse, a notebook, and a question mark.";

/// One sample's place in the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleSpec {
    pub prompt: usize,
    pub sample: usize,
    /// Tokens to generate exactly (`None`: until end of sequence, at most N).
    pub target: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub prompts: Vec<Vec<u32>>,
    pub g: usize,
    pub max_tokens: usize,
    pub lengths: Lengths,
    /// `targets[p][k]` for sample k of prompt p.
    pub targets: Vec<Vec<Option<usize>>>,
}

impl Workload {
    /// `prompts` prompts of `prompt_tokens` tokens each, cut from the built-in text's ids
    /// `text_ids` at different offsets (wrapping around), each sampled `g` times.
    pub fn new(
        text_ids: &[u32],
        prompts: usize,
        prompt_tokens: usize,
        g: usize,
        max_tokens: usize,
        lengths: Lengths,
    ) -> Workload {
        assert!(!text_ids.is_empty(), "the built-in text has no tokens");
        let prompts: Vec<Vec<u32>> = (0..prompts)
            .map(|p| {
                let start = p * PROMPT_STRIDE;
                (0..prompt_tokens)
                    .map(|i| text_ids[(start + i) % text_ids.len()])
                    .collect()
            })
            .collect();
        let targets = targets(prompts.len(), g, max_tokens, lengths);
        Workload {
            prompts,
            g,
            max_tokens,
            lengths,
            targets,
        }
    }

    /// The text ids that `new` cuts `prompts` prompts of `prompt_tokens` from without
    /// wrapping around.
    pub fn text_len(prompts: usize, prompt_tokens: usize) -> usize {
        prompts.saturating_sub(1) * PROMPT_STRIDE + prompt_tokens
    }

    /// Every sample, prompt by prompt.
    pub fn samples(&self) -> impl Iterator<Item = SampleSpec> + '_ {
        self.targets.iter().enumerate().flat_map(|(p, row)| {
            row.iter().enumerate().map(move |(k, &target)| SampleSpec {
                prompt: p,
                sample: k,
                target,
            })
        })
    }

    /// The tokens the workload generates (an upper bound for `natural`).
    pub fn tokens(&self) -> usize {
        self.samples()
            .map(|s| s.target.unwrap_or(self.max_tokens))
            .sum()
    }
}

/// Prompt p starts at text id p * PROMPT_STRIDE.
const PROMPT_STRIDE: usize = 97;

/// The built-in text that prompts are cut from.
pub fn text() -> &'static str {
    TEXT
}

/// `len` token ids standing in for the text when there is no tokenizer: uniform over the
/// vocabulary of `vocab_size` except `avoid` (bos and eos), the same for a `seed`.
pub fn random_text_ids(
    len: usize,
    vocab_size: usize,
    avoid: &[u32],
    seed: u64,
) -> Result<Vec<u32>> {
    let allowed: Vec<u32> = (0..vocab_size as u32)
        .filter(|id| !avoid.contains(id))
        .collect();
    if allowed.is_empty() {
        bail!("the vocabulary of {vocab_size} has no ids besides bos and eos for prompts");
    }
    let mut rng = SplitMix64::new(seed ^ 0x70_726f_6d70_7473); // "prompts"
    Ok((0..len)
        .map(|_| allowed[rng.below(allowed.len() as u64) as usize])
        .collect())
}

fn targets(prompts: usize, g: usize, n: usize, lengths: Lengths) -> Vec<Vec<Option<usize>>> {
    let m = prompts * g;
    let mut flat: Vec<Option<usize>> = match lengths {
        Lengths::Fixed => vec![Some(n); m],
        Lengths::Natural => vec![None; m],
        Lengths::HeavyTail => {
            // Quantile i of Pareto(scale = N/16, index 1): scale / u, u = (i + 0.5) / m.
            let scale = (n as f64 / 16.0).max(1.0);
            let mut v: Vec<Option<usize>> = (0..m)
                .map(|i| {
                    let u = (i as f64 + 0.5) / m as f64;
                    Some(((scale / u).round() as usize).clamp(1, n))
                })
                .collect();
            shuffle(&mut v, 0x5eed);
            v
        }
    };
    (0..prompts).map(|_| flat.drain(..g).collect()).collect()
}

/// Fisher-Yates with a fixed 64-bit LCG: the same order on every machine.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_tail_lengths_span_16x_and_stay_within_the_cap() {
        let ids: Vec<u32> = (0..500).collect();
        let w = Workload::new(&ids, 4, 64, 8, 128, Lengths::HeavyTail);
        let lens: Vec<usize> = w.samples().map(|s| s.target.unwrap()).collect();
        assert_eq!(lens.len(), 32);
        let (min, max) = (*lens.iter().min().unwrap(), *lens.iter().max().unwrap());
        assert_eq!(max, 128);
        assert!(max >= 16 * min, "{min}..{max}");
        // Heavy: most samples are short, a few hit the cap.
        let short = lens.iter().filter(|&&l| l <= 32).count();
        let capped = lens.iter().filter(|&&l| l == 128).count();
        assert!(short >= 20 && (1..=4).contains(&capped), "{lens:?}");
        // Deterministic.
        let again = Workload::new(&ids, 4, 64, 8, 128, Lengths::HeavyTail);
        assert_eq!(w, again);
    }

    #[test]
    fn random_prompts_avoid_bos_and_eos_and_repeat_for_a_seed() {
        let len = Workload::text_len(3, 64);
        let ids = random_text_ids(len, 40, &[1, 2], 5).unwrap();
        assert_eq!(ids.len(), 2 * 97 + 64);
        assert!(ids.iter().all(|&id| id < 40 && id != 1 && id != 2));
        assert!(
            (0..40)
                .filter(|i| ![1, 2].contains(i))
                .all(|i| ids.contains(&i))
        );
        assert_eq!(ids, random_text_ids(len, 40, &[1, 2], 5).unwrap());
        assert_ne!(ids, random_text_ids(len, 40, &[1, 2], 6).unwrap());
        let w = Workload::new(&ids, 3, 64, 2, 8, Lengths::Fixed);
        assert_eq!(
            w.prompts[2],
            ids[2 * 97..].to_vec(),
            "no prompt wraps around"
        );
        assert!(random_text_ids(4, 2, &[0, 1], 0).is_err());
    }

    #[test]
    fn prompts_have_the_asked_length_and_differ() {
        let ids: Vec<u32> = (0..300).collect();
        let w = Workload::new(&ids, 3, 128, 2, 16, Lengths::Fixed);
        assert!(w.prompts.iter().all(|p| p.len() == 128));
        assert_ne!(w.prompts[0], w.prompts[1]);
        assert_eq!(w.tokens(), 3 * 2 * 16);
        let n = Workload::new(&ids, 3, 8, 2, 16, Lengths::Natural);
        assert!(n.samples().all(|s| s.target.is_none()));
    }
}
