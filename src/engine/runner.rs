//! Executes a [`StepPlan`] on the GPU: block copies, one varlen forward pass, the draws.
//!
//! A step is recorded into one compute pass and submitted once ([`StepRunner::submit`]);
//! its results are read back later ([`StepRunner::finish`]), so the engine can plan and
//! submit the next step while the GPU runs this one. The inputs are written with
//! `queue.write_buffer` into buffers allocated up front (grown, rarely, when a step needs
//! more draws or table entries than any before), and only the drawn tokens, their
//! log-probabilities, the alternatives asked for and the scored tokens' ranks come back,
//! through a staging buffer: never the logits.
//!
//! The buffers a step's draws write and the CPU reads back come in two sets used in turn,
//! so that a step never overwrites what the step before it wrote before that is read: its
//! drawn tokens, which the next step's embedding may read on the GPU (the ids marked
//! `DRAWN`), and its staging buffer, which the CPU maps after the next step is submitted.
//!
//! After the forward pass, per logits row: softmax statistics (the raw log-probs), the
//! top alternatives (as many as the row's draws or targets ask), each target's rank (only
//! in steps that score), then the row's logit processing (`sched::RowProcessing`: bias and
//! penalties, then the allow-list, then the mask of forbidden tokens: stop tokens before
//! `min_tokens`, bad words), which therefore changes only the sampling distribution, then
//! truncation and the draws.
//! Each of those kernels runs once per chunk of the logits (`gpu::kernels::Logits`), so
//! a step may have as many logits rows as sequences, whatever the vocabulary.

use super::batch_inputs::{BatchInputs, Growable};
use super::pack::PackedBatch;
use super::paged_kv::PagedKv;
use crate::error::SproutError;
use crate::gpu::Gpu;
use crate::gpu::kernels::logit_adjust::{self, LogitAdjust};
use crate::gpu::kernels::mask::{self, KeepOnly};
use crate::gpu::kernels::sample::{self, Restore, RowParams, SampleKey};
use crate::gpu::kernels::softmax::{self, Extra, RowStats};
use crate::gpu::kernels::target_rank::{self, TargetRanks};
use crate::gpu::kernels::top_logprobs;
use crate::model::decoder::{Decoder, ForwardBuffers};
use crate::sched::{DrawResult, ScoreResult, StepPlan, TopLogprob};
use web_time::Instant;

// The embedding kernel resolves the ids the scheduler marks as drawn by the step before.
const _: () = assert!(crate::sched::DRAWN == crate::gpu::kernels::embedding::DRAWN);

/// The runner's share of a step's time, in seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTimings {
    /// Packing, writing inputs, recording and submitting.
    pub encode_s: f64,
    /// Waiting for the results once the CPU asked for them (with the next step already
    /// submitted, the GPU's work on this one partly overlaps the CPU's on that one).
    pub gpu_s: f64,
    /// Kernel dispatches recorded.
    pub dispatches: usize,
    /// The CPU time the recording thread spent in `encode_s`, where the platform measures
    /// it (`None` elsewhere).
    pub encode_cpu_s: Option<f64>,
}

/// What one step's draws write and the CPU reads back (one of two sets).
struct Outputs {
    tokens: Growable,
    logprobs: Growable,
    sampling_logprobs: Growable,
    top_ids: Growable,
    top_logprobs: Growable,
    ranks: Growable,
    staging: wgpu::Buffer,
    staging_size: u64,
}

impl Outputs {
    fn device_bytes(&self) -> u64 {
        let all = [
            &self.tokens,
            &self.logprobs,
            &self.sampling_logprobs,
            &self.top_ids,
            &self.top_logprobs,
            &self.ranks,
        ];
        all.iter().map(|g| g.bytes()).sum::<u64>() + self.staging.size()
    }

    fn new(gpu: &Gpu, max_r: usize) -> Outputs {
        Outputs {
            tokens: Growable::new(gpu, max_r),
            logprobs: Growable::new(gpu, max_r),
            sampling_logprobs: Growable::new(gpu, max_r),
            top_ids: Growable::new(gpu, 1),
            top_logprobs: Growable::new(gpu, 1),
            ranks: Growable::new(gpu, 1),
            staging: gpu.staging(8 * max_r as u64),
            staging_size: 8 * max_r as u64,
        }
    }
}

/// A step submitted to the GPU whose results have not been read yet.
pub struct Submitted {
    /// Which set of outputs it writes.
    set: usize,
    /// Bytes to read back.
    size: u64,
    draws: usize,
    targets: usize,
    /// Logits rows and alternatives per row.
    rows: usize,
    n_max: usize,
    /// Per draw, its logits row.
    draw_rows: Vec<u32>,
    /// Per draw, how many alternatives it asked for.
    draw_tops: Vec<usize>,
    /// Per target, its logits row, and how many alternatives it asked for.
    target_rows: Vec<u32>,
    target_tops: Vec<usize>,
    encode_s: f64,
    encode_cpu_s: Option<f64>,
    dispatches: usize,
}

pub struct StepRunner {
    kv: PagedKv,
    buffers: ForwardBuffers,
    packed: PackedBatch,
    inputs: BatchInputs,
    keys: Growable,
    row_params: Growable,
    cut: Growable,
    masked: Growable,
    adjusts: Growable,
    /// The adjusted logits as they were, and a scratch output for the draws.
    saved: Growable,
    scratch: Growable,
    keep_only: Growable,
    allowed: Growable,
    top_counts: Growable,
    /// Per target, its (logits row, token), for the ranks.
    rank_targets: Growable,
    stats: RowStats,
    outputs: [Outputs; 2],
    /// The set the next step writes.
    next_set: usize,
}

impl StepRunner {
    /// Buffers for steps of up to `max_t` tokens and `max_r` sequences that draw.
    pub fn new(decoder: &Decoder, kv: PagedKv, max_t: usize, max_r: usize) -> StepRunner {
        let gpu = &*decoder.gpu;
        StepRunner {
            kv,
            buffers: ForwardBuffers::new(decoder, max_t, max_r),
            packed: PackedBatch::default(),
            inputs: BatchInputs::new(gpu, max_t, max_r),
            keys: Growable::new(gpu, max_r * size_of::<SampleKey>() / 4),
            row_params: Growable::new(gpu, max_r * size_of::<RowParams>() / 4),
            cut: Growable::new(gpu, 2 * max_r),
            masked: Growable::new(gpu, 2),
            adjusts: Growable::new(gpu, size_of::<LogitAdjust>() / 4),
            saved: Growable::new(gpu, 1),
            scratch: Growable::new(gpu, max_r),
            keep_only: Growable::new(gpu, size_of::<KeepOnly>() / 4),
            allowed: Growable::new(gpu, 1),
            top_counts: Growable::new(gpu, max_r),
            rank_targets: Growable::new(gpu, 1),
            stats: RowStats::zeros(gpu, max_r),
            outputs: [Outputs::new(gpu, max_r), Outputs::new(gpu, max_r)],
            next_set: 0,
        }
    }

    /// Makes the step buffers' LoRA scratch wide enough for `decoder`'s adapter.
    pub fn fit_lora(&mut self, decoder: &Decoder) {
        self.buffers.fit_lora(decoder);
    }

    pub fn kv(&self) -> &PagedKv {
        &self.kv
    }

    /// Bytes the runner holds on the device: the KV pool, the forward pass's buffers, the
    /// batch's inputs and the draws' outputs.
    pub fn device_bytes(&self) -> u64 {
        let growables = [
            &self.keys,
            &self.row_params,
            &self.cut,
            &self.masked,
            &self.adjusts,
            &self.saved,
            &self.scratch,
            &self.keep_only,
            &self.allowed,
            &self.top_counts,
            &self.rank_targets,
        ];
        let stats = self.stats.argmax.buffer.size() + self.stats.stats.buffer.size();
        let outputs: u64 = self.outputs.iter().map(Outputs::device_bytes).sum();
        self.kv.device_bytes()
            + self.buffers.device_bytes()
            + self.inputs.device_bytes()
            + growables.iter().map(|g| g.bytes()).sum::<u64>()
            + stats
            + outputs
    }

    /// Runs `plan` and returns one result per draw and one per target, in the plan's order.
    pub async fn run(
        &mut self,
        decoder: &Decoder,
        plan: &StepPlan,
    ) -> Result<(Vec<DrawResult>, Vec<ScoreResult>, RunTimings), SproutError> {
        let submitted = self.submit(decoder, plan)?;
        self.finish(decoder, submitted).await
    }

    /// Records `plan` and submits it. Its ids may name the draws of the step submitted
    /// just before (`DRAWN | d`).
    pub fn submit(&mut self, decoder: &Decoder, plan: &StepPlan) -> Result<Submitted, SproutError> {
        let started = Instant::now();
        let cpu_started = super::cpu_time::thread_seconds();
        let gpu = &*decoder.gpu;
        let max_pos = decoder.max_positions();
        if let Some(c) = plan.chunks.iter().find(|c| c.end() > max_pos) {
            return Err(SproutError::Shape(format!(
                "position {} is past the model's context of {max_pos} tokens",
                c.end() - 1
            )));
        }
        let split = decoder.attention_variant(plan.num_tokens()).split;
        self.packed.pack(plan, self.kv.block_size, split);
        let p = &self.packed;
        let r = p.logit_rows.len();
        let (d, n_targets) = (plan.draws.len(), plan.targets.len());
        // Draws first, then targets: a target is scored like a draw whose token is given.
        let m = d + n_targets;
        self.inputs.write(gpu, p);
        let mut keys: Vec<SampleKey> = plan
            .draws
            .iter()
            .zip(&p.draw_rows)
            .map(|(draw, &row)| {
                SampleKey::new(
                    draw.seed,
                    draw.key_index,
                    draw.sample_index,
                    draw.position,
                    row,
                )
            })
            .collect();
        keys.extend(
            p.target_rows
                .iter()
                .map(|&row| SampleKey::new(0, 0, 0, 0, row)),
        );
        self.keys.write(gpu, &keys);
        // The draws of one logits row come from one request: they share its params.
        let mut row_params = vec![RowParams::temperature(1.0); r];
        for (draw, &row) in plan.draws.iter().zip(&p.draw_rows) {
            row_params[row as usize] =
                RowParams::new(draw.temperature, draw.top_k, draw.top_p, draw.min_p);
        }
        self.row_params.write(gpu, &row_params);
        self.cut.reserve(gpu, 2 * r);
        // Alternatives: `n_max` per logits row (rows asking for fewer pad theirs).
        let n_max = p.top_counts.iter().copied().max().unwrap_or(0) as usize;
        if n_max > 0 {
            self.top_counts.write(gpu, &p.top_counts);
        }
        if !p.masked.is_empty() {
            self.masked.write(gpu, &p.masked);
        }
        let adjusts: Vec<LogitAdjust> = p
            .adjusts
            .iter()
            .map(|&(row, a)| LogitAdjust::new(row, a.token, a.bias, a.repetition, a.subtract))
            .collect();
        if !adjusts.is_empty() {
            self.adjusts.write(gpu, &adjusts);
            self.saved.reserve(gpu, adjusts.len());
            self.scratch.reserve(gpu, m);
        }
        if !p.keep_only.is_empty() {
            let mut allowed: Vec<u32> = Vec::new();
            let specs: Vec<KeepOnly> = p
                .keep_only
                .iter()
                .map(|(row, ids)| {
                    let first = allowed.len() as u32;
                    allowed.extend_from_slice(ids);
                    KeepOnly {
                        row: *row,
                        first,
                        count: ids.len() as u32,
                        reserved: 0,
                    }
                })
                .collect();
            self.keep_only.write(gpu, &specs);
            self.allowed.write(gpu, &allowed);
        }
        let set = self.next_set;
        self.next_set = 1 - set;
        // The step before wrote the other set; its drawn tokens are what `DRAWN` ids name.
        let [a, b] = &mut self.outputs;
        let (out, before) = if set == 0 { (a, &*b) } else { (b, &*a) };
        out.tokens.reserve(gpu, m);
        out.logprobs.reserve(gpu, m);
        out.sampling_logprobs.reserve(gpu, m);
        if n_targets > 0 {
            let given: Vec<u32> = plan.targets.iter().map(|t| t.token).collect();
            let at = 4 * d as u64;
            let buffer = &out.tokens.tensor.buffer;
            gpu.queue
                .write_buffer(buffer, at, bytemuck::cast_slice(&given));
            let pairs: Vec<[u32; 2]> = plan
                .targets
                .iter()
                .zip(&p.target_rows)
                .map(|(t, &row)| [row, t.token])
                .collect();
            self.rank_targets.write(gpu, &pairs);
            out.ranks.reserve(gpu, n_targets);
        }
        if n_max > 0 {
            out.top_ids.reserve(gpu, r * n_max);
            out.top_logprobs.reserve(gpu, r * n_max);
        }
        // Read back: drawn tokens [d], log-probs [m], sampling log-probs [d], the
        // alternatives' ids and log-probs [r, n_max] each, then the targets' ranks.
        let words = 3 * d + n_targets + 2 * r * n_max + n_targets;
        let size = 4 * words as u64;
        if size > out.staging_size {
            out.staging_size = size.next_power_of_two();
            out.staging = gpu.staging(out.staging_size);
        }

        let mut rec = gpu.recorder();
        for copy in &plan.copies {
            self.kv.encode_copy(rec.encoder(), copy.src, copy.dst);
        }
        let batch = self.inputs.view(p, Some(&before.tokens.tensor));
        decoder.encode_forward(&mut rec, &batch, self.kv.pools(), &self.buffers)?;
        if m > 0 {
            let logits = &self.buffers.logits;
            let (keys, tokens) = (&self.keys.tensor, &out.tokens.tensor);
            let stats = &self.stats;
            let (params, cut) = (&self.row_params.tensor, &self.cut.tensor);
            softmax::encode(gpu, &mut rec, logits, r, stats, Extra::Nothing);
            // Alternatives come from the model's own logits, so before any masking.
            if n_max > 0 {
                top_logprobs::encode(
                    gpu,
                    &mut rec,
                    logits,
                    stats,
                    &self.top_counts.tensor,
                    r,
                    n_max,
                    &out.top_ids.tensor,
                    &out.top_logprobs.tensor,
                );
            }
            // Ranks too: a step that only draws has no targets and records nothing here.
            if n_targets > 0 {
                let op = TargetRanks {
                    logits,
                    rows: r,
                    targets: &self.rank_targets.tensor,
                    n: n_targets,
                    ranks: &out.ranks.tensor,
                };
                target_rank::encode(gpu, &mut rec, &op);
            }
            // The processing changes the sampling distribution only: `stats` (hence the
            // raw log-probs) were taken above. The masks come last, so that a masked logit
            // stays exactly at its constant (a masked token's probability is 0 whatever
            // else is done to it: the distribution is vLLM's, whose masks come first).
            let (entries, saved) = (&self.adjusts.tensor, &self.saved.tensor);
            if !adjusts.is_empty() {
                logit_adjust::encode(gpu, &mut rec, logits, r, entries, adjusts.len(), saved);
            }
            if !p.keep_only.is_empty() {
                let (specs, allowed) = (&self.keep_only.tensor, &self.allowed.tensor);
                let n = p.keep_only.len();
                mask::encode_keep_only(gpu, &mut rec, logits, r, specs, n, allowed);
            }
            if !p.masked.is_empty() {
                let pairs = &self.masked.tensor;
                mask::encode(gpu, &mut rec, logits, r, pairs, p.masked.len());
            }
            sample::encode_truncate(gpu, &mut rec, logits, r, params, cut);
            sample::encode(gpu, &mut rec, logits, params, cut, keys, d, tokens);
            let logprobs = &out.logprobs.tensor;
            let sampling_logprobs = &out.sampling_logprobs.tensor;
            sample::encode_draw_logprobs(
                gpu,
                &mut rec,
                logits,
                stats,
                params,
                cut,
                keys,
                tokens,
                m,
                logprobs,
                sampling_logprobs,
                // The raw log-probs are read again once the adjusted logits are put back.
                (!adjusts.is_empty()).then_some(Restore {
                    rows: r,
                    adjusts: entries,
                    n: adjusts.len(),
                    saved,
                    scratch: &self.scratch.tensor,
                }),
            );
            let (d4, m4) = (4 * d as u64, 4 * m as u64);
            let staging = &out.staging;
            let enc = rec.encoder();
            enc.copy_buffer_to_buffer(&tokens.buffer, 0, staging, 0, d4);
            enc.copy_buffer_to_buffer(&logprobs.buffer, 0, staging, d4, m4);
            enc.copy_buffer_to_buffer(&sampling_logprobs.buffer, 0, staging, d4 + m4, d4);
            let (top_at, top_len) = (2 * d4 + m4, 4 * (r * n_max) as u64);
            if n_max > 0 {
                let (ids, lps) = (&out.top_ids.tensor, &out.top_logprobs.tensor);
                enc.copy_buffer_to_buffer(&ids.buffer, 0, staging, top_at, top_len);
                enc.copy_buffer_to_buffer(&lps.buffer, 0, staging, top_at + top_len, top_len);
            }
            if n_targets > 0 {
                let (at, len) = (top_at + 2 * top_len, 4 * n_targets as u64);
                enc.copy_buffer_to_buffer(&out.ranks.tensor.buffer, 0, staging, at, len);
            }
        }
        let dispatches = rec.dispatches();
        rec.submit();
        Ok(Submitted {
            set,
            size,
            draws: d,
            targets: n_targets,
            rows: r,
            n_max,
            draw_rows: p.draw_rows.clone(),
            draw_tops: plan.draws.iter().map(|d| d.top_logprobs).collect(),
            target_rows: p.target_rows.clone(),
            target_tops: plan.targets.iter().map(|t| t.top_logprobs).collect(),
            encode_s: started.elapsed().as_secs_f64(),
            encode_cpu_s: cpu_started
                .zip(super::cpu_time::thread_seconds())
                .map(|(a, b)| b - a),
            dispatches,
        })
    }

    /// Waits for a submitted step and returns one result per draw and one per target, in
    /// its plan's order.
    pub async fn finish(
        &mut self,
        decoder: &Decoder,
        s: Submitted,
    ) -> Result<(Vec<DrawResult>, Vec<ScoreResult>, RunTimings), SproutError> {
        let waiting = Instant::now();
        let staging = &self.outputs[s.set].staging;
        let bytes = decoder.gpu.read_staged(staging, s.size).await?;
        let timings = RunTimings {
            encode_s: s.encode_s,
            gpu_s: waiting.elapsed().as_secs_f64(),
            dispatches: s.dispatches,
            encode_cpu_s: s.encode_cpu_s,
        };
        // A Vec<u8> need not be aligned for u32: copy rather than cast.
        let w: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        let (d, m, r, n_max) = (s.draws, s.draws + s.targets, s.rows, s.n_max);
        let top_at = 2 * d + m;
        // Logits row `row`'s first `count` alternatives.
        let top = |row: u32, count: usize| -> Vec<TopLogprob> {
            let first = top_at + row as usize * n_max;
            (0..count)
                .map(|j| TopLogprob {
                    token: w[first + j],
                    logprob: f32::from_bits(w[first + r * n_max + j]),
                })
                .collect()
        };
        let draws = (0..d)
            .map(|i| {
                let top = top(s.draw_rows[i], s.draw_tops[i]);
                DrawResult {
                    token: w[i],
                    logprob: f32::from_bits(w[d + i]),
                    sampling_logprob: f32::from_bits(w[d + m + i]),
                    top,
                }
            })
            .collect();
        let ranks_at = top_at + 2 * r * n_max;
        let scores = (0..s.targets)
            .map(|i| ScoreResult {
                logprob: f32::from_bits(w[2 * d + i]),
                rank: w[ranks_at + i],
                top: top(s.target_rows[i], s.target_tops[i]),
            })
            .collect();
        Ok((draws, scores, timings))
    }
}
