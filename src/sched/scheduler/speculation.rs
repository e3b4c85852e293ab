//! The scheduler's controls of speculative decoding, for the engine: whether the steps it
//! plans may carry drafts, what a step cost (for `auto`), the draft corpus, and what
//! speculation did. All of it is kept by [`crate::sched::drafting`]; the scheduler asks it
//! for a draft per sample as it plans, and verifies the drafts in `update`.

use crate::sched::SpecStats;
use crate::spec::SpecMode;

use super::Scheduler;

impl Scheduler {
    /// Plans the next steps with drafts (when the mode allows) or without: the engine
    /// turns it on only for steps it does not plan ahead of the one before, since a
    /// draft needs its sample's last token known.
    pub fn set_speculating(&mut self, on: bool) {
        self.drafting.active = on && self.config.speculative != SpecMode::Off;
    }

    /// Whether the next step should carry drafts: never when off, whenever a sample
    /// decodes with `suffix`, and with `auto` when the measured acceptance and step cost
    /// predict a gain.
    pub fn wants_speculation(&mut self) -> bool {
        let decoding = self.running.len();
        match self.config.speculative {
            SpecMode::Off => false,
            SpecMode::Suffix => decoding > 0,
            SpecMode::Auto => self.drafting.policy.should_speculate(decoding, decoding),
        }
    }

    /// A step of `rows` rows took `step_s`, `cpu_s` of it CPU work (given for steps that
    /// only decode), hidden when it was `overlapped` with planning the next (for `auto`).
    pub fn record_step_cost(
        &mut self,
        rows: usize,
        step_s: f64,
        cpu_s: Option<f64>,
        overlapped: bool,
    ) {
        self.drafting
            .policy
            .record_step(rows, step_s, cpu_s, overlapped);
    }

    /// Keeps every finished sample as a draft source for later requests with the same
    /// prompt (a server's per-prompt corpus; cleared when the weights change).
    pub fn keep_draft_corpus(&mut self, on: bool) {
        self.drafting.keep_corpus = on;
    }

    /// Adds an earlier completion of `prompt` to draft from (`--draft-corpus`).
    pub fn add_draft_corpus(&mut self, prompt: &[u32], completion: &[u32]) {
        self.drafting.corpus.add(prompt, completion);
    }

    /// What speculation did so far.
    pub fn spec_stats(&self) -> &SpecStats {
        &self.drafting.stats
    }

    /// The draws of the last `update` that were not applied (rows after a rejected
    /// drafted token): their tokens are not part of any sample.
    pub fn rejected_draws(&self) -> &[usize] {
        &self.rejected_draws
    }
}
