//! The continuous-batching scheduler: the queues and their policy.
//!
//! Each [`Scheduler::schedule`] fills a token budget (`max_batch_tokens`): first every
//! running sequence in admission order (a decode is one token; a chunked prefill takes what
//! the budget leaves), then waiting sequences in queue order, each admitted only when its
//! blocks are available (continuous batching: work enters whenever blocks free up). A new
//! or preempted sequence first takes the longest run of cached full blocks that matches its
//! hash chain (prefix caching), always leaving at least one token to compute, since its
//! logits are needed. A waiting sequence whose next uncached block is a prompt block that
//! a running request is computing waits a step for it rather than computing it again (so
//! that identical prompts arriving together compute their prefix once), while those behind
//! it in the queue may go ahead. When a running sequence cannot get a block, the newest
//! running sequence is preempted: it gives its blocks back and waits at the front of the
//! queue, to be recomputed later (cheaply, from whatever of its blocks are still cached).
//!
//! Once a root's first tokens are drawn it forks into its samples, which take its place in
//! the queues; a sample finishes on a stop token, at `max_tokens`, at the end of the
//! context, on a stop string the caller found, or when its request is aborted.
//!
//! Who does the rest: the block manager takes and gives back every block; `rows` says
//! which rows of logits a chunk needs and what they draw or score; `drafting` offers the
//! drafts and `verification` checks them; `results` (below) applies a step's results and
//! `speculation` holds the engine's controls of speculative decoding.
//!
//! Invariants ([`Scheduler::check`]): every sequence is in exactly one queue; the block
//! manager's own; no score is pending and no sample awaits a draw unless a step has been
//! advanced and not updated.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::kv::{BlockHash, BlockPool};

use crate::spec::SpecMode;

use super::block_manager::{BlockManager, OutOfBlocks};
use super::block_map::SeqBlocks;
use super::config::{SchedError, SchedulerConfig, SchedulerStats, check_request};
use super::drafting::Drafting;
use super::plan::{Chunk, StepPlan};
use super::processing::Processors;
use super::request::{FinishReason, FinishedSample, Request, RequestId};
use super::rows;
use super::sequence::{Role, SeqId, Sequence};

mod results;
mod speculation;

struct RequestState {
    request: Request,
    /// Its logit processors, prepared once.
    processors: Processors,
    /// Samples not yet finished (all `n` until the root forks).
    unfinished: usize,
    /// Prompt tokens the prefix cache held when the prompt was first admitted (`None`
    /// while it has not been).
    cached_prompt_tokens: Option<usize>,
}

pub struct Scheduler {
    config: SchedulerConfig,
    /// Every sequence's block table and hash chain, and the pool they take blocks from.
    blocks: BlockManager,
    requests: HashMap<RequestId, RequestState>,
    seqs: HashMap<SeqId, Sequence>,
    /// Oldest admission first; the last is the first to be preempted.
    running: Vec<SeqId>,
    waiting: VecDeque<SeqId>,
    next_request: u64,
    next_seq: u64,
    stats: SchedulerStats,
    /// `advance` has applied the chunks of the step `update` applies next.
    advanced: bool,
    drafting: Drafting,
    /// The draws the last `update` did not apply: rows after a rejected drafted token.
    rejected_draws: Vec<usize>,
    /// The LoRA adapter requests may run with (`Request::lora`), if one is loaded.
    lora: Option<LoraTag>,
}

/// The LoRA adapter the engine runs requests with: what names their blocks and labels
/// their tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraTag {
    /// The digest of the adapter's contents (`crate::model::lora::LoraAdapter::digest`).
    pub digest: String,
    /// Bumped by each load of new contents under the adapter's name: the version its
    /// requests' tokens are labelled with.
    pub version: u64,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Scheduler {
        assert!(config.block_size > 0, "block_size is 0");
        assert!(config.max_batch_tokens > 0, "max_batch_tokens is 0");
        assert!(config.max_num_seqs > 0, "max_num_seqs is 0");
        Scheduler {
            blocks: BlockManager::new(
                config.num_blocks,
                config.block_size,
                config.prefix_caching,
                config.weights_version,
            ),
            requests: HashMap::new(),
            seqs: HashMap::new(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            next_request: 0,
            next_seq: 0,
            stats: SchedulerStats::default(),
            advanced: false,
            drafting: Drafting::new(config.speculative),
            rejected_draws: Vec::new(),
            lora: None,
            config,
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    pub fn pool(&self) -> &BlockPool {
        self.blocks.pool()
    }

    /// Whether any request is unfinished.
    pub fn has_work(&self) -> bool {
        !self.requests.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Queues a request; it is admitted when blocks allow.
    pub fn add_request(&mut self, request: Request) -> Result<RequestId, SchedError> {
        check_request(&self.config, &request)?;
        if request.lora && self.lora.is_none() {
            return Err(SchedError::NoAdapter);
        }
        let len = request.prompt.len();
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.stats.requests += 1;
        self.stats.prompt_tokens += len;
        let seq = self.new_seq(Sequence {
            id: SeqId(0),
            request: id,
            role: Role::Root,
            tokens: request.prompt.clone(),
            prompt_len: len,
            logprobs: Vec::new(),
            sampling_logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            weights_versions: Vec::new(),
            ranks: Vec::new(),
            num_computed_tokens: 0,
            prefilling: true,
            scoring: false,
            awaiting_draw: false,
            output_counts: Default::default(),
            pending_scores: 0,
        });
        self.waiting.push_back(seq);
        let salt = request.cache_salt.as_deref().map(BlockHash::salt_root);
        let root = match (&self.lora, request.lora) {
            (Some(tag), true) => Some(BlockHash::lora_root(
                salt.as_ref(),
                &tag.digest,
                tag.version,
            )),
            _ => salt,
        };
        if let Some(root) = root {
            self.blocks.salt(seq, root);
        }
        if request.forced.is_empty() {
            self.drafting.add_request(id, &request.prompt);
        }
        let unfinished = request.n;
        self.requests.insert(
            id,
            RequestState {
                processors: Processors::new(&request),
                request,
                unfinished,
                cached_prompt_tokens: None,
            },
        );
        Ok(id)
    }

    fn new_seq(&mut self, mut seq: Sequence) -> SeqId {
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        seq.id = id;
        self.seqs.insert(id, seq);
        id
    }

    /// Plans the next step. Empty only when nothing is queued.
    pub fn schedule(&mut self) -> StepPlan {
        let mut plan = StepPlan {
            weights_version: self.config.weights_version,
            lora_version: self.lora.as_ref().map_or(0, |tag| tag.version),
            ..StepPlan::default()
        };
        let mut budget = self.config.max_batch_tokens;

        // Running sequences first, oldest first; the newest give way when blocks run out.
        let mut i = 0;
        let max_seqs = self.config.max_num_seqs;
        // Rows of logits this step may compute (draws and scored tokens need one each).
        let mut rows_left = max_seqs;
        // Samples that may still carry a draft this step (auto mode may limit them).
        let mut drafting_left = match self.config.speculative {
            SpecMode::Auto => self.drafting.policy.drafting_samples(self.running.len()),
            _ => usize::MAX,
        };
        while i < self.running.len() && budget > 0 && rows_left > 0 && plan.chunks.len() < max_seqs
        {
            let id = self.running[i];
            let want = rows::fit_rows(&self.seqs[&id], budget, rows_left);
            // Nothing to compute: a root or a sample whose token the step before (advanced,
            // not yet updated) has not drawn, or will end it.
            if want == 0 {
                i += 1;
                continue;
            }
            let draft = match drafting_left {
                0 => None,
                _ => {
                    let seq = &self.seqs[&id];
                    let params = &self.requests[&seq.request].request.params;
                    let room = budget.saturating_sub(1).min(rows_left.saturating_sub(1));
                    let (max_len, decoding) = (self.config.max_model_len, self.running.len());
                    self.drafting
                        .draft_for(seq, params, max_len, room, decoding)
                }
            };
            if draft.as_ref().is_some_and(Vec::is_empty) {
                self.drafting.policy.record_no_draft();
            }
            let draft = draft.unwrap_or_default();
            if !draft.is_empty() && self.try_allocate(id, 1 + draft.len(), &mut plan) {
                drafting_left -= 1;
                let chunk = self.make_draft_chunk(id, draft);
                rows_left -= rows::rows_needed(&self.seqs[&id], &chunk);
                budget -= chunk.tokens.len();
                plan.chunks.push(chunk);
                i += 1;
                continue;
            }
            loop {
                if self.try_allocate(id, want, &mut plan) {
                    let chunk = self.make_chunk(id, want);
                    rows_left -= rows::rows_needed(&self.seqs[&id], &chunk);
                    plan.chunks.push(chunk);
                    budget -= want;
                    i += 1;
                    break;
                }
                let victim = *self.running.last().expect("the sequence itself is running");
                self.preempt(victim);
                if victim == id {
                    break;
                }
            }
        }

        // Then waiting sequences, in queue order, while their blocks are available. One
        // whose next uncached block a running prompt is computing waits for that block
        // instead of computing it again; the sequences behind it may still go ahead.
        let mut in_flight = match self.waiting.is_empty() {
            true => HashSet::new(),
            false => self.prompt_blocks_in_flight(),
        };
        let mut w = 0;
        while budget > 0 && rows_left > 0 && plan.chunks.len() < max_seqs {
            let Some(&id) = self.waiting.get(w) else {
                break;
            };
            // Preempted while a step in flight draws its token: it waits for the token.
            if self.seqs[&id].awaiting_draw {
                w += 1;
                continue;
            }
            let hits = match self.admit(id, budget, &in_flight) {
                Admission::Admitted { hits } => hits,
                Admission::AwaitsPrefix => {
                    w += 1;
                    continue;
                }
                Admission::NoBlocks => break,
            };
            self.waiting.remove(w);
            let seq = self.seqs.get_mut(&id).expect("waiting sequence exists");
            seq.prefilling = true;
            self.stats.prefix_cache_query_tokens += seq.compute_len();
            self.stats.prefix_cache_hit_tokens += hits;
            if seq.role == Role::Root {
                let state = self.requests.get_mut(&seq.request);
                let cached = &mut state
                    .expect("a sequence's request exists")
                    .cached_prompt_tokens;
                cached.get_or_insert(hits);
            }
            let want = rows::fit_rows(&self.seqs[&id], budget, rows_left);
            let allocated = self.try_allocate(id, want, &mut plan);
            assert!(allocated, "admit checked that the blocks are free");
            let chunk = self.make_chunk(id, want);
            rows_left -= rows::rows_needed(&self.seqs[&id], &chunk);
            plan.chunks.push(chunk);
            budget -= want;
            self.running.push(id);
            in_flight.extend(self.uncomputed_prompt_hashes(id));
        }

        self.add_draws_and_targets(&mut plan);
        self.stats.peak_kv_blocks = self.stats.peak_kv_blocks.max(self.blocks.pool().num_used());
        if !plan.is_empty() {
            self.stats.steps += 1;
        }
        plan
    }

    /// Takes the cached prefix of waiting sequence `id` if the blocks for its first chunk
    /// (at most `budget` tokens) are available, unless its first uncached block is one of
    /// `in_flight` (then it waits a step and finds that block cached). Changes nothing
    /// unless it admits.
    fn admit(&mut self, id: SeqId, budget: usize, in_flight: &HashSet<BlockHash>) -> Admission {
        let bs = self.config.block_size;
        let seq = &self.seqs[&id];
        let len = seq.compute_len();
        // The hit may not cover a position whose logits are needed: the last token's when
        // drawing, the first unscored target's when scoring (a recomputed scorer may find
        // its own completion cached by a sibling with the same tokens).
        let first_needed = match seq.scoring {
            true => seq.next_target_position(),
            false => len - 1,
        };
        let prefix = self
            .blocks
            .cached_prefix(id, &seq.tokens, first_needed / bs);
        if prefix
            .first_missing
            .is_some_and(|hash| in_flight.contains(&hash))
        {
            return Admission::AwaitsPrefix;
        }
        let computed = prefix.blocks.len() * bs;
        let want = (len - computed).min(budget);
        if !self.blocks.take_prefix(id, prefix.blocks, computed + want) {
            return Admission::NoBlocks;
        }
        let seq = self.seqs.get_mut(&id).expect("waiting sequence exists");
        seq.num_computed_tokens = computed;
        Admission::Admitted { hits: computed }
    }

    /// The hashes of the full prompt blocks that running roots have still to compute, in
    /// this step or later (empty without prefix caching). Only roots: their tokens are all
    /// known, while a sample's last token may be a placeholder not yet drawn.
    fn prompt_blocks_in_flight(&mut self) -> HashSet<BlockHash> {
        let mut in_flight = HashSet::new();
        for i in 0..self.running.len() {
            let id = self.running[i];
            in_flight.extend(self.uncomputed_prompt_hashes(id));
        }
        in_flight
    }

    /// The hashes of running root `id`'s full prompt blocks not computed before this step;
    /// none for a sample, a sequence not prefilling, or without prefix caching.
    fn uncomputed_prompt_hashes(&mut self, id: SeqId) -> Vec<BlockHash> {
        let seq = &self.seqs[&id];
        if seq.role != Role::Root || !seq.prefilling {
            return Vec::new();
        }
        let (computed, prompt) = (seq.num_computed_tokens, seq.prompt_len);
        self.blocks
            .hashes_to_compute(id, &seq.tokens, computed, prompt)
    }

    /// Gives sequence `id` the blocks to compute its next `want` tokens, with the step's
    /// copy of a shared block it is about to write into. All or nothing: false (and no
    /// change) when the pool has too few free blocks.
    fn try_allocate(&mut self, id: SeqId, want: usize, plan: &mut StepPlan) -> bool {
        let computed = self.seqs[&id].num_computed_tokens;
        match self.blocks.allocate(id, computed, want) {
            Ok(copy) => {
                plan.copies.extend(copy);
                true
            }
            Err(OutOfBlocks) => false,
        }
    }

    fn make_chunk(&self, id: SeqId, want: usize) -> Chunk {
        let seq = &self.seqs[&id];
        let start = seq.num_computed_tokens;
        Chunk {
            seq: id,
            start,
            tokens: seq.tokens[start..start + want].to_vec(),
            block_table: self.blocks.table(id).to_vec(),
            is_prefill: seq.prefilling,
            drafted: 0,
            lora: self.runs_lora(id),
        }
    }

    /// Whether sequence `id`'s request runs with the LoRA adapter.
    fn runs_lora(&self, id: SeqId) -> bool {
        let request = self.seqs[&id].request;
        self.requests[&request].request.lora
    }

    /// A chunk of sample `id`'s last drawn token followed by `draft`, its blocks taken.
    fn make_draft_chunk(&self, id: SeqId, draft: Vec<u32>) -> Chunk {
        let mut chunk = self.make_chunk(id, 1);
        chunk.drafted = draft.len();
        chunk.tokens.extend(draft);
        chunk
    }

    /// Adds each chunk's draws and targets (see [`rows`]), in chunk order.
    fn add_draws_and_targets(&self, plan: &mut StepPlan) {
        let StepPlan {
            chunks,
            draws,
            targets,
            ..
        } = plan;
        for (c, chunk) in chunks.iter().enumerate() {
            let seq = &self.seqs[&chunk.seq];
            let state = &self.requests[&seq.request];
            let (request, processors) = (&state.request, &state.processors);
            rows::add_draws_and_targets(c, chunk, seq, request, processors, draws, targets);
        }
    }

    /// Sends every running sequence back to the queue, in its order and ahead of those
    /// waiting, giving its blocks back: each recomputes what it had, from its tokens, when
    /// it runs again (what an engine does before it frees its KV memory). Returns how many.
    /// Call it between steps, with no step planned ahead.
    pub fn preempt_all(&mut self) -> usize {
        let running: Vec<SeqId> = self.running.iter().rev().copied().collect();
        for &id in &running {
            self.preempt(id);
        }
        running.len()
    }

    /// Sends running sequence `id` back to the front of the queue, giving its blocks back.
    fn preempt(&mut self, id: SeqId) {
        let pos = self.running.iter().position(|&s| s == id);
        self.running
            .remove(pos.expect("preempting a running sequence"));
        self.blocks.free(id);
        let seq = self.seqs.get_mut(&id).expect("sequence exists");
        seq.num_computed_tokens = 0;
        self.waiting.push_front(id);
        self.stats.preemptions += 1;
    }

    /// Puts root `root`'s samples `children` (those still unfinished) in its place in the
    /// queues, and removes the root: a root gives way to its samples once they are forked.
    fn give_way_to_samples(&mut self, root: SeqId, children: Vec<SeqId>) {
        let live: Vec<SeqId> = children
            .into_iter()
            .filter(|c| self.seqs.contains_key(c))
            .collect();
        // A root preempted while its last step ran (planned ahead) waits: its samples
        // take its place in the queue, and recompute the prompt from the cache.
        if let Some(pos) = self.running.iter().position(|&s| s == root) {
            self.running.splice(pos..=pos, live);
        } else {
            let pos = self.waiting.iter().position(|&s| s == root);
            let pos = pos.expect("a forking root is running or waiting");
            self.waiting.remove(pos);
            // The preempted root holds no blocks, so neither do its samples.
            for (i, child) in live.into_iter().enumerate() {
                self.waiting.insert(pos + i, child);
            }
        }
        self.blocks.remove(root);
        self.seqs.remove(&root);
    }

    /// A new sample of `root`'s request sharing all of the root's blocks.
    fn fork(&mut self, root: SeqId, sample_index: u32) -> SeqId {
        let parent = &self.seqs[&root];
        let child = Sequence {
            id: SeqId(0),
            role: Role::Sample(sample_index),
            ..parent.clone()
        };
        let child = self.new_seq(child);
        self.blocks.fork(root, child);
        child
    }

    /// A scoring sample of `root`'s request: the prompt's blocks shared, then completion
    /// `sample_index` to compute and score.
    fn fork_forced(&mut self, root: SeqId, sample_index: u32) -> SeqId {
        let child = self.fork(root, sample_index);
        let request = self.seqs[&child].request;
        let forced = &self.requests[&request].request.forced[sample_index as usize];
        let seq = self.seqs.get_mut(&child).expect("just forked");
        seq.tokens.extend_from_slice(forced);
        seq.scoring = true;
        seq.prefilling = true;
        child
    }

    /// Removes sample `id`, gives its blocks back and returns what it generated.
    fn finish(&mut self, id: SeqId, reason: FinishReason) -> FinishedSample {
        self.blocks.remove(id);
        self.running.retain(|&s| s != id);
        self.waiting.retain(|&s| s != id);
        let seq = self.seqs.remove(&id).expect("sequence exists");
        let state = self.requests.get_mut(&seq.request).expect("request exists");
        let sample_index = match seq.role {
            Role::Sample(k) => k,
            Role::Root => unreachable!("roots fork before they finish"),
        };
        let request = seq.request;
        let cached = state.cached_prompt_tokens.unwrap_or(0);
        let out = seq.into_finished(sample_index, state.request.index, reason, cached);
        state.unfinished -= 1;
        self.drafting.finished(request, &out.token_ids);
        if state.unfinished == 0 {
            self.requests.remove(&request);
            self.drafting.end_request(request);
        }
        out
    }

    /// The block table of every unfinished sequence, with whose it is: the root of a
    /// request that has not forked yet (`sample: None`) or one of its samples.
    pub fn block_tables(&self) -> Vec<SeqBlocks> {
        let mut out: Vec<SeqBlocks> = self
            .seqs
            .values()
            .map(|seq| SeqBlocks {
                request_index: self.requests[&seq.request].request.index,
                sample: match seq.role {
                    Role::Root => None,
                    Role::Sample(k) => Some(k),
                },
                blocks: self.blocks.table(seq.id).to_vec(),
            })
            .collect();
        out.sort_by_key(|t| (t.request_index, t.sample));
        out
    }

    /// Whether request `id` has samples that have not finished.
    pub fn has_request(&self, id: RequestId) -> bool {
        self.requests.contains_key(&id)
    }

    /// Labels the steps planned from now on with `version` (the weights they will run
    /// under), and the blocks they fill with it: blocks computed under other weights are
    /// never a prefix-cache hit for them.
    pub fn set_weights_version(&mut self, version: u64) {
        self.drafting.corpus.clear();
        self.config.weights_version = version;
        self.blocks.set_weights_version(version);
    }

    /// The LoRA adapter requests with `lora` run with from the next planned step on
    /// (`None`: none; requests that ask for one are then refused). Sequences already
    /// running keep the names their blocks chained on; new ones chain on the new tag's
    /// root, so nothing computed under another adapter or version is a hit for them.
    /// The engine must not unload the adapter while a request with `lora` is unfinished.
    pub fn set_lora(&mut self, tag: Option<LoraTag>) {
        self.lora = tag;
    }

    /// The LoRA adapter in force.
    pub fn lora(&self) -> Option<&LoraTag> {
        self.lora.as_ref()
    }

    /// Whether any unfinished request runs with the LoRA adapter.
    pub fn has_lora_requests(&self) -> bool {
        self.requests.values().any(|s| s.request.lora)
    }

    /// Forgets the prefix cache's reusable entries (the hashes of free blocks); returns
    /// how many. A later prompt recomputes what they held.
    pub fn reset_prefix_cache(&mut self) -> usize {
        self.blocks.reset_prefix_cache()
    }

    /// Once request `id`'s prompt has been admitted (its first chunk scheduled), the
    /// prompt tokens that came from the prefix cache then; `None` while it waits, and for
    /// a request that has finished or is unknown.
    pub fn cached_prompt_tokens(&self, id: RequestId) -> Option<usize> {
        self.requests.get(&id)?.cached_prompt_tokens
    }

    /// The tokens sample `sample_index` of request `id` has generated so far, while it is
    /// unfinished (`None` once it has finished, before its request forks, or when it
    /// scores given tokens rather than drawing).
    pub fn generated(&self, id: RequestId, sample_index: u32) -> Option<&[u32]> {
        let seq = self.find_sample(id, sample_index)?;
        Some(self.seqs[&seq].generated())
    }

    /// Finishes drawing sample `sample_index` of request `id` now with `reason` (a stop
    /// string found by the caller) and returns it. Call it between steps.
    pub fn finish_sample(
        &mut self,
        id: RequestId,
        sample_index: u32,
        reason: FinishReason,
    ) -> Result<FinishedSample, SchedError> {
        match self.find_sample(id, sample_index) {
            Some(seq) => Ok(self.finish(seq, reason)),
            None => Err(SchedError::UnknownRequest(id)),
        }
    }

    fn find_sample(&self, id: RequestId, sample_index: u32) -> Option<SeqId> {
        self.running.iter().chain(&self.waiting).copied().find(|s| {
            let seq = &self.seqs[s];
            seq.request == id && seq.role == Role::Sample(sample_index) && !seq.scoring
        })
    }

    /// Stops request `id` now and returns each unfinished sample with what it generated so
    /// far (a request that had not forked yet returns `n` empty samples). Call it between
    /// steps (after `update`, before the next `schedule`).
    pub fn abort(&mut self, id: RequestId) -> Result<Vec<FinishedSample>, SchedError> {
        let (n, index, cached) = match self.requests.get(&id) {
            Some(state) => (
                state.request.n as u32,
                state.request.index,
                state.cached_prompt_tokens.unwrap_or(0),
            ),
            None => return Err(SchedError::UnknownRequest(id)),
        };
        let mut ids: Vec<SeqId> = self.running.to_vec();
        ids.extend(self.waiting.iter().copied());
        ids.retain(|s| self.seqs[s].request == id);
        let mut out = Vec::new();
        for seq in ids {
            if self.seqs[&seq].role == Role::Root {
                self.blocks.remove(seq);
                self.running.retain(|&s| s != seq);
                self.waiting.retain(|&s| s != seq);
                let root = self.seqs.remove(&seq).expect("queued sequence exists");
                let abort = |k| {
                    root.clone()
                        .into_finished(k, index, FinishReason::Abort, cached)
                };
                out.extend((0..n).map(abort));
            } else {
                out.push(self.finish(seq, FinishReason::Abort));
            }
        }
        self.requests.remove(&id);
        self.drafting.end_request(id);
        out.sort_by_key(|s| s.sample_index);
        Ok(out)
    }

    /// Checks the invariants of the block tables and the pool, and of the queues;
    /// describes the first violation.
    pub fn check(&self) -> Result<(), String> {
        for seq in self.seqs.values() {
            if !self.advanced && seq.pending_scores != 0 {
                return Err(format!(
                    "{:?} has {} scores pending with no step in flight",
                    seq.id, seq.pending_scores
                ));
            }
            if !self.advanced && seq.awaiting_draw {
                return Err(format!("{:?} awaits a draw with no step in flight", seq.id));
            }
        }
        let computed = self.seqs.values();
        self.blocks
            .check(computed.map(|seq| (seq.id, seq.num_computed_tokens)))?;
        let in_queues = self.running.len() + self.waiting.len();
        if in_queues != self.seqs.len() {
            return Err(format!(
                "{} sequences but {in_queues} in the queues",
                self.seqs.len()
            ));
        }
        Ok(())
    }
}

/// What [`Scheduler::admit`] decided for a waiting sequence.
enum Admission {
    /// Admitted, with `hits` tokens from the prefix cache.
    Admitted { hits: usize },
    /// Its next uncached block is being computed by a running prompt: it waits a step.
    AwaitsPrefix,
    /// Too few free blocks for its first chunk: it and those behind it wait.
    NoBlocks,
}
