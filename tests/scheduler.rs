//! The scheduler on the CPU, driven by a fake model that reads every sequence's tokens back
//! through its block table from a fake KV pool (one token id per slot). A wrong block
//! table, a missed copy-on-write or a block reused while still in use changes what the fake
//! model sees, and so changes its output: outputs that match a run with a huge pool prove
//! the paging right, not just the bookkeeping. Steps planned ahead (`Scheduler::advance`,
//! the next step planned before the last one's tokens are applied, as the engine does)
//! must give the same samples as steps planned one at a time.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sprout::sched::{
    DRAWN, DrawResult, FinishReason, FinishedSample, LogitProcessing, LoraTag, Request,
    RowProcessing, SamplingParams, SchedError, Scheduler, SchedulerConfig, ScoreResult, StepPlan,
};
use sprout::spec::SpecMode;

const VOCAB: u32 = 50;
const STOP: u32 = 0;

fn config(num_blocks: usize, block_size: usize, max_batch_tokens: usize) -> SchedulerConfig {
    SchedulerConfig {
        block_size,
        num_blocks,
        max_batch_tokens,
        max_num_seqs: 6,
        max_model_len: 4096,
        weights_version: 7,
        prefix_caching: true,
        speculative: SpecMode::Off,
    }
}

fn request(index: u32, prompt: Vec<u32>, n: usize, max_tokens: usize) -> Request {
    Request {
        index,
        prompt,
        n,
        params: SamplingParams {
            temperature: 1.0,
            seed: 1,
            max_tokens,
            stop_ids: vec![STOP],
            ..SamplingParams::default()
        },
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }
}

/// A hash of everything a row's processing does (0 for nothing).
fn processing_hash(p: &RowProcessing) -> u64 {
    if p.is_empty() {
        return 0;
    }
    let mut h: u64 = 0x9e3779b97f4a7c15;
    let mut mix = |x: u64| h = (h ^ x).wrapping_mul(0x100000001b3);
    p.forbidden.iter().for_each(|&t| mix(t as u64));
    p.allowed
        .iter()
        .flat_map(|a| a.iter())
        .for_each(|&t| mix(t as u64 + 7));
    for a in &p.adjusts {
        let bits = [a.bias, a.repetition, a.subtract].map(f32::to_bits);
        mix(a.token as u64);
        bits.iter().for_each(|&b| mix(b as u64));
    }
    h
}

/// One of three sets of logit processors (or none): penalties; a bias with bad words of
/// one and of two tokens; an allow-list.
fn processing(preset: Option<u8>) -> LogitProcessing {
    let mut x = LogitProcessing::default();
    match preset {
        None => {}
        Some(0) => {
            x.repetition_penalty = 1.3;
            x.frequency_penalty = 0.5;
            x.presence_penalty = 0.25;
        }
        Some(1) => {
            x.logit_bias = vec![(2, 3.0), (5, -1.0)];
            x.bad_words = vec![vec![4], vec![1, 2]];
        }
        Some(_) => x.allowed_token_ids = Some((1..25).collect()),
    }
    x
}

/// A model whose "KV" is the token id at each slot and whose next token is a hash of
/// everything the sequence's block table shows, plus the draw's key.
struct FakeModel {
    slots: Vec<Option<u32>>,
    block_size: usize,
    /// Stop tokens are allowed only when true, so that tests can force long samples.
    allow_stop: bool,
    /// Draws depend only on the last two tokens (read through the block table) and the
    /// sample, from a small alphabet: repetitive text, which drafts predict.
    repetitive: bool,
}

impl FakeModel {
    fn new(c: &SchedulerConfig, allow_stop: bool) -> FakeModel {
        FakeModel {
            slots: vec![None; c.num_blocks * c.block_size],
            block_size: c.block_size,
            allow_stop,
            repetitive: false,
        }
    }

    fn slot(&self, table: &[u32], pos: usize) -> usize {
        table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// What the fake attention sees for position `pos` of a chunk: a hash of every token
    /// up to it, read through the block table.
    fn context(&self, table: &[u32], pos: usize) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        for p in 0..=pos {
            let token = self.slots[self.slot(table, p)].expect("attention read an unwritten slot");
            h = (h ^ (token as u64 + 1)).wrapping_mul(0x100000001b3);
        }
        h
    }

    /// The fake model's log-probability of `token` after a context.
    fn logprob(context: u64, token: u32) -> f32 {
        let h = (context ^ (token as u64).wrapping_mul(0x9e3779b97f4a7c15)) % 1000;
        -(h as f32) / 100.0
    }

    /// The fake model's score of `token` after a context: its log-prob, and a rank from
    /// another hash of the same two (so that a rank recorded for the wrong token or
    /// position shows).
    fn score(context: u64, token: u32) -> ScoreResult {
        let h = (context.rotate_left(17) ^ (token as u64).wrapping_mul(0xff51afd7ed558ccd)) % 997;
        ScoreResult {
            logprob: Self::logprob(context, token),
            rank: h as u32 + 1,
            top: Vec::new(),
        }
    }

    fn run(&mut self, plan: &StepPlan) -> (Vec<DrawResult>, Vec<ScoreResult>) {
        self.run_after(plan, &[])
    }

    /// Runs `plan`, whose tokens may name the draws of the plan run before (`before`), as
    /// the GPU reads them when a step is planned ahead.
    fn run_after(
        &mut self,
        plan: &StepPlan,
        before: &[DrawResult],
    ) -> (Vec<DrawResult>, Vec<ScoreResult>) {
        let bs = self.block_size;
        for copy in &plan.copies {
            for i in 0..bs {
                self.slots[copy.dst as usize * bs + i] = self.slots[copy.src as usize * bs + i];
            }
        }
        for chunk in &plan.chunks {
            for (i, &token) in chunk.tokens.iter().enumerate() {
                let token = match token & DRAWN {
                    0 => token,
                    _ => before[(token & !DRAWN) as usize].token,
                };
                let slot = self.slot(&chunk.block_table, chunk.start + i);
                self.slots[slot] = Some(token);
            }
        }
        let draws = plan
            .draws
            .iter()
            .map(|d| {
                let chunk = &plan.chunks[d.chunk];
                let pos = chunk.start + d.offset;
                let context = self.context(&chunk.block_table, pos);
                let mut h = context;
                let mut mix = |x: u64| h = (h ^ x).wrapping_mul(0x100000001b3);
                mix(d.request_index as u64);
                mix(d.sample_index as u64 + 1000);
                // A row's processing changes what it draws, so that processing computed
                // from the wrong tokens (a placeholder, a draft's tokens miscounted)
                // changes the samples.
                let processing = processing_hash(&d.processing);
                mix(processing);
                let mut token = if self.repetitive {
                    // Coarsely, so that repetitive samples stay repetitive.
                    let mut h: u64 = d.sample_index as u64 % 2 + d.processing.adjusts.len() as u64;
                    for p in pos.saturating_sub(1)..=pos {
                        let t = self.slots[self.slot(&chunk.block_table, p)].expect("written");
                        h = (h ^ (t as u64 + 1)).wrapping_mul(0x100000001b3);
                    }
                    (h % 5) as u32 + 1
                } else {
                    mix(d.position as u64 + 100_000);
                    (h % VOCAB as u64) as u32
                };
                let p = &d.processing;
                if (!self.allow_stop && token == STOP) || p.forbidden.contains(&token) {
                    token = 1;
                }
                if let Some(allowed) = p.allowed.as_deref().filter(|a| !a.contains(&token)) {
                    token = allowed[0];
                }
                DrawResult {
                    token,
                    logprob: Self::logprob(context, token),
                    sampling_logprob: Self::logprob(context, token),
                    top: vec![],
                }
            })
            .collect();
        let scores = plan
            .targets
            .iter()
            .map(|t| {
                let chunk = &plan.chunks[t.chunk];
                let context = self.context(&chunk.block_table, chunk.start + t.offset);
                Self::score(context, t.token)
            })
            .collect();
        (draws, scores)
    }
}

/// Runs every queued request to the end, checking the invariants after each step.
fn drain(s: &mut Scheduler, model: &mut FakeModel) -> Vec<FinishedSample> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if !s.has_work() {
            return out;
        }
        // `auto` decides step by step, from step times recorded as a GPU's would be
        // (mostly a fixed cost per step), as the engine does.
        let auto = s.config().speculative == SpecMode::Auto;
        if auto {
            let on = s.wants_speculation();
            s.set_speculating(on);
        }
        let plan = s.schedule();
        assert!(!plan.is_empty(), "work is queued but nothing was scheduled");
        assert!(plan.num_tokens() <= s.config().max_batch_tokens);
        assert!(plan.chunks.len() <= s.config().max_num_seqs);
        let results = model.run(&plan);
        out.extend(s.update(&plan, &results.0, &results.1).unwrap());
        s.check().unwrap();
        if auto {
            let rows = plan.num_tokens();
            s.record_step_cost(rows, 0.010 + 0.000_01 * rows as f64, Some(0.001), false);
        }
    }
    panic!("the scheduler did not finish");
}

/// As `drain`, with each step planned and run before the results of the one before are
/// applied (the engine's overlap): advance, schedule the next, run it, then update.
fn drain_ahead(s: &mut Scheduler, model: &mut FakeModel) -> Vec<FinishedSample> {
    let mut out = Vec::new();
    type Step = (StepPlan, (Vec<DrawResult>, Vec<ScoreResult>));
    let mut in_flight: Option<Step> = None;
    let mut last_draws: Vec<DrawResult> = Vec::new();
    for _ in 0..100_000 {
        let (plan, results) = match in_flight.take() {
            Some(step) => step,
            None => {
                if !s.has_work() {
                    return out;
                }
                let plan = s.schedule();
                assert!(!plan.is_empty(), "work is queued but nothing was scheduled");
                let results = model.run_after(&plan, &last_draws);
                last_draws = results.0.clone();
                (plan, results)
            }
        };
        s.advance(&plan);
        let next = s.schedule();
        if !next.is_empty() {
            assert!(next.num_tokens() <= s.config().max_batch_tokens);
            let results = model.run_after(&next, &last_draws);
            last_draws = results.0.clone();
            in_flight = Some((next, results));
        }
        out.extend(s.update(&plan, &results.0, &results.1).unwrap());
        s.check().unwrap();
    }
    panic!("the scheduler did not finish");
}

/// As `drain`, with the engine sleeping after steps `every`, `2 every` and `3 every`:
/// every running sequence preempted, the prefix cache forgotten and the model's KV memory
/// gone (a read of a slot written before the sleep fails), as `Engine::sleep` leaves them.
/// (Sleeping after every step for ever would never let a prompt longer than a step's
/// budget finish: each sleep sends it back to recompute.)
fn drain_sleeping(s: &mut Scheduler, model: &mut FakeModel, every: usize) -> Vec<FinishedSample> {
    let mut out = Vec::new();
    for step in 1..100_000 {
        if !s.has_work() {
            return out;
        }
        let plan = s.schedule();
        assert!(!plan.is_empty(), "work is queued but nothing was scheduled");
        let results = model.run(&plan);
        out.extend(s.update(&plan, &results.0, &results.1).unwrap());
        if step % every == 0 && step <= 3 * every {
            sleep(s, model);
        }
        s.check().unwrap();
    }
    panic!("the scheduler did not finish");
}

/// What an engine's sleep does to its scheduler and its KV memory.
fn sleep(s: &mut Scheduler, model: &mut FakeModel) {
    s.preempt_all();
    s.reset_prefix_cache();
    assert_eq!(
        s.pool().num_used(),
        0,
        "a sleeping engine's pool holds nothing"
    );
    model.slots.iter_mut().for_each(|slot| *slot = None);
}

fn by_sample(samples: Vec<FinishedSample>) -> BTreeMap<(u32, u32), (Vec<u32>, FinishReason)> {
    samples
        .into_iter()
        .map(|s| {
            (
                (s.request_index, s.sample_index),
                (s.token_ids, s.finish_reason),
            )
        })
        .collect()
}

#[test]
fn a_group_computes_its_prompt_once_and_shares_its_blocks() {
    let c = config(64, 16, 256);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, false);
    s.add_request(request(0, (1..=40).collect(), 4, 8)).unwrap();

    let plan = s.schedule();
    assert_eq!(plan.chunks.len(), 1);
    assert_eq!(plan.chunks[0].tokens.len(), 40);
    assert_eq!(plan.draws.len(), 4);
    assert!(plan.draws.iter().all(|d| d.position == 40));
    let table = plan.chunks[0].block_table.clone();
    assert_eq!(table, vec![0, 1, 2]);
    let results = model.run(&plan);
    s.update(&plan, &results.0, &results.1).unwrap();
    s.check().unwrap();
    // Four samples hold the three prompt blocks.
    for &b in &table {
        assert_eq!(s.pool().ref_count(b), 4);
    }
    assert_eq!(s.num_running(), 4);

    // Their first decodes write into the shared partial block: three copy it, the last
    // one (alone on it by then) writes in place.
    let plan = s.schedule();
    assert_eq!(plan.chunks.len(), 4);
    assert_eq!(plan.copies.len(), 3);
    assert!(plan.copies.iter().all(|c| c.src == 2));
    assert_eq!(plan.chunks[3].block_table, vec![0, 1, 2]);
    let results = model.run(&plan);
    s.update(&plan, &results.0, &results.1).unwrap();
    s.check().unwrap();
    assert_eq!(s.pool().ref_count(0), 4);
    assert_eq!(s.pool().ref_count(2), 1);

    let out = drain(&mut s, &mut model);
    assert_eq!(out.len(), 4);
    assert_eq!(s.stats().prefill_tokens_computed, 40);
    assert_eq!(s.stats().generated_tokens, 32);
    assert_eq!(s.pool().num_used(), 0);
    // Different sample indices draw differently.
    let distinct: std::collections::HashSet<_> = out.iter().map(|s| &s.token_ids).collect();
    assert_eq!(distinct.len(), 4);
}

#[test]
fn identical_prompts_arriving_together_compute_their_prefix_once() {
    // Eight requests with one 40-token prompt (two full blocks and a part), as eight
    // clients sending the same prompt at once: the first computes the prompt, the others
    // wait a step and take its two full blocks from the cache, computing only the last
    // part block. A different prompt queued behind them is not held up.
    let mut c = config(64, 16, 512);
    c.max_num_seqs = 16;
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, true);
    let prompt: Vec<u32> = (100..140).collect();
    for index in 0..8 {
        s.add_request(request(index, prompt.clone(), 1, 4)).unwrap();
    }
    let other: Vec<u32> = (200..220).collect();
    s.add_request(request(8, other, 1, 4)).unwrap();

    let plan = s.schedule();
    let starts: Vec<(usize, usize)> = plan
        .chunks
        .iter()
        .map(|c| (c.start, c.tokens.len()))
        .collect();
    assert_eq!(
        starts,
        vec![(0, 40), (0, 20)],
        "the first copy and the other prompt"
    );
    let results = model.run(&plan);
    let mut finished = s.update(&plan, &results.0, &results.1).unwrap();

    let plan = s.schedule();
    let waiting: Vec<(usize, usize)> = plan
        .chunks
        .iter()
        .filter(|c| c.is_prefill)
        .map(|c| (c.start, c.tokens.len()))
        .collect();
    assert_eq!(
        waiting,
        vec![(32, 8); 7],
        "the copies start from the cached blocks"
    );
    let results = model.run(&plan);
    finished.extend(s.update(&plan, &results.0, &results.1).unwrap());
    finished.extend(drain(&mut s, &mut model));
    assert_eq!(finished.len(), 9, "every request finishes");
    assert_eq!(s.stats().prefill_tokens_computed, 40 + 20 + 7 * 8);
    assert_eq!(s.stats().prefix_cache_hit_tokens, 7 * 32);
    assert_eq!(s.pool().num_used(), 0);
}

#[test]
fn a_later_request_reuses_a_cached_prefix() {
    let c = config(64, 16, 256);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, true);
    let system: Vec<u32> = (100..132).collect(); // two full blocks
    let mut a = system.clone();
    a.extend([7, 8, 9]);
    let first = s.add_request(request(0, a, 1, 4)).unwrap();
    assert_eq!(s.cached_prompt_tokens(first), None, "not admitted yet");
    let plan = s.schedule();
    assert_eq!(s.cached_prompt_tokens(first), Some(0));
    assert_eq!(s.stats().prefix_cache_query_tokens, 35);
    let results = model.run(&plan);
    s.update(&plan, &results.0, &results.1).unwrap();
    drain(&mut s, &mut model);
    assert_eq!(s.cached_prompt_tokens(first), None, "finished");
    assert_eq!(s.stats().prefix_cache_hit_tokens, 0);

    let mut b = system.clone();
    b.extend([5, 6, 7, 8, 9]);
    let second = s.add_request(request(1, b, 2, 4)).unwrap();
    let plan = s.schedule();
    assert_eq!(plan.chunks[0].start, 32);
    assert_eq!(plan.chunks[0].tokens, vec![5, 6, 7, 8, 9]);
    assert_eq!(s.stats().prefix_cache_hit_tokens, 32);
    assert_eq!(s.stats().prefix_cache_query_tokens, 35 + 37);
    assert_eq!(s.cached_prompt_tokens(second), Some(32));
    let results = model.run(&plan);
    s.update(&plan, &results.0, &results.1).unwrap();
    drain(&mut s, &mut model);
    assert_eq!(s.stats().prefill_tokens_computed, 35 + 5);
}

#[test]
fn a_fully_cached_prompt_still_computes_its_last_token() {
    let c = config(64, 16, 256);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, true);
    let prompt: Vec<u32> = (1..=32).collect();
    s.add_request(request(0, prompt.clone(), 1, 1)).unwrap();
    drain(&mut s, &mut model);
    s.add_request(request(1, prompt, 1, 1)).unwrap();
    let plan = s.schedule();
    // Block 0 is a hit; block 1 is recomputed so that its last token's logits exist.
    assert_eq!(plan.chunks[0].start, 16);
    assert_eq!(plan.chunks[0].tokens.len(), 16);
}

#[test]
fn prefill_is_chunked_to_the_token_budget() {
    let c = config(64, 16, 8);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, false);
    s.add_request(request(0, (1..=20).collect(), 2, 3)).unwrap();
    let mut starts = Vec::new();
    while s.num_running() + s.num_waiting() > 0 {
        let plan = s.schedule();
        starts.extend(plan.chunks.iter().filter(|c| c.is_prefill).map(|c| c.start));
        let results = model.run(&plan);
        s.update(&plan, &results.0, &results.1).unwrap();
        s.check().unwrap();
    }
    assert_eq!(starts, vec![0, 8, 16]);
}

#[test]
fn a_tiny_pool_preempts_and_recomputes_to_the_same_outputs() {
    let prompts: Vec<Vec<u32>> = (0..4)
        .map(|p| (0..23).map(|i| 1 + (p * 7 + i) % 40).collect())
        .collect();
    let run = |num_blocks: usize, budget: usize| {
        let c = config(num_blocks, 4, budget);
        let mut s = Scheduler::new(c.clone());
        let mut model = FakeModel::new(&c, false);
        for (i, p) in prompts.iter().enumerate() {
            s.add_request(request(i as u32, p.clone(), 3, 20)).unwrap();
        }
        let out = drain(&mut s, &mut model);
        (outputs(out), s.stats().clone())
    };
    let (roomy, roomy_stats) = run(1000, 64);
    let (tight, tight_stats) = run(12, 64);
    let (chunked, _) = run(12, 5);
    assert_eq!(roomy_stats.preemptions, 0);
    assert!(tight_stats.preemptions > 0, "{tight_stats:?}");
    assert_eq!(roomy.len(), 12);
    assert_eq!(tight, roomy);
    assert_eq!(chunked, roomy);
}

#[test]
fn abort_returns_partial_output_and_frees_blocks() {
    let c = config(64, 16, 256);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, false);
    let id = s
        .add_request(request(0, (1..=10).collect(), 2, 50))
        .unwrap();
    for _ in 0..3 {
        let plan = s.schedule();
        let results = model.run(&plan);
        assert!(s.update(&plan, &results.0, &results.1).unwrap().is_empty());
    }
    let out = s.abort(id).unwrap();
    assert_eq!(out.len(), 2);
    for sample in &out {
        assert_eq!(sample.finish_reason, FinishReason::Abort);
        assert_eq!(sample.token_ids.len(), 3);
        assert_eq!(sample.logprobs.len(), 3);
    }
    assert!(!s.has_work());
    assert_eq!(s.pool().num_used(), 0);
    s.check().unwrap();
    assert_eq!(s.abort(id), Err(SchedError::UnknownRequest(id)));
}

#[test]
fn bad_requests_are_refused_with_a_reason() {
    let mut s = Scheduler::new(config(4, 16, 256));
    assert_eq!(
        s.add_request(request(0, vec![], 1, 4)),
        Err(SchedError::EmptyPrompt)
    );
    assert_eq!(
        s.add_request(request(0, vec![1], 0, 4)),
        Err(SchedError::NoSamples)
    );
    let err = s.add_request(request(0, vec![1; 60], 1, 10)).unwrap_err();
    assert!(
        matches!(err, SchedError::PoolTooSmall { need: 5, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("--kv-blocks"));
}

/// Teacher forcing a rollout's samples gives back exactly their log-probs, with the
/// prompt computed once per group, in a pool small enough to preempt, in small chunks.
#[test]
fn scoring_a_rollout_returns_its_logprobs() {
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|p| (0..21).map(|i| 1 + (p * 5 + i) % 40).collect())
        .collect();
    let c = config(1000, 4, 64);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, false);
    for (i, p) in prompts.iter().enumerate() {
        s.add_request(request(i as u32, p.clone(), 3, 15)).unwrap();
    }
    let rollout = drain(&mut s, &mut model);
    for (blocks, budget) in [(1000, 64), (10, 64), (10, 3)] {
        let c = config(blocks, 4, budget);
        let mut s = Scheduler::new(c.clone());
        let mut model = FakeModel::new(&c, true);
        for (i, p) in prompts.iter().enumerate() {
            let mut r = request(i as u32, p.clone(), 3, 15);
            let mut samples: Vec<_> = rollout
                .iter()
                .filter(|x| x.request_index == i as u32)
                .collect();
            samples.sort_by_key(|x| x.sample_index);
            r.forced = samples.iter().map(|x| x.token_ids.clone()).collect();
            s.add_request(r).unwrap();
        }
        let scored = drain(&mut s, &mut model);
        assert_eq!(scored.len(), rollout.len());
        for x in &scored {
            let want = rollout
                .iter()
                .find(|r| (r.request_index, r.sample_index) == (x.request_index, x.sample_index))
                .unwrap();
            assert_eq!(x.token_ids, want.token_ids);
            assert_eq!(
                x.logprobs, want.logprobs,
                "blocks {blocks}, budget {budget}"
            );
        }
        // Each prompt was computed once (and recomputed only after preemption).
        if blocks == 1000 {
            let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
            let completion: usize = rollout.iter().map(|x| x.token_ids.len() - 1).sum();
            assert_eq!(
                s.stats().prefill_tokens_computed,
                prompt_tokens + completion
            );
        } else {
            assert!(s.stats().preemptions > 0, "{:?}", s.stats());
        }
    }
}

/// Stop tokens are forbidden to the draws before `min_tokens` (and only those), and one
/// drawn anyway there does not end the sample.
#[test]
fn min_tokens_forbids_stop_tokens_until_reached() {
    let c = config(64, 4, 64);
    let mut s = Scheduler::new(c);
    let mut r = request(0, vec![5, 6, 7], 2, 8);
    r.params.min_tokens = 3;
    s.add_request(r).unwrap();
    let mut finished = Vec::new();
    while s.has_work() {
        let plan = s.schedule();
        for d in &plan.draws {
            let generated = d.position as usize - 3;
            let want: &[u32] = if generated < 3 { &[STOP] } else { &[] };
            let forbidden = &d.processing.forbidden;
            assert_eq!(forbidden, want, "draw at generated length {generated}");
        }
        // A model that draws the stop token whatever it is told.
        let results: Vec<DrawResult> = plan
            .draws
            .iter()
            .map(|_| DrawResult {
                token: STOP,
                logprob: -1.0,
                sampling_logprob: -1.0,
                top: vec![],
            })
            .collect();
        finished.extend(s.update(&plan, &results, &[]).unwrap());
        s.check().unwrap();
    }
    assert_eq!(finished.len(), 2);
    for f in finished {
        assert_eq!(f.token_ids, [STOP; 4]);
        assert_eq!(f.finish_reason, FinishReason::Stop);
    }
}

/// A caller can finish one sample between steps (a stop string): it comes back with what
/// it drew, its blocks are freed, and its siblings go on to the same tokens as without it.
#[test]
fn finishing_one_sample_leaves_its_siblings_unchanged() {
    let c = config(64, 4, 64);
    let run = |finish_early: bool| {
        let mut s = Scheduler::new(c.clone());
        let mut model = FakeModel::new(&c, false);
        let id = s
            .add_request(request(0, vec![5, 6, 7, 8, 9], 3, 10))
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..3 {
            let plan = s.schedule();
            let (draws, scores) = model.run(&plan);
            out.extend(s.update(&plan, &draws, &scores).unwrap());
        }
        if finish_early {
            assert_eq!(s.generated(id, 1).map(<[u32]>::len), Some(3));
            let f = s.finish_sample(id, 1, FinishReason::Stop).unwrap();
            assert_eq!((f.sample_index, f.token_ids.len()), (1, 3));
            assert_eq!(f.finish_reason, FinishReason::Stop);
            assert_eq!(s.generated(id, 1), None);
            assert!(s.finish_sample(id, 1, FinishReason::Stop).is_err());
            s.check().unwrap();
            out.push(f);
        }
        out.extend(drain(&mut s, &mut model));
        assert_eq!(s.pool().num_used(), 0);
        assert!(!s.has_request(id));
        by_sample(out)
    };
    let (full, early) = (run(false), run(true));
    assert_eq!(early[&(0, 0)], full[&(0, 0)]);
    assert_eq!(early[&(0, 2)], full[&(0, 2)]);
    assert_eq!(early[&(0, 1)].0, full[&(0, 1)].0[..3]);
}

/// The fake model's score of each of `completion`'s tokens after `prompt` and the tokens
/// before it, computed without any paging.
fn expected_scores(prompt: &[u32], completion: &[u32]) -> Vec<ScoreResult> {
    let mut context: u64 = 0xcbf29ce484222325;
    for &x in prompt {
        context = (context ^ (x as u64 + 1)).wrapping_mul(0x100000001b3);
    }
    let mut out = Vec::new();
    for &t in completion {
        out.push(FakeModel::score(context, t));
        context = (context ^ (t as u64 + 1)).wrapping_mul(0x100000001b3);
    }
    out
}

/// A scored sample's log-probs and ranks, token by token (it has a rank per log-prob).
fn scores_of(sample: &FinishedSample) -> Vec<ScoreResult> {
    assert_eq!(
        sample.logprobs.len(),
        sample.ranks.len(),
        "a rank per log-prob"
    );
    let pairs = sample.logprobs.iter().zip(&sample.ranks);
    pairs
        .map(|(&logprob, &rank)| ScoreResult {
            logprob,
            rank,
            top: Vec::new(),
        })
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    Add {
        prefix: usize,
        extra: Vec<u32>,
        n: usize,
        max_tokens: usize,
        /// Score these completions (one per sample, cycled) instead of sampling.
        forced: Option<Vec<Vec<u32>>>,
        /// The request's cache salt: none, or one of two.
        salt: Option<bool>,
    },
    Step,
    Abort(usize),
    /// Finish sample `.1` of request `.0` between steps, as a stop string does.
    FinishSample(usize, u32),
    /// The engine sleeps: every running sequence preempted, the KV memory gone.
    Sleep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            0usize..3,
            prop::collection::vec(1u32..6, 1..20),
            1usize..4,
            1usize..12,
            prop::option::weighted(
                0.3,
                prop::collection::vec(prop::collection::vec(1u32..6, 1..12), 1..4)
            ),
            prop::option::weighted(0.3, any::<bool>()),
        )
            .prop_map(|(prefix, extra, n, max_tokens, forced, salt)| Op::Add {
                prefix,
                extra,
                n,
                max_tokens,
                forced,
                salt,
            }),
        Just(Op::Step),
        Just(Op::Step),
        Just(Op::Step),
        (0usize..8).prop_map(Op::Abort),
        (0usize..8, 0u32..3).prop_map(|(r, k)| Op::FinishSample(r, k)),
        Just(Op::Sleep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random adds (sampling and scoring requests, some with cache salts), steps, aborts, sleeps and early finishes under
    /// a small pool (so preemption happens): after every operation the reference counts
    /// equal the block-table uses, no block is both free and used, and the hash map is
    /// consistent; at the end every request has returned all its samples, every scored
    /// completion has the log-prob of each of its tokens as an unpaged model gives it, and
    /// the pool is empty.
    #[test]
    fn the_scheduler_keeps_its_invariants(
        ops in prop::collection::vec(op(), 1..60),
        num_blocks in 8usize..24,
        block_size in 1usize..5,
        budget in 1usize..24,
    ) {
        let c = config(num_blocks, block_size, budget);
        let mut s = Scheduler::new(c.clone());
        let mut model = FakeModel::new(&c, true);
        let prefixes: [Vec<u32>; 3] = [vec![], vec![9, 9, 8, 7, 9, 9], vec![9, 9, 8, 1]];
        let mut ids = Vec::new();
        let mut expected = 0;
        let mut got: Vec<FinishedSample> = Vec::new();
        for op in ops {
            match op {
                Op::Add { prefix, extra, n, max_tokens, forced, salt } => {
                    let mut prompt = prefixes[prefix].clone();
                    prompt.extend(extra);
                    let mut r = request(ids.len() as u32, prompt, n, max_tokens);
                    r.cache_salt = salt.map(|b| format!("salt-{b}"));
                    if let Some(forced) = forced {
                        r.forced = (0..n).map(|k| forced[k % forced.len()].clone()).collect();
                    }
                    match s.add_request(r.clone()) {
                        Ok(id) => {
                            ids.push((id, r));
                            expected += n;
                        }
                        Err(SchedError::PoolTooSmall { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Step => {
                    let plan = s.schedule();
                    prop_assert!(plan.num_tokens() <= budget);
                    prop_assert_eq!(plan.is_empty(), !s.has_work());
                    let results = model.run(&plan);
                    got.extend(s.update(&plan, &results.0, &results.1).unwrap());
                }
                Op::Abort(i) => {
                    if let Some((id, _)) = ids.get(i) {
                        match s.abort(*id) {
                            Ok(out) => got.extend(out),
                            Err(SchedError::UnknownRequest(_)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                Op::FinishSample(i, k) => {
                    if let Some((id, _)) = ids.get(i)
                        && s.generated(*id, k).is_some()
                    {
                        got.push(s.finish_sample(*id, k, FinishReason::Stop).unwrap());
                    }
                }
                Op::Sleep => sleep(&mut s, &mut model),
            }
            if let Err(e) = s.check() {
                return Err(TestCaseError::fail(e));
            }
        }
        got.extend(drain(&mut s, &mut model));
        prop_assert_eq!(got.len(), expected);
        prop_assert_eq!(s.pool().num_used(), 0);
        for sample in &got {
            let (_, r) = ids.iter().find(|(id, _)| *id == sample.request).unwrap();
            // Ranks are the scored tokens'; a drawn one has none.
            prop_assert!(!r.forced.is_empty() || sample.ranks.is_empty());
            if r.forced.is_empty() {
                continue;
            }
            let completion = &r.forced[sample.sample_index as usize];
            // Only aborts end a scoring sample early (`generated` is None for it): with
            // the tokens it had scored, each with its score.
            if sample.finish_reason == FinishReason::Abort {
                prop_assert!(completion.starts_with(&sample.token_ids));
                let expected = expected_scores(&r.prompt, completion);
                prop_assert_eq!(scores_of(sample), &expected[..sample.token_ids.len()]);
                continue;
            }
            prop_assert_eq!(&sample.token_ids, completion);
            prop_assert_eq!(scores_of(sample), expected_scores(&r.prompt, completion));
        }
    }
}

/// Everything a sample returns, by (request, sample), log-probs as bits.
type Outputs = BTreeMap<(u32, u32), (Vec<u32>, Vec<u32>, FinishReason)>;

fn outputs(samples: Vec<FinishedSample>) -> Outputs {
    samples
        .into_iter()
        .map(|s| {
            let bits = s.logprobs.iter().map(|l| l.to_bits()).collect();
            (
                (s.request_index, s.sample_index),
                (s.token_ids, bits, s.finish_reason),
            )
        })
        .collect()
}

/// Runs `requests` to the end, speculating (suffix drafts) when `speculate`; returns the
/// samples and the scheduler.
fn run_speculating(
    c: &SchedulerConfig,
    requests: &[Request],
    speculative: SpecMode,
    repetitive: bool,
) -> (Outputs, Scheduler) {
    let mut c = c.clone();
    c.speculative = speculative;
    let mut s = Scheduler::new(c.clone());
    s.set_speculating(true);
    let mut model = FakeModel::new(&c, true);
    model.repetitive = repetitive;
    for r in requests {
        match s.add_request(r.clone()) {
            Ok(_) | Err(SchedError::PoolTooSmall { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let out = drain(&mut s, &mut model);
    assert_eq!(s.pool().num_used(), 0, "every block is back");
    (outputs(out), s)
}

#[test]
fn drafts_of_repetitive_samples_are_accepted_and_change_nothing() {
    let mut c = config(64, 4, 256);
    c.max_num_seqs = 64; // rows enough for every draft
    let requests: Vec<Request> = (0..3)
        .map(|i| request(i, vec![3, 1, 4, 1, 5, 9, 2, 6], 4, 40))
        .collect();
    let (off, _) = run_speculating(&c, &requests, SpecMode::Off, true);
    let (on, s) = run_speculating(&c, &requests, SpecMode::Suffix, true);
    assert_eq!(on, off);
    // `auto`, where a step's cost is mostly fixed, drafts too, and changes nothing.
    let (auto, a) = run_speculating(&c, &requests, SpecMode::Auto, true);
    assert_eq!(auto, off);
    assert!(a.spec_stats().accepted_tokens > 0, "{:?}", a.spec_stats());
    let stats = s.spec_stats();
    assert!(stats.drafts > 0, "{stats:?}");
    let rate = stats.accepted_tokens as f64 / stats.drafted_tokens as f64;
    assert!(rate > 0.5, "acceptance {rate}: {stats:?}");
    // Fewer steps than one per token: accepted drafts made several tokens a step.
    let (_, plain) = run_speculating(&c, &requests, SpecMode::Off, true);
    let (steps, plain_steps) = (s.stats().steps, plain.stats().steps);
    assert!(
        steps < plain_steps,
        "{steps} steps, {plain_steps} without drafts"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Speculating with suffix drafts, always (`suffix`) or as `auto` decides, gives
    /// bitwise the samples of not speculating: with
    /// stop tokens, min_tokens, logit processors (each drafted row processed with the
    /// tokens before it, drafted ones included), groups forking, scoring requests, shared prefixes,
    /// chunked prefills and, under a small pool, preemption; on repetitive text (drafts
    /// often accepted) and on hashed text (mostly rejected).
    #[test]
    fn speculation_gives_the_same_samples(
        adds in prop::collection::vec(
            (
                0usize..3,
                prop::collection::vec(1u32..40, 1..20),
                1usize..4,
                1usize..30,
                0usize..4,
                prop::option::weighted(0.2, prop::collection::vec(1u32..40, 1..10)),
                prop::option::weighted(0.4, 0u8..3),
            ),
            1..8,
        ),
        num_blocks in 10usize..60,
        block_size in 1usize..5,
        budget in 1usize..24,
        repetitive in any::<bool>(),
    ) {
        let c = config(num_blocks, block_size, budget);
        let prefixes: [Vec<u32>; 3] = [vec![], vec![9, 9, 8, 7, 9, 9], vec![9, 9, 8, 1]];
        let requests: Vec<Request> = adds
            .into_iter()
            .enumerate()
            .map(|(i, (prefix, extra, n, max_tokens, min_tokens, forced, preset))| {
                let mut prompt = prefixes[prefix].clone();
                prompt.extend(extra);
                let mut r = request(i as u32, prompt, n, max_tokens);
                r.params.processing = processing(preset);
                r.params.min_tokens = min_tokens.min(max_tokens);
                r.params.stop_ids = vec![STOP, 3];
                if let Some(forced) = forced {
                    r.forced = vec![forced; n];
                }
                r
            })
            .collect();
        let (off, _) = run_speculating(&c, &requests, SpecMode::Off, repetitive);
        let (on, _) = run_speculating(&c, &requests, SpecMode::Suffix, repetitive);
        prop_assert_eq!(on, off.clone());
        let (auto, _) = run_speculating(&c, &requests, SpecMode::Auto, repetitive);
        prop_assert_eq!(auto, off);
    }

    /// Steps planned ahead give every sample exactly the tokens, log-probs and finish
    /// reason of steps planned one at a time: with stop tokens ending samples early (whose
    /// next rows are computed for nothing), logit processors (a penalised sample sits the
    /// planned-ahead step out), groups forking, scoring requests, shared
    /// prefixes, chunked prefills and, under a small pool, preemption, including of a
    /// sequence whose token is still being drawn. So does an engine that sleeps every few
    /// steps (its sequences preempted, its KV memory gone).
    #[test]
    fn steps_planned_ahead_and_sleeps_give_the_same_samples(
        adds in prop::collection::vec(
            (
                0usize..3,
                prop::collection::vec(1u32..40, 1..20),
                1usize..4,
                1usize..14,
                prop::option::weighted(0.2, prop::collection::vec(1u32..40, 1..10)),
                prop::option::weighted(0.4, 0u8..3),
            ),
            1..8,
        ),
        num_blocks in 10usize..40,
        block_size in 1usize..5,
        budget in 1usize..24,
        sleep_every in 1usize..6,
    ) {
        let c = config(num_blocks, block_size, budget);
        let prefixes: [Vec<u32>; 3] = [vec![], vec![9, 9, 8, 7, 9, 9], vec![9, 9, 8, 1]];
        let requests: Vec<Request> = adds
            .into_iter()
            .enumerate()
            .map(|(i, (prefix, extra, n, max_tokens, forced, preset))| {
                let mut prompt = prefixes[prefix].clone();
                prompt.extend(extra);
                let mut r = request(i as u32, prompt, n, max_tokens);
                r.params.processing = processing(preset);
                if let Some(forced) = forced {
                    r.forced = vec![forced; n];
                }
                r
            })
            .collect();
        let mut results = Vec::new();
        for way in ["one at a time", "ahead", "sleeping"] {
            let mut s = Scheduler::new(c.clone());
            let mut model = FakeModel::new(&c, true);
            for r in &requests {
                match s.add_request(r.clone()) {
                    Ok(_) | Err(SchedError::PoolTooSmall { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            let out = match way {
                "ahead" => drain_ahead(&mut s, &mut model),
                "sleeping" => drain_sleeping(&mut s, &mut model, sleep_every),
                _ => drain(&mut s, &mut model),
            };
            prop_assert_eq!(s.pool().num_used(), 0);
            results.push(outputs(out));
        }
        prop_assert_eq!(&results[0], &results[1]);
        prop_assert_eq!(&results[0], &results[2]);
    }
}

/// Samples that score the same completion, in a pool too small for all of them: a
/// preempted scorer finds its completion's blocks cached by a sibling, and must still
/// compute the positions whose logits it has not scored (it once skipped them and never
/// finished).
#[test]
fn a_recomputed_scorer_scores_every_target_despite_cached_siblings() {
    let c = config(16, 1, 3);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, true);
    let prompt: Vec<u32> = [9, 9, 8, 1].into_iter().chain([1; 10]).collect();
    let mut r = request(0, prompt.clone(), 3, 1);
    r.forced = vec![vec![1, 1, 1]; 3];
    s.add_request(r).unwrap();
    let out = drain(&mut s, &mut model);
    assert!(s.stats().preemptions > 0, "{:?}", s.stats());
    assert_eq!(out.len(), 3);
    for sample in out {
        assert_eq!(scores_of(&sample), expected_scores(&prompt, &[1, 1, 1]));
    }
}

/// vLLM's `cache_salt`: a request reuses a cached prefix only from requests of its own
/// salt (unsalted ones share among themselves), and its forks (the samples) keep it.
#[test]
fn a_cache_salt_shares_blocks_only_within_the_salt() {
    let c = config(64, 16, 256);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, true);
    let prompt: Vec<u32> = (100..135).collect(); // two full blocks and three tokens
    let salted = |index: u32, salt: Option<&str>| Request {
        cache_salt: salt.map(str::to_string),
        ..request(index, prompt.clone(), 2, 4)
    };
    // Each request runs alone, so that the ones before it have cached their blocks.
    let order = [
        (Some("policy-1"), 0),
        (Some("policy-1"), 32),
        (Some("policy-2"), 0),
        (None, 0),
        (None, 32),
        (Some("policy-2"), 32),
        (Some(""), 0),
    ];
    for (i, (salt, hit)) in order.into_iter().enumerate() {
        let id = s.add_request(salted(i as u32, salt)).unwrap();
        let plan = s.schedule();
        assert_eq!(
            s.cached_prompt_tokens(id),
            Some(hit),
            "request {i} with salt {salt:?}"
        );
        let results = model.run(&plan);
        s.update(&plan, &results.0, &results.1).unwrap();
        let finished = drain(&mut s, &mut model);
        assert_eq!(finished.len(), 2, "request {i}: both samples finish");
        s.check().unwrap();
    }
}

/// A request run with the LoRA adapter reuses a cached prefix only from requests of the
/// same adapter contents and version (base requests share among themselves), its chunks
/// say it runs with the adapter, and its tokens are labelled with the adapter's version
/// rather than the weights'. Without an adapter, such a request is refused.
#[test]
fn a_lora_adapter_shares_blocks_only_within_its_contents_and_version() {
    let c = config(64, 16, 256);
    let mut s = Scheduler::new(c.clone());
    let mut model = FakeModel::new(&c, true);
    let prompt: Vec<u32> = (100..135).collect(); // two full blocks and three tokens
    let with = |index: u32, lora: bool| Request {
        lora,
        ..request(index, prompt.clone(), 2, 4)
    };
    assert_eq!(s.add_request(with(0, true)), Err(SchedError::NoAdapter));
    let tag = |digest: &str, version| LoraTag {
        digest: digest.into(),
        version,
    };
    // (adapter in force, request runs with it, prompt tokens it should find cached)
    let order = [
        (Some(tag("aaaa", 1)), true, 0),
        (Some(tag("aaaa", 1)), true, 32),
        (Some(tag("aaaa", 1)), false, 0),
        (Some(tag("aaaa", 2)), true, 0),
        (Some(tag("bbbb", 2)), true, 0),
        (None, false, 32),
        (Some(tag("aaaa", 2)), true, 32),
    ];
    for (i, (adapter, lora, hit)) in order.into_iter().enumerate() {
        let version = adapter.as_ref().map_or(0, |t| t.version);
        s.set_lora(adapter);
        let id = s.add_request(with(i as u32, lora)).unwrap();
        let plan = s.schedule();
        assert!(plan.chunks.iter().all(|c| c.lora == lora), "request {i}");
        assert_eq!(s.cached_prompt_tokens(id), Some(hit), "request {i}");
        let results = model.run(&plan);
        s.update(&plan, &results.0, &results.1).unwrap();
        let finished = drain(&mut s, &mut model);
        assert_eq!(finished.len(), 2, "request {i}: both samples finish");
        let label = if lora { version } else { c.weights_version };
        for f in &finished {
            assert!(
                f.weights_versions.iter().all(|&v| v == label),
                "request {i}"
            );
        }
        s.check().unwrap();
    }
}
