//! Applying a step to the scheduler's sequences, once it has run ([`Scheduler::update`])
//! or, to plan the next step while the GPU still runs it, once it is submitted
//! ([`Scheduler::advance`]).
//!
//! `update` applies a step's drawn tokens and scores: a request's root forks into its `n`
//! samples, which share every prompt block, and gives way to them in the queues; samples
//! finish on a stop token, at `max_tokens`, or at the end of the model's context, and give
//! their blocks back in reverse order so that prefix blocks are evicted last. The rows of
//! a drafted chunk are verified first ([`crate::sched::verification`]).
//!
//! `advance` applies what a submitted step computes and gives every sample drawing in it a
//! placeholder token ([`DRAWN`] `| d`, draw `d`'s token, which the GPU fills in); the next
//! `schedule` then plans as usual, and `update` replaces the placeholders with the drawn
//! tokens. A sample that finishes on the token drawn (a stop token or string) has its next
//! step's row computed for nothing; `update` ignores the results of sequences that are
//! gone.
//!
//! Invariant: what a drafted chunk keeps (its blocks trimmed, its counters) is recorded
//! after every draw of its step, chunk by chunk in plan order, so blocks go back to the
//! pool in one fixed order, which decides the blocks later steps get.

use std::collections::BTreeMap;

use crate::sched::drawn::{DRAWN, DrawResult, ScoreResult};
use crate::sched::plan::{Chunk, StepPlan};
use crate::sched::request::{FinishReason, FinishedSample};
use crate::sched::sequence::{Role, SeqId};
use crate::sched::{SchedError, verification};

use super::Scheduler;

impl Scheduler {
    /// Applies what `plan` (submitted, not yet updated) computes, and gives each sample
    /// that draws in it a placeholder token (`DRAWN | d` for draw `d`), so that the next
    /// `schedule` can plan the step after it before its tokens are known. A sample that
    /// will end at its length with the token drawn gets none (it takes no next step), nor
    /// does one whose logit processing depends on its generated tokens (penalties, bad
    /// words of several tokens: its next row cannot be processed before the token is
    /// known, so it sits the next step out). `update(plan, ..)` must come next, before another `advance`.
    pub fn advance(&mut self, plan: &StepPlan) {
        // How many drafted tokens a step accepts is known only from its results.
        assert!(
            plan.chunks.iter().all(|c| c.drafted == 0),
            "a step with drafts cannot be advanced past"
        );
        for chunk in &plan.chunks {
            if self.seqs.contains_key(&chunk.seq) {
                self.computed(chunk);
            }
        }
        for (d, draw) in plan.draws.iter().enumerate() {
            let id = plan.chunks[draw.chunk].seq;
            let Some(seq) = self.seqs.get(&id) else {
                continue;
            };
            if seq.role == Role::Root || seq.scoring {
                continue; // a root forks its samples in update
            }
            let params = &self.requests[&seq.request].request.params;
            let ends = seq.generated().len() + 1 >= params.max_tokens
                || seq.tokens.len() + 1 >= self.config.max_model_len;
            // A row whose processing depends on the generated tokens cannot be planned
            // before its last token is known: the sample sits the next step out.
            let waits = params.processing.depends_on_output();
            let seq = self.seqs.get_mut(&id).expect("looked up above");
            match !ends && !waits {
                true => seq.tokens.push(DRAWN | d as u32),
                // Without a placeholder its last token is one already drawn: were it
                // preempted and recomputed next step, it would draw this token again.
                false => seq.awaiting_draw = true,
            }
        }
        for target in &plan.targets {
            let id = plan.chunks[target.chunk].seq;
            if let Some(seq) = self.seqs.get_mut(&id)
                && seq.scoring
            {
                seq.pending_scores += 1;
            }
        }
        self.advanced = true;
    }

    /// Applies a step's results (`results[i]` for `plan.draws[i]`, `scores[i]` for
    /// `plan.targets[i]`) and returns the samples that finished. Results of
    /// sequences that are gone (finished or aborted since the step was planned) are
    /// ignored.
    pub fn update(
        &mut self,
        plan: &StepPlan,
        results: &[DrawResult],
        scores: &[ScoreResult],
    ) -> Result<Vec<FinishedSample>, SchedError> {
        if results.len() != plan.draws.len() || scores.len() != plan.targets.len() {
            return Err(SchedError::ResultCount {
                draws: results.len(),
                want_draws: plan.draws.len(),
                scores: scores.len(),
                want_scores: plan.targets.len(),
            });
        }
        let advanced = std::mem::take(&mut self.advanced);
        if !advanced {
            for chunk in &plan.chunks {
                if self.seqs.contains_key(&chunk.seq) && chunk.drafted == 0 {
                    self.computed(chunk);
                }
            }
        }
        self.rejected_draws.clear();
        let mut finished = Vec::new();
        let mut forks: BTreeMap<SeqId, Vec<SeqId>> = BTreeMap::new();
        // Each chunk with a draft, and the drafted tokens it accepted.
        let mut drafts: Vec<(usize, usize)> = Vec::new();
        let mut d = 0;
        while d < plan.draws.len() {
            let c = plan.draws[d].chunk;
            let chunk = &plan.chunks[c];
            if chunk.drafted == 0 {
                self.apply_draw(plan, d, &results[d], &mut forks, &mut finished);
                d += 1;
                continue;
            }
            // A drafted chunk's rows draw one after another, row 0 first.
            let rows = d..d + 1 + chunk.drafted;
            let drawing = self.seqs.contains_key(&chunk.seq);
            let verdict = verification::verify(
                chunk,
                &plan.draws[rows.clone()],
                &results[rows.clone()],
                drawing,
                |row| self.apply_draw(plan, d + row, &results[d + row], &mut forks, &mut finished),
            );
            self.rejected_draws
                .extend(rows.start + verdict.applied..rows.end);
            drafts.push((c, verdict.accepted));
            d = rows.end;
        }
        // After every draw of the step, chunk by chunk in plan order: the order blocks go
        // back in decides which blocks later steps get.
        for &(c, accepted) in &drafts {
            self.verified(&plan.chunks[c], accepted);
        }
        if !drafts.is_empty() {
            self.drafting.record_verifying_step();
        }
        for (target, score) in plan.targets.iter().zip(scores) {
            let parent = plan.chunks[target.chunk].seq;
            if !self.seqs.contains_key(&parent) {
                continue;
            }
            self.stats.scored_tokens += 1;
            // A sample's target was counted pending by `advance`; a root's forks a new one.
            let (seq, was_pending) = match self.seqs[&parent].role {
                Role::Root => {
                    let child = self.fork_forced(parent, target.sample_index);
                    forks.entry(parent).or_default().push(child);
                    (child, false)
                }
                Role::Sample(_) => (parent, advanced),
            };
            let version = plan.version_for(self.runs_lora(seq));
            let s = self.seqs.get_mut(&seq).expect("sequence exists");
            if s.record_score(score.clone(), version, was_pending) {
                finished.push(self.finish(seq, FinishReason::Length));
            }
        }
        // Roots give way to their samples, in place in the running order; in the order the
        // roots were made (a hash map's order would make the blocks they give back, and so
        // the ids later plans get, differ from run to run).
        for (root, children) in forks {
            self.give_way_to_samples(root, children);
        }
        Ok(finished)
    }

    /// Applies draw `d` of `plan` (its result `result`): a root forks the sample it draws
    /// for (into `forks`), the sample takes the token, and one that it ends goes to
    /// `finished`. Returns whether the sample is still drawing: false when its sequence is
    /// gone (its result is ignored) or this token ended it.
    fn apply_draw(
        &mut self,
        plan: &StepPlan,
        d: usize,
        result: &DrawResult,
        forks: &mut BTreeMap<SeqId, Vec<SeqId>>,
        finished: &mut Vec<FinishedSample>,
    ) -> bool {
        let draw = &plan.draws[d];
        let parent = plan.chunks[draw.chunk].seq;
        if !self.seqs.contains_key(&parent) {
            return false;
        }
        self.stats.generated_tokens += 1;
        let target = match self.seqs[&parent].role {
            Role::Root => {
                let child = self.fork(parent, draw.sample_index);
                forks.entry(parent).or_default().push(child);
                child
            }
            Role::Sample(_) => parent,
        };
        let version = plan.version_for(self.runs_lora(target));
        let seq = self.seqs.get_mut(&target).expect("sequence exists");
        seq.record_draw(d, result, version);
        let (seq, k) = (&self.seqs[&target], draw.sample_index);
        self.drafting.push(seq.request, k, result.token);
        let params = &self.requests[&seq.request].request.params;
        match seq.finish_reason(params, self.config.max_model_len) {
            Some(reason) => {
                finished.push(self.finish(target, reason));
                false
            }
            None => true,
        }
    }

    /// Records that draft chunk `chunk` ran and `accepted` of its drafted tokens were
    /// taken: its first token and those are computed, and the blocks that only the
    /// rejected rows were written into go back to the pool.
    fn verified(&mut self, chunk: &Chunk, accepted: usize) {
        self.drafting.record_verified(chunk.drafted, accepted);
        if !self.seqs.contains_key(&chunk.seq) {
            return; // finished by a token it drew: its blocks are back already
        }
        self.computed(&verification::kept(chunk, accepted));
        let computed = self.seqs[&chunk.seq].num_computed_tokens;
        self.blocks.truncate(chunk.seq, computed);
    }

    /// Records that `chunk` ran: its tokens are computed, and blocks it filled are named.
    fn computed(&mut self, chunk: &Chunk) {
        let seq = self
            .seqs
            .get_mut(&chunk.seq)
            .expect("planned sequence exists");
        let before = seq.num_computed_tokens;
        seq.num_computed_tokens = chunk.end();
        if chunk.is_prefill {
            self.stats.prefill_tokens_computed += chunk.tokens.len();
        }
        if seq.num_computed_tokens == seq.compute_len() {
            seq.prefilling = false;
        }
        self.blocks
            .register_computed(chunk.seq, &seq.tokens, before, seq.num_computed_tokens);
    }
}
