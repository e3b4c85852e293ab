//! The step loop: plan (the scheduler, on the CPU) -> run (the GPU) -> update.
//!
//! An [`Engine`] owns a scheduler and a step runner over one loaded [`Decoder`]. Callers
//! add requests at any time (they join the batch as blocks allow) and call
//! [`Engine::step`] until [`Engine::has_work`] is false; each step reports the tokens it
//! drew (for streaming and progress) and the samples that finished.
//!
//! With `overlap` on (the default), the CPU plans and submits step N+1 while the GPU runs
//! step N: the scheduler advances past N with placeholders for N's draws
//! (`Scheduler::advance`), N+1's rows read those tokens on the GPU, and only then does the
//! engine wait for N's results and apply them. So one step is always in flight between
//! calls to `step`, each call returns one step's results, and a sample that ends on a stop
//! token has one more row computed for nothing. Outputs are bitwise those of running the
//! steps one at a time: every kernel computes a row the same way whatever shares its
//! batch, and draws are keyed by (seed, sample, position).
//!
//! The engine also owns the paged K and V memory on the GPU ([`paged_kv`]); the
//! scheduler decides which block holds what (`crate::kv`, `crate::sched`), and a forward
//! pass only borrows the pools. It can give that memory, and its weights', back to the
//! device while a trainer uses it, and take it again (`sleep`).

mod batch_inputs;
mod cpu_time;
mod pack;
pub mod paged_kv;
mod runner;
mod sizes;
mod sleep;
pub mod stop_strings;

pub use batch_inputs::BatchInputs;
pub use pack::PackedBatch;
pub use runner::{StepRunner, Submitted};
pub use sizes::{EngineSizes, sizes};
pub use sleep::SleepLevel;

use std::collections::HashMap;

use serde::Serialize;
use web_time::Instant;

use crate::error::SproutError;
use crate::gpu::Gpu;
use crate::kv::DEFAULT_BLOCK_SIZE;
use crate::model::decoder::Decoder;
use crate::model::decoder_weights::DecoderWeights;
use crate::model::lora::device::DeviceLora;
use crate::sched::{
    Adjusted, FinishReason, FinishedSample, LoraTag, Request, RequestId, Scheduler,
    SchedulerConfig, SchedulerStats, SpecStats, StepPlan, TopLogprob,
};
use crate::spec::SpecMode;
use crate::tokenizer::Tokenizer;
use paged_kv::PagedKv;

/// How much KV memory to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSize {
    /// Chosen from the adapter and the model ([`default_kv_memory`]).
    Auto,
    /// A budget in bytes over all layers, K and V.
    Memory(u64),
    /// An exact number of blocks.
    Blocks(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub block_size: usize,
    pub kv: KvSize,
    /// Tokens per step, at most.
    pub max_batch_tokens: usize,
    /// Sequences per step, at most (each drawing sequence needs a row of logits).
    pub max_num_seqs: usize,
    pub prefix_caching: bool,
    /// Names the weights in every block hash; change it when the weights change.
    pub weights_version: u64,
    /// Plan and submit each step while the GPU runs the one before.
    pub overlap: bool,
    /// Speculative decoding ([`crate::spec`]): a step with drafts is not overlapped with
    /// planning the next, whose tokens depend on how many drafted tokens it accepts.
    pub speculative: SpecMode,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            block_size: DEFAULT_BLOCK_SIZE,
            kv: KvSize::Auto,
            max_batch_tokens: 512,
            max_num_seqs: 128,
            prefix_caching: true,
            weights_version: 0,
            overlap: true,
            speculative: SpecMode::Off,
        }
    }
}

/// The default KV budget, by adapter kind (wgpu does not report memory sizes): 2 GiB on
/// a discrete GPU, 1 GiB on a CPU adapter (system memory), 512 MiB otherwise (integrated,
/// virtual, browser). [`Engine::new`] then caps the block count by the binding limit.
pub fn default_kv_memory(gpu: &Gpu) -> u64 {
    const MIB: u64 = 1 << 20;
    match gpu.adapter.device_type.as_str() {
        "discrete-gpu" => 2048 * MIB,
        "cpu" => 1024 * MIB,
        _ => 512 * MIB,
    }
}

/// A token drawn this step, with what its sample records for it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DrawnToken {
    pub request_index: u32,
    pub sample_index: u32,
    pub token: u32,
    /// Under the model (temperature 1).
    pub logprob: f32,
    /// Under the distribution it was drawn from.
    pub sampling_logprob: f32,
    /// The alternatives its request asked for (empty when none).
    pub top: Vec<TopLogprob>,
}

/// Where one step's wall time went, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StepTimings {
    /// Planning the step (the scheduler, on the CPU).
    pub schedule_s: f64,
    /// Packing the plan, writing the inputs and recording and submitting the commands.
    pub encode_s: f64,
    /// From the submit until the drawn tokens are back: the GPU's work and the read-back.
    pub gpu_s: f64,
    /// Applying the results (the scheduler and stop strings, on the CPU).
    pub update_s: f64,
}

impl std::ops::AddAssign for StepTimings {
    fn add_assign(&mut self, o: StepTimings) {
        self.schedule_s += o.schedule_s;
        self.encode_s += o.encode_s;
        self.gpu_s += o.gpu_s;
        self.update_s += o.update_s;
    }
}

/// What one step did.
#[derive(Clone, Debug, Default)]
pub struct StepOutput {
    pub drawn: Vec<DrawnToken>,
    pub finished: Vec<FinishedSample>,
    /// Tokens computed this step.
    pub tokens: usize,
    /// Whether every chunk of the step was a decode (no prompt computed).
    pub decode_only: bool,
    /// Kernel dispatches the step recorded.
    pub dispatches: usize,
    pub timings: StepTimings,
    /// The CPU time its thread spent recording and submitting the step (within
    /// `timings.encode_s`), where the platform measures it.
    pub encode_cpu_s: Option<f64>,
}

/// A step submitted to the GPU and not yet applied.
struct InFlight {
    plan: StepPlan,
    submitted: Submitted,
    schedule_s: f64,
}

pub struct Engine<'d> {
    decoder: &'d Decoder,
    scheduler: Scheduler,
    /// `None` while the KV cache sleeps (`sleep`): the pool and every step buffer freed.
    runner: Option<StepRunner>,
    overlap: bool,
    in_flight: Option<InFlight>,
    /// Reads samples' text for stop strings.
    tokenizer: Option<&'d Tokenizer>,
    /// The stop strings and min_tokens of the unfinished requests that have stop strings.
    stops: HashMap<RequestId, (Vec<String>, usize)>,
    /// The next step is planned with drafts (decided as the step before it ran).
    speculate_next: bool,
    /// The config's values used other than asked ([`sizes`]).
    adjusted: Vec<Adjusted>,
}

impl Drop for Engine<'_> {
    /// The device caches bind groups over the engine's buffers (its KV pools among them);
    /// forgetting them lets those buffers go with the engine.
    fn drop(&mut self) {
        self.decoder.gpu.forget_bind_groups();
    }
}

impl<'d> Engine<'d> {
    pub fn new(decoder: &'d Decoder, config: &EngineConfig) -> Result<Engine<'d>, SproutError> {
        let (gpu, c) = (&*decoder.gpu, &decoder.config);
        let EngineSizes {
            num_blocks,
            max_num_seqs,
            adjusted,
        } = sizes(gpu, c, config)?;
        let kv = PagedKv::new(gpu, c, num_blocks, config.block_size)?;
        let scheduler = Scheduler::new(SchedulerConfig {
            block_size: config.block_size,
            num_blocks,
            max_batch_tokens: config.max_batch_tokens,
            max_num_seqs,
            max_model_len: decoder.max_positions(),
            weights_version: config.weights_version,
            prefix_caching: config.prefix_caching,
            speculative: config.speculative,
        });
        let runner = StepRunner::new(decoder, kv, config.max_batch_tokens, max_num_seqs);
        let mut scheduler = scheduler;
        scheduler.set_lora(decoder.adapter().map(|a| LoraTag {
            digest: a.digest.clone(),
            version: a.version,
        }));
        Ok(Engine {
            decoder,
            scheduler,
            runner: Some(runner),
            overlap: config.overlap,
            in_flight: None,
            tokenizer: None,
            stops: HashMap::new(),
            speculate_next: false,
            adjusted,
        })
    }

    /// Gives the engine the model's tokenizer, which requests with stop strings need.
    pub fn with_tokenizer(mut self, tokenizer: &'d Tokenizer) -> Engine<'d> {
        self.tokenizer = Some(tokenizer);
        self
    }

    pub fn decoder(&self) -> &Decoder {
        self.decoder
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn stats(&self) -> &SchedulerStats {
        self.scheduler.stats()
    }

    pub fn num_blocks(&self) -> usize {
        self.scheduler.config().num_blocks
    }

    /// The config's values this engine uses other than asked (a KV budget past what the
    /// adapter binds, `max_num_seqs` past `max_batch_tokens`), for the caller to report.
    pub fn adjusted(&self) -> &[Adjusted] {
        &self.adjusted
    }

    /// The values `request` would run with other than asked (a `max_tokens` past the
    /// model's context, a `top_k` past its vocabulary), for the caller to report.
    pub fn request_adjustments(&self, request: &Request) -> Vec<Adjusted> {
        crate::sched::request_adjustments(
            request.prompt.len(),
            &request.params,
            self.decoder.max_positions(),
            self.decoder.config.vocab_size,
        )
    }

    pub fn has_work(&self) -> bool {
        self.in_flight.is_some() || self.scheduler.has_work()
    }

    /// Queues a request after checking its tokens (the prompt's, the completions' and those
    /// its sampling parameters name) against the vocabulary.
    pub fn add_request(&mut self, request: Request) -> Result<RequestId, SproutError> {
        let vocab = self.decoder.config.vocab_size;
        if let Some(bad) = request.prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(SproutError::Shape(format!(
                "prompt token {bad} is outside the vocabulary of {vocab}"
            )));
        }
        if let Some(bad) = request
            .forced
            .iter()
            .flatten()
            .find(|&&id| id as usize >= vocab)
        {
            return Err(SproutError::Shape(format!(
                "completion token {bad} is outside the vocabulary of {vocab}"
            )));
        }
        request
            .params
            .validate_tokens(vocab)
            .map_err(crate::sched::SchedError::from)?;
        if !request.params.stop.is_empty() && self.tokenizer.is_none() {
            return Err(SproutError::Shape(
                "stop strings need the engine to have the tokenizer (Engine::with_tokenizer)"
                    .into(),
            ));
        }
        let stops = (request.params.stop.clone(), request.params.min_tokens);
        let id = self.scheduler.add_request(request)?;
        if !stops.0.is_empty() {
            self.stops.insert(id, stops);
        }
        Ok(id)
    }

    /// Puts new `weights` (from `Decoder::load_update`) in force, labelled `version`: the
    /// steps planned from now on run under them and their tokens say so. The step in
    /// flight, if any, runs on under the old weights (wgpu keeps its buffers until it has
    /// run), and its tokens say that. The prefix cache's reusable blocks hold the old
    /// weights' K and V and are forgotten; blocks filled from now on are hashed with
    /// `version`, so no later prompt reuses one filled under other weights.
    ///
    /// A LoRA adapter in force stays, relabelled one version up: an adapter version names
    /// its contents over one base, so the tokens of its requests say which weights drew
    /// them. Returns the adapter's new version (`None` without one).
    pub fn update_weights(&mut self, weights: DecoderWeights, version: u64) -> Option<u64> {
        self.decoder.replace_weights(weights);
        self.scheduler.set_weights_version(version);
        self.scheduler.reset_prefix_cache();
        let adapter = self.decoder.adapter()?;
        let relabelled = adapter.relabelled(adapter.version.saturating_add(1));
        let new_version = relabelled.version;
        self.put_lora(Some(relabelled));
        Some(new_version)
    }

    /// Puts `adapter` in force as the LoRA adapter requests with `lora` run with, from
    /// the next planned step on (`None`: none). Like a weights update, a step in flight
    /// runs on under the old one and its tokens say so; requests in flight with `lora`
    /// go on under the new one, their tokens labelled with its version. Blocks filled
    /// under the old adapter are never a prefix-cache hit for requests admitted from now
    /// on (`kv::BlockHash::lora_root`). Removing the adapter while a request with `lora`
    /// is unfinished is an error, and changes nothing.
    pub fn set_lora(&mut self, adapter: Option<DeviceLora>) -> Result<(), SproutError> {
        if adapter.is_none() && self.scheduler.has_lora_requests() {
            return Err(SproutError::Model(
                "requests running with the LoRA adapter are unfinished: abort or finish \
                 them before removing it"
                    .into(),
            ));
        }
        self.put_lora(adapter);
        Ok(())
    }

    /// Puts `adapter` in force (see [`Engine::set_lora`]), with no check.
    fn put_lora(&mut self, adapter: Option<DeviceLora>) {
        let tag = adapter.as_ref().map(|a| LoraTag {
            digest: a.digest.clone(),
            version: a.version,
        });
        self.decoder.set_adapter(adapter);
        if let Some(runner) = self.runner.as_mut() {
            runner.fit_lora(self.decoder);
        }
        self.scheduler.set_lora(tag);
    }

    /// Adds an earlier completion of `prompt` for speculative drafts (`--draft-corpus`).
    pub fn add_draft_corpus(&mut self, prompt: &[u32], completion: &[u32]) {
        self.scheduler.add_draft_corpus(prompt, completion);
    }

    /// Keeps finished samples as drafts for later requests with the same prompt (a
    /// server's corpus, cleared when the weights change).
    pub fn keep_draft_corpus(&mut self, on: bool) {
        self.scheduler.keep_draft_corpus(on);
    }

    /// What speculation did so far.
    pub fn spec_stats(&self) -> &SpecStats {
        self.scheduler.spec_stats()
    }

    /// The version the steps planned from now on are labelled with.
    pub fn weights_version(&self) -> u64 {
        self.scheduler.config().weights_version
    }

    /// Forgets the prefix cache's reusable entries; returns how many blocks it named.
    pub fn reset_prefix_cache(&mut self) -> usize {
        self.scheduler.reset_prefix_cache()
    }

    /// Stops a request now; returns its samples with what they had generated.
    pub fn abort(&mut self, id: RequestId) -> Result<Vec<FinishedSample>, SproutError> {
        Ok(self.scheduler.abort(id)?)
    }

    /// Finishes drawing sample `sample_index` of request `id` now (a caller's own length
    /// or stop rule) and returns it with `reason`. Call it between steps.
    pub fn finish_sample(
        &mut self,
        id: RequestId,
        sample_index: u32,
        reason: FinishReason,
    ) -> Result<FinishedSample, SproutError> {
        Ok(self.scheduler.finish_sample(id, sample_index, reason)?)
    }

    /// Runs one step: applies its results and returns them. With overlap, the step after
    /// it has been planned and submitted by then. An error, changing nothing, while the
    /// engine sleeps.
    pub async fn step(&mut self) -> Result<StepOutput, SproutError> {
        self.step_with(true).await
    }

    /// Applies the step in flight, if any, without planning another: then no step holds
    /// the engine's buffers and the GPU has nothing of its to run. Returns what that step
    /// did (nothing when none was in flight).
    pub async fn settle(&mut self) -> Result<StepOutput, SproutError> {
        match self.in_flight {
            Some(_) => self.step_with(false).await,
            None => Ok(StepOutput::default()),
        }
    }

    /// One step; `ahead`: the next may be planned and submitted while it runs.
    async fn step_with(&mut self, ahead: bool) -> Result<StepOutput, SproutError> {
        let started = Instant::now();
        if self.in_flight.is_none() {
            self.check_awake()?;
        }
        let current = match self.in_flight.take() {
            Some(step) => step,
            None => {
                self.scheduler.set_speculating(self.speculate_next);
                match self.plan_and_submit(false)? {
                    Some(step) => step,
                    None => return Ok(StepOutput::default()),
                }
            }
        };
        // Plan and submit the next step before waiting for this one, unless this one
        // verifies drafts or the next should (a draft needs its sample's last token).
        // Profiling reads each step's timestamps back as it submits, so there is nothing
        // to overlap then.
        let drafted = current.plan.chunks.iter().any(|c| c.drafted > 0);
        self.speculate_next = self.scheduler.wants_speculation();
        let overlapped = ahead
            && self.overlap
            && !self.decoder.gpu.profiling()
            && !drafted
            && !self.speculate_next;
        if overlapped {
            self.scheduler.set_speculating(false);
            self.scheduler.advance(&current.plan);
            self.in_flight = self.plan_and_submit(true)?;
        }
        let plan = &current.plan;
        let runner = self.runner.as_mut().ok_or_else(sleep::kv_asleep)?;
        let (results, scores, run) = runner.finish(self.decoder, current.submitted).await?;
        let updating = Instant::now();
        let mut finished = self.scheduler.update(plan, &results, &scores)?;
        let rejected = self.scheduler.rejected_draws();
        let drawn: Vec<DrawnToken> = plan
            .draws
            .iter()
            .zip(&results)
            .enumerate()
            .filter(|(d, _)| !rejected.contains(d))
            .map(|(_, (d, r))| DrawnToken {
                request_index: d.request_index,
                sample_index: d.sample_index,
                token: r.token,
                logprob: r.logprob,
                sampling_logprob: r.sampling_logprob,
                top: r.top.clone(),
            })
            .collect();
        let applied = applied_draws(plan, rejected);
        self.apply_stop_strings(&applied, &mut finished)?;
        let update_s = updating.elapsed().as_secs_f64();
        // What the step cost, for `--speculative auto`: a step not overlapped exposes its
        // CPU work; an overlapped one hides it behind the GPU's.
        let step_s = started.elapsed().as_secs_f64();
        // A step that computes prompt tokens spends far longer on the CPU than one that
        // only decodes, and only decoding steps carry drafts: their CPU time is the one
        // that counts.
        let decode_only = plan.chunks.iter().all(|c| !c.is_prefill);
        let cpu_s = current.schedule_s + run.encode_s + update_s;
        self.scheduler.record_step_cost(
            plan.num_tokens(),
            step_s,
            decode_only.then_some(cpu_s),
            overlapped,
        );
        Ok(StepOutput {
            drawn,
            finished,
            tokens: plan.num_tokens(),
            decode_only,
            dispatches: run.dispatches,
            encode_cpu_s: run.encode_cpu_s,
            timings: StepTimings {
                schedule_s: current.schedule_s,
                encode_s: run.encode_s,
                gpu_s: run.gpu_s,
                update_s,
            },
        })
    }

    /// Plans the next step and submits it; `None` when there is nothing to run. `ahead`:
    /// planned before the step in flight is applied, when nothing may be ready to run (its
    /// samples wait for their tokens, or all end with them).
    fn plan_and_submit(&mut self, ahead: bool) -> Result<Option<InFlight>, SproutError> {
        let started = Instant::now();
        let plan = self.scheduler.schedule();
        let schedule_s = started.elapsed().as_secs_f64();
        if plan.is_empty() {
            if self.scheduler.has_work() && !ahead {
                return Err(SproutError::Shape(
                    "the scheduler could not place any queued work (this is a bug)".into(),
                ));
            }
            return Ok(None);
        }
        let runner = self.runner.as_mut().ok_or_else(sleep::kv_asleep)?;
        let submitted = runner.submit(self.decoder, &plan)?;
        Ok(Some(InFlight {
            plan,
            submitted,
            schedule_s,
        }))
    }

    /// Finishes (or cuts, if they finished anyway) the samples that drew tokens this step
    /// (`applied`: each with how many) and whose text now holds one of their stop strings.
    /// With several new tokens, the first of them whose text holds one decides, as if
    /// they had come one step at a time.
    fn apply_stop_strings(
        &mut self,
        applied: &[(RequestId, u32, usize)],
        finished: &mut Vec<FinishedSample>,
    ) -> Result<(), SproutError> {
        let Some(tokenizer) = self.tokenizer else {
            return Ok(());
        };
        let decode = |ids: &[u32]| tokenizer.decode_with(ids, true);
        for &(request, k, new) in applied {
            let Some((stops, min_tokens)) = self.stops.get(&request) else {
                continue;
            };
            let done = finished
                .iter_mut()
                .find(|s| s.request == request && s.sample_index == k);
            if let Some(sample) = done {
                if sample.stopped_by.is_none() {
                    let cut = stop_strings::find_in_new(
                        &sample.token_ids,
                        new,
                        stops,
                        *min_tokens,
                        decode,
                    )?;
                    if let Some(cut) = cut {
                        stop_strings::apply(sample, cut);
                    }
                }
                continue;
            }
            let Some(tokens) = self.scheduler.generated(request, k) else {
                continue;
            };
            if let Some(cut) = stop_strings::find_in_new(tokens, new, stops, *min_tokens, decode)? {
                let mut sample = self
                    .scheduler
                    .finish_sample(request, k, FinishReason::Stop)?;
                stop_strings::apply(&mut sample, cut);
                finished.push(sample);
            }
        }
        let scheduler = &self.scheduler;
        self.stops.retain(|id, _| scheduler.has_request(*id));
        Ok(())
    }

    /// Steps until every request has finished; returns every sample, ordered by request
    /// index then sample index. `on_step` sees each step's output as it happens.
    pub async fn run_to_completion(
        &mut self,
        mut on_step: impl FnMut(&StepOutput),
    ) -> Result<Vec<FinishedSample>, SproutError> {
        let mut out = Vec::new();
        while self.has_work() {
            let step = self.step().await?;
            on_step(&step);
            out.extend(step.finished);
        }
        out.sort_by_key(|s| (s.request_index, s.sample_index));
        Ok(out)
    }
}

/// The samples that took tokens in `plan` (draws not in `rejected`), in the order of
/// their first draw, each with how many tokens it took.
fn applied_draws(plan: &StepPlan, rejected: &[usize]) -> Vec<(RequestId, u32, usize)> {
    let mut applied: Vec<(RequestId, u32, usize)> = Vec::new();
    for (d, draw) in plan.draws.iter().enumerate() {
        if rejected.contains(&d) {
            continue;
        }
        // A sample's draws are consecutive (one chunk), so only the last entry can match.
        match applied.last_mut() {
            Some((r, k, count)) if (*r, *k) == (draw.request, draw.sample_index) => *count += 1,
            _ => applied.push((draw.request, draw.sample_index, 1)),
        }
    }
    applied
}
