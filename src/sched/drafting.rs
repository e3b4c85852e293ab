//! The scheduler's side of speculative decoding: per request, a suffix index over its
//! prompt, the completions of the same prompt in the draft corpus, and its samples as they
//! grow; and the corpus itself, kept across requests when asked.
//!
//! Invariants: a sample's stream holds exactly its known tokens (placeholders of a step in
//! flight are never indexed); a request's index goes with its last sample; the corpus is
//! cleared when the weights change. Nothing here changes what is drawn, only what is
//! offered to the verifier.

use std::collections::HashMap;

use crate::spec::{
    AutoPolicy, DraftCorpus, MAX_DRAFT, SpecMode, SuffixIndex, suffix_index::StreamId,
};

use super::drawn::DRAWN;
use super::request::{RequestId, SamplingParams};
use super::sequence::{Role, Sequence};

/// Counters of the drafts verified.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpecStats {
    /// Steps that verified at least one draft.
    pub steps: usize,
    /// Drafts verified, and their tokens.
    pub drafts: usize,
    pub drafted_tokens: usize,
    /// Drafted tokens that were accepted (equal to the model's own draw).
    pub accepted_tokens: usize,
}

struct Group {
    index: SuffixIndex,
    prompt: Vec<u32>,
    samples: HashMap<u32, StreamId>,
}

#[derive(Default)]
pub(crate) struct Drafting {
    pub mode: SpecMode,
    /// Whether the step being planned may carry drafts.
    pub active: bool,
    /// Keep finished samples in the corpus, for later requests with the same prompt.
    pub keep_corpus: bool,
    pub corpus: DraftCorpus,
    pub policy: AutoPolicy,
    pub stats: SpecStats,
    groups: HashMap<RequestId, Group>,
}

impl Drafting {
    pub fn new(mode: SpecMode) -> Drafting {
        Drafting {
            mode,
            ..Drafting::default()
        }
    }

    /// Starts request `id`'s index: its prompt and the corpus's completions of it.
    pub fn add_request(&mut self, id: RequestId, prompt: &[u32]) {
        if self.mode == SpecMode::Off {
            return;
        }
        let mut index = SuffixIndex::default();
        index.add_tokens(&[], prompt);
        for completion in self.corpus.completions(prompt) {
            index.add_tokens(prompt, completion);
        }
        let group = Group {
            index,
            prompt: prompt.to_vec(),
            samples: HashMap::new(),
        };
        self.groups.insert(id, group);
    }

    /// Appends `token` to sample `k` of request `id`.
    pub fn push(&mut self, id: RequestId, k: u32, token: u32) {
        let Some(group) = self.groups.get_mut(&id) else {
            return;
        };
        let stream = *group
            .samples
            .entry(k)
            .or_insert_with(|| group.index.add_stream(&group.prompt));
        group.index.push(stream, token);
    }

    /// A draft of at most `max` tokens for sample `k` of request `id`.
    pub fn draft(&self, id: RequestId, k: u32, max: usize) -> Vec<u32> {
        if max == 0 {
            return Vec::new();
        }
        let Some(group) = self.groups.get(&id) else {
            return Vec::new();
        };
        match group.samples.get(&k) {
            Some(&stream) => group.index.draft(stream, max).tokens,
            None => Vec::new(),
        }
    }

    /// The draft to verify for `seq` this step, if speculating: only for a sample decoding
    /// a known token, no longer than its tokens left to draw (`params`), the context
    /// (`max_model_len`), `room` (what the step's token budget and rows leave beside its
    /// own token), and in auto mode the tokens worth a row each with `decoding` sequences
    /// running. `None` when no draft is asked for; an empty draft when the index had none.
    pub fn draft_for(
        &self,
        seq: &Sequence,
        params: &SamplingParams,
        max_model_len: usize,
        room: usize,
        decoding: usize,
    ) -> Option<Vec<u32>> {
        if !self.active {
            return None;
        }
        let Role::Sample(k) = seq.role else {
            return None;
        };
        let last = *seq.tokens.last().expect("a sample has tokens");
        if seq.scoring || seq.num_uncomputed() != 1 || last & DRAWN != 0 {
            return None;
        }
        let tokens_left = params.max_tokens.saturating_sub(seq.generated().len() + 1);
        let context_left = max_model_len.saturating_sub(seq.tokens.len() + 1);
        let mut max = MAX_DRAFT.min(tokens_left).min(context_left).min(room);
        if self.mode == SpecMode::Auto {
            max = self.policy.keep(decoding, decoding, max);
        }
        (max > 0).then(|| self.draft(seq.request, k, max))
    }

    /// A sample finished with `generated`: kept for later requests when asked.
    pub fn finished(&mut self, id: RequestId, generated: &[u32]) {
        if self.keep_corpus
            && let Some(group) = self.groups.get(&id)
        {
            self.corpus.add(&group.prompt, generated);
        }
    }

    /// Request `id` has no sample left.
    pub fn end_request(&mut self, id: RequestId) {
        self.groups.remove(&id);
    }

    /// A draft of `drafted` tokens was verified and `accepted` of them taken.
    pub fn record_verified(&mut self, drafted: usize, accepted: usize) {
        self.stats.drafts += 1;
        self.stats.drafted_tokens += drafted;
        self.stats.accepted_tokens += accepted;
        self.policy.record_verify(drafted, accepted);
    }

    /// A step verified at least one draft.
    pub fn record_verifying_step(&mut self) {
        self.stats.steps += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_come_from_the_prompt_the_siblings_and_the_corpus() {
        let mut d = Drafting::new(SpecMode::Suffix);
        let prompt = [1, 2, 3, 4];
        // An earlier epoch's completion of the same prompt.
        d.corpus.add(&prompt, &[7, 8, 9, 10]);
        d.add_request(RequestId(0), &prompt);
        // Sample 0 starts with 7: the corpus says 8, 9, 10 next (seen once, but after the
        // five tokens 1 2 3 4 7: all of it).
        d.push(RequestId(0), 0, 7);
        assert_eq!(d.draft(RequestId(0), 0, 8), vec![8, 9, 10]);
        // Sample 1 follows what sample 0 wrote as it grows.
        d.push(RequestId(0), 0, 5);
        d.push(RequestId(0), 0, 6);
        d.push(RequestId(0), 1, 5);
        assert_eq!(d.draft(RequestId(0), 1, 8), vec![6]);
        // From the prompt itself: after 2, 3 came.
        d.push(RequestId(0), 2, 2);
        assert_eq!(d.draft(RequestId(0), 2, 8), vec![3, 4]);
        // Off: nothing is indexed.
        let mut off = Drafting::new(SpecMode::Off);
        off.add_request(RequestId(0), &prompt);
        off.push(RequestId(0), 0, 2);
        assert!(off.draft(RequestId(0), 0, 8).is_empty());
    }

    #[test]
    fn finished_samples_feed_the_corpus_only_when_kept() {
        let mut d = Drafting::new(SpecMode::Suffix);
        d.add_request(RequestId(0), &[1, 2]);
        d.finished(RequestId(0), &[5, 6]);
        assert_eq!(d.corpus.num_tokens(), 0);
        d.keep_corpus = true;
        d.finished(RequestId(0), &[5, 6]);
        d.end_request(RequestId(0));
        assert_eq!(d.corpus.completions(&[1, 2]).count(), 1);
        assert!(
            d.draft(RequestId(0), 0, 4).is_empty(),
            "the request's index is gone"
        );
    }
}
