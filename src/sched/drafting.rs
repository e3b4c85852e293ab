//! The scheduler's side of speculative decoding: per request, a suffix index over its
//! prompt, the completions of the same prompt in the draft corpus, and its samples as they
//! grow; and the corpus itself, kept across requests when asked.
//!
//! Invariants: a sample's stream holds exactly its known tokens (placeholders of a step in
//! flight are never indexed); a request's index goes with its last sample; the corpus is
//! cleared when the weights change. Nothing here changes what is drawn, only what is
//! offered to the verifier.

use std::collections::HashMap;

use crate::spec::{AutoPolicy, DraftCorpus, SpecMode, SuffixIndex, suffix_index::StreamId};

use super::request::RequestId;

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
}
