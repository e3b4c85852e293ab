//! Executes a [`StepPlan`] on the GPU: block copies, one varlen forward pass, the draws.
//!
//! One step records one command encoder and submits once. The inputs are written with
//! `queue.write_buffer` into buffers allocated up front (grown, rarely, when a step needs
//! more draws or table entries than any before), and only the drawn tokens, their
//! log-probabilities and the alternatives asked for come back, through a reused staging
//! buffer: never the logits.
//!
//! After the forward pass, per logits row: softmax statistics (the raw log-probs), the
//! top alternatives, then the mask of forbidden tokens (stop tokens before `min_tokens`),
//! which therefore changes only the sampling distribution, then truncation and the draws.

use crate::error::SproutError;
use crate::gpu::kernels::sample::{self, RowParams, SampleKey};
use crate::gpu::kernels::softmax::{self, Extra, RowStats};
use crate::gpu::kernels::{mask, top_logprobs};
use crate::gpu::{Gpu, Tensor};
use crate::model::decoder::{AttentionWork, BatchView, Decoder, ForwardBuffers};
use crate::model::paged_kv::PagedKv;
use crate::sched::{DrawResult, StepPlan, TopLogprob};

use super::pack::PackedBatch;
use web_time::Instant;

/// The runner's share of a step's time, in seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTimings {
    /// Packing, writing inputs, recording and submitting.
    pub encode_s: f64,
    /// From the submit until the results are read back.
    pub gpu_s: f64,
    /// Kernel dispatches recorded.
    pub dispatches: usize,
}

/// A storage buffer that is replaced by a larger one when a step needs more room.
struct Growable {
    tensor: Tensor,
}

impl Growable {
    fn new(gpu: &Gpu, len: usize) -> Growable {
        Growable {
            tensor: gpu.zeros(len.max(1)),
        }
    }

    /// Makes room for `words` 32-bit values (growing to the next power of two).
    fn reserve(&mut self, gpu: &Gpu, words: usize) {
        if words > self.tensor.len {
            self.tensor = gpu.zeros(words.next_power_of_two());
        }
    }

    /// Writes `data` at the start, growing first if needed.
    fn write<T: bytemuck::Pod>(&mut self, gpu: &Gpu, data: &[T]) {
        self.reserve(gpu, std::mem::size_of_val(data) / 4);
        gpu.queue
            .write_buffer(&self.tensor.buffer, 0, bytemuck::cast_slice(data));
    }
}

pub struct StepRunner {
    kv: PagedKv,
    buffers: ForwardBuffers,
    packed: PackedBatch,
    ids: Growable,
    rowinfo: Growable,
    block_tables: Growable,
    attention_items: Growable,
    attention_combine: Growable,
    logit_rows: Growable,
    keys: Growable,
    row_params: Growable,
    cut: Growable,
    tokens: Growable,
    logprobs: Growable,
    sampling_logprobs: Growable,
    masked: Growable,
    top_counts: Growable,
    top_ids: Growable,
    top_logprobs: Growable,
    stats: RowStats,
    staging: wgpu::Buffer,
    staging_size: u64,
}

impl StepRunner {
    /// Buffers for steps of up to `max_t` tokens and `max_r` sequences that draw.
    pub fn new(decoder: &Decoder, kv: PagedKv, max_t: usize, max_r: usize) -> StepRunner {
        let gpu = &*decoder.gpu;
        StepRunner {
            kv,
            buffers: ForwardBuffers::new(decoder, max_t, max_r),
            packed: PackedBatch::default(),
            ids: Growable::new(gpu, max_t),
            rowinfo: Growable::new(gpu, 4 * max_t),
            block_tables: Growable::new(gpu, 4 * max_t),
            attention_items: Growable::new(gpu, 4 * max_t),
            attention_combine: Growable::new(gpu, 4 * max_r),
            logit_rows: Growable::new(gpu, max_r),
            keys: Growable::new(gpu, max_r * size_of::<SampleKey>() / 4),
            row_params: Growable::new(gpu, max_r * size_of::<RowParams>() / 4),
            cut: Growable::new(gpu, 2 * max_r),
            tokens: Growable::new(gpu, max_r),
            logprobs: Growable::new(gpu, max_r),
            sampling_logprobs: Growable::new(gpu, max_r),
            masked: Growable::new(gpu, 2),
            top_counts: Growable::new(gpu, max_r),
            top_ids: Growable::new(gpu, 1),
            top_logprobs: Growable::new(gpu, 1),
            stats: RowStats::zeros(gpu, max_r),
            staging: gpu.staging(8 * max_r as u64),
            staging_size: 8 * max_r as u64,
        }
    }

    pub fn kv(&self) -> &PagedKv {
        &self.kv
    }

    /// Runs `plan` and returns one result per draw and one log-prob per target, in the
    /// plan's order.
    pub async fn run(
        &mut self,
        decoder: &Decoder,
        plan: &StepPlan,
    ) -> Result<(Vec<DrawResult>, Vec<f32>, RunTimings), SproutError> {
        let started = Instant::now();
        let gpu = &*decoder.gpu;
        let vocab = decoder.config.vocab_size;
        let max_pos = decoder.max_positions();
        if let Some(c) = plan.chunks.iter().find(|c| c.end() > max_pos) {
            return Err(SproutError::Shape(format!(
                "position {} is past the model's context of {max_pos} tokens",
                c.end() - 1
            )));
        }
        let c = &decoder.config;
        let shape = decoder.attention_shape(1, self.kv.block_size);
        let rows = plan.num_tokens();
        let split = gpu.attention_variant(c.head_dim, shape.group(), rows).split;
        self.packed.pack(plan, self.kv.block_size, split);
        let p = &self.packed;
        let (t, r) = (p.ids.len(), p.logit_rows.len());
        let (d, n_targets) = (plan.draws.len(), plan.targets.len());
        // Draws first, then targets: a target is scored like a draw whose token is given.
        let m = d + n_targets;
        self.ids.write(gpu, &p.ids);
        self.rowinfo.write(gpu, &p.rowinfo);
        self.block_tables.write(gpu, &p.block_tables);
        self.attention_items.write(gpu, &p.attention.items);
        self.attention_combine.write(gpu, &p.attention.combine);
        self.logit_rows.write(gpu, &p.logit_rows);
        let mut keys: Vec<SampleKey> = plan
            .draws
            .iter()
            .zip(&p.draw_rows)
            .map(|(draw, &row)| {
                SampleKey::new(
                    draw.seed,
                    draw.request_index,
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
        if 2 * r > self.cut.tensor.len {
            self.cut = Growable::new(gpu, (2 * r).next_power_of_two());
        }
        if m > self.tokens.tensor.len {
            self.tokens = Growable::new(gpu, m.next_power_of_two());
            self.logprobs = Growable::new(gpu, m.next_power_of_two());
            self.sampling_logprobs = Growable::new(gpu, m.next_power_of_two());
        }
        if n_targets > 0 {
            let given: Vec<u32> = plan.targets.iter().map(|t| t.token).collect();
            let at = 4 * d as u64;
            gpu.queue
                .write_buffer(&self.tokens.tensor.buffer, at, bytemuck::cast_slice(&given));
        }
        // Alternatives: `n_max` per logits row (rows asking for fewer pad theirs).
        let n_max = p.top_counts.iter().copied().max().unwrap_or(0) as usize;
        if n_max > 0 {
            self.top_counts.write(gpu, &p.top_counts);
            self.top_ids.reserve(gpu, r * n_max);
            self.top_logprobs.reserve(gpu, r * n_max);
        }
        if !p.masked.is_empty() {
            self.masked.write(gpu, &p.masked);
        }
        // Read back: drawn tokens [d], log-probs [m], sampling log-probs [d], then the
        // alternatives' ids and log-probs [r, n_max] each.
        let words = 3 * d + n_targets + 2 * r * n_max;
        let size = 4 * words as u64;
        if size > self.staging_size {
            self.staging_size = size.next_power_of_two();
            self.staging = gpu.staging(self.staging_size);
        }

        let mut rec = gpu.recorder();
        for copy in &plan.copies {
            self.kv.encode_copy(rec.encoder(), copy.src, copy.dst);
        }
        let batch = BatchView {
            t,
            ids: &self.ids.tensor,
            rowinfo: &self.rowinfo.tensor,
            block_tables: &self.block_tables.tensor,
            attention: AttentionWork {
                items: &self.attention_items.tensor,
                n_items: p.attention.items.len(),
                combine: &self.attention_combine.tensor,
                n_combine: p.attention.combine.len(),
                slots: p.attention.slots as usize,
            },
            r,
            logit_rows: &self.logit_rows.tensor,
        };
        decoder.encode_forward(&mut rec, &batch, &self.kv, &self.buffers)?;
        if m > 0 {
            let logits = &self.buffers.logits;
            let (keys, tokens) = (&self.keys.tensor, &self.tokens.tensor);
            let stats = &self.stats;
            let (params, cut) = (&self.row_params.tensor, &self.cut.tensor);
            softmax::encode(gpu, &mut rec, logits, r, vocab, stats, Extra::Nothing);
            // Alternatives come from the model's own logits, so before any masking.
            if n_max > 0 {
                top_logprobs::encode(
                    gpu,
                    &mut rec,
                    logits,
                    vocab,
                    stats,
                    &self.top_counts.tensor,
                    r,
                    n_max,
                    &self.top_ids.tensor,
                    &self.top_logprobs.tensor,
                );
            }
            // Forbidden tokens leave the sampling distribution only: `stats` (hence the
            // raw log-probs) were taken above.
            if !p.masked.is_empty() {
                let pairs = &self.masked.tensor;
                mask::encode(gpu, &mut rec, logits, vocab, r, pairs, p.masked.len());
            }
            sample::encode_truncate(gpu, &mut rec, logits, vocab, r, params, cut);
            sample::encode(gpu, &mut rec, logits, vocab, params, cut, keys, d, tokens);
            let logprobs = &self.logprobs.tensor;
            let sampling_logprobs = &self.sampling_logprobs.tensor;
            sample::encode_draw_logprobs(
                gpu,
                &mut rec,
                logits,
                vocab,
                stats,
                params,
                cut,
                keys,
                tokens,
                m,
                logprobs,
                sampling_logprobs,
            );
            let (d4, m4) = (4 * d as u64, 4 * m as u64);
            let staging = &self.staging;
            let enc = rec.encoder();
            enc.copy_buffer_to_buffer(&tokens.buffer, 0, staging, 0, d4);
            enc.copy_buffer_to_buffer(&logprobs.buffer, 0, staging, d4, m4);
            enc.copy_buffer_to_buffer(&sampling_logprobs.buffer, 0, staging, d4 + m4, d4);
            if n_max > 0 {
                let (at, len) = (2 * d4 + m4, 4 * (r * n_max) as u64);
                let (ids, lps) = (&self.top_ids.tensor, &self.top_logprobs.tensor);
                enc.copy_buffer_to_buffer(&ids.buffer, 0, staging, at, len);
                enc.copy_buffer_to_buffer(&lps.buffer, 0, staging, at + len, len);
            }
        }
        let dispatches = rec.dispatches();
        rec.submit();
        let submitted = Instant::now();
        let bytes = gpu.read_staged(&self.staging, size).await?;
        let timings = RunTimings {
            encode_s: (submitted - started).as_secs_f64(),
            gpu_s: submitted.elapsed().as_secs_f64(),
            dispatches,
        };
        // A Vec<u8> need not be aligned for u32: copy rather than cast.
        let w: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        let top_at = 2 * d + m;
        let draws = plan
            .draws
            .iter()
            .zip(&p.draw_rows)
            .enumerate()
            .map(|(i, (draw, &row))| {
                let first = top_at + row as usize * n_max;
                let top = (0..draw.top_logprobs)
                    .map(|j| TopLogprob {
                        token: w[first + j],
                        logprob: f32::from_bits(w[first + r * n_max + j]),
                    })
                    .collect();
                DrawResult {
                    token: w[i],
                    logprob: f32::from_bits(w[d + i]),
                    sampling_logprob: f32::from_bits(w[d + m + i]),
                    top,
                }
            })
            .collect();
        let scores = (0..n_targets)
            .map(|i| f32::from_bits(w[2 * d + i]))
            .collect();
        Ok((draws, scores, timings))
    }
}
