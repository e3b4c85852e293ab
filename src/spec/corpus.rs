//! Earlier completions of the same prompts, kept to draft from: a file of last epoch's
//! rollouts (`--draft-corpus`), or, in a server, what earlier requests generated.
//!
//! Invariants: keyed by the exact prompt tokens; at most [`MAX_PER_PROMPT`] completions
//! per prompt (the newest kept) and [`MAX_TOKENS`] tokens in all (the prompts added
//! first are dropped first), so a long-running server's corpus stays bounded. It only
//! ever changes speed; the owner clears it when the weights change, since a new policy
//! writes other text.

use std::collections::{HashMap, VecDeque};

/// Completions kept per prompt.
pub const MAX_PER_PROMPT: usize = 64;
/// Completion tokens kept in all.
pub const MAX_TOKENS: usize = 4 << 20;

#[derive(Clone, Debug, Default)]
pub struct DraftCorpus {
    by_prompt: HashMap<Vec<u32>, VecDeque<Vec<u32>>>,
    /// Prompts in the order they were first added (eviction order).
    order: VecDeque<Vec<u32>>,
    tokens: usize,
}

impl DraftCorpus {
    /// Keeps `completion` of `prompt` (empty completions are not kept).
    pub fn add(&mut self, prompt: &[u32], completion: &[u32]) {
        if completion.is_empty() || completion.len() > MAX_TOKENS {
            return;
        }
        let list = match self.by_prompt.get_mut(prompt) {
            Some(list) => list,
            None => {
                self.order.push_back(prompt.to_vec());
                self.by_prompt.entry(prompt.to_vec()).or_default()
            }
        };
        list.push_back(completion.to_vec());
        self.tokens += completion.len();
        if list.len() > MAX_PER_PROMPT {
            let old = list.pop_front().expect("over the cap");
            self.tokens -= old.len();
        }
        while self.tokens > MAX_TOKENS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(list) = self.by_prompt.remove(&oldest) {
                self.tokens -= list.iter().map(Vec::len).sum::<usize>();
            }
        }
    }

    /// The completions kept for `prompt`, oldest first.
    pub fn completions(&self, prompt: &[u32]) -> impl Iterator<Item = &[u32]> {
        self.by_prompt
            .get(prompt)
            .into_iter()
            .flat_map(|list| list.iter().map(Vec::as_slice))
    }

    pub fn num_tokens(&self) -> usize {
        self.tokens
    }

    pub fn clear(&mut self) {
        *self = DraftCorpus::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_completions_per_prompt_within_the_caps() {
        let mut c = DraftCorpus::default();
        c.add(&[1, 2], &[3, 4]);
        c.add(&[1, 2], &[5]);
        c.add(&[9], &[]);
        assert_eq!(
            c.completions(&[1, 2]).collect::<Vec<_>>(),
            [&[3, 4][..], &[5]]
        );
        assert_eq!(c.completions(&[9]).count(), 0);
        assert_eq!(c.num_tokens(), 3);
        for i in 0..MAX_PER_PROMPT as u32 {
            c.add(&[7], &[i]);
        }
        c.add(&[7], &[1000]);
        let kept: Vec<_> = c.completions(&[7]).collect();
        assert_eq!(kept.len(), MAX_PER_PROMPT);
        assert_eq!(kept[0], &[1]);
        assert_eq!(kept[MAX_PER_PROMPT - 1], &[1000]);
        c.clear();
        assert_eq!(c.num_tokens(), 0);
    }

    #[test]
    fn drops_the_oldest_prompts_past_the_token_cap() {
        let mut c = DraftCorpus::default();
        let big = vec![0u32; MAX_TOKENS / 2];
        c.add(&[1], &big);
        c.add(&[2], &big);
        c.add(&[3], &[5]);
        assert_eq!(c.completions(&[1]).count(), 0, "the first prompt went");
        assert_eq!(c.completions(&[2]).count(), 1);
        assert_eq!(c.num_tokens(), MAX_TOKENS / 2 + 1);
    }
}
