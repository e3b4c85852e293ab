//! Draws from rows of logits set up to be checked: what the kernel suite and `sprout
//! check` share.
//!
//! [`SamplingFixture`] records the chain in the engine's order (`engine::runner`): the
//! softmax statistics of every row (the raw log-probs), then what changes only the
//! sampling distribution when there is any (the adjusted logits, the allowed tokens, the
//! forbidden ones, in that order: a mask writes its constant over any adjustment), each
//! row's cut, the draws, and their raw and sampling log-probs; [`SamplingFixture::run`]
//! reads all of it back.
//!
//! Invariant: before a run, every output holds NaN (or `u32::MAX` for tokens), so a value
//! the kernels fail to write shows instead of the value of an earlier run.

use super::{Restore, RowParams, SampleKey, draw_with, encode_draw_logprobs, truncate_with};
use crate::error::SproutError;
use crate::gpu::kernels::logit_adjust::{self, LogitAdjust};
use crate::gpu::kernels::logits::Logits;
use crate::gpu::kernels::mask::{self, KeepOnly};
use crate::gpu::kernels::reduction::Reduction;
use crate::gpu::kernels::softmax::{self, Extra, RowStats};
use crate::gpu::{Gpu, Recorder, Tensor};

/// Logits rows, their params, the draws' keys, and the chain's outputs, on the GPU.
pub struct SamplingFixture {
    rows: usize,
    draws: usize,
    logits: Logits,
    params: Tensor,
    keys: Tensor,
    /// Logits to adjust, how many, the logits saved before, and scratch for the draws.
    adjusts: Option<(Tensor, usize, Tensor, Tensor)>,
    /// Rows keeping only some tokens, how many, and the allowed ids.
    keep_only: Option<(Tensor, usize, Tensor)>,
    /// `(row, token)` pairs to forbid, and how many.
    masked: Option<(Tensor, usize)>,
    /// How the cut's and the draws' workgroup reductions end.
    reduction: Reduction,
    stats: RowStats,
    cut: Tensor,
    tokens: Tensor,
    logprobs: Tensor,
    sampling: Tensor,
}

/// What one run gave: per row its cut `(tau, log_z)`, per draw its token, raw log-prob
/// and sampling log-prob.
pub struct Drawn {
    pub cut: Vec<f32>,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub sampling: Vec<f32>,
}

impl SamplingFixture {
    /// `logits [params.len(), vocab]`, one [`RowParams`] per row, one draw per key.
    pub fn new(
        gpu: &Gpu,
        logits: (&[f32], usize),
        params: &[RowParams],
        keys: &[SampleKey],
    ) -> SamplingFixture {
        Self::chunked(gpu, logits, params, keys, None)
    }

    /// As [`SamplingFixture::new`], with the logits in chunks of `chunk_rows` rows
    /// (`None`: the largest chunks the adapter can bind).
    pub fn chunked(
        gpu: &Gpu,
        (logits, vocab): (&[f32], usize),
        params: &[RowParams],
        keys: &[SampleKey],
        chunk_rows: Option<usize>,
    ) -> SamplingFixture {
        let (rows, draws) = (params.len(), keys.len());
        assert_eq!(
            logits.len(),
            rows * vocab,
            "sampling fixture: one row per params"
        );
        SamplingFixture {
            rows,
            draws,
            logits: Logits::upload(gpu, logits, vocab, chunk_rows),
            params: gpu.upload(params),
            keys: gpu.upload(keys),
            adjusts: None,
            keep_only: None,
            masked: None,
            reduction: Reduction::best(&gpu.caps),
            stats: RowStats::zeros(gpu, rows),
            cut: gpu.zeros(2 * rows),
            tokens: gpu.zeros(draws),
            logprobs: gpu.zeros(draws),
            sampling: gpu.zeros(draws),
        }
    }

    /// Adjusts the logits `adjusts` name (bias, penalties) before the masks.
    pub fn with_adjusts(mut self, gpu: &Gpu, adjusts: &[LogitAdjust]) -> SamplingFixture {
        let n = adjusts.len();
        let (saved, scratch) = (gpu.zeros(n.max(1)), gpu.zeros(self.draws.max(1)));
        self.adjusts = Some((gpu.upload(adjusts), n, saved, scratch));
        self
    }

    /// Keeps only each spec's slice of `allowed` in its row, before the cut.
    pub fn with_keep_only(
        mut self,
        gpu: &Gpu,
        specs: &[KeepOnly],
        allowed: &[u32],
    ) -> SamplingFixture {
        self.keep_only = Some((gpu.upload(specs), specs.len(), gpu.upload(allowed)));
        self
    }

    /// Forbids the tokens of `pairs` (`(row, token)`, flattened) before the cut.
    pub fn with_mask(mut self, gpu: &Gpu, pairs: &[u32]) -> SamplingFixture {
        self.masked = Some((gpu.upload(pairs), pairs.len() / 2));
        self
    }

    /// Ends the cut's and the draws' reductions with `reduction` rather than the adapter's
    /// best (which the adapter must be able to run).
    pub fn with_reduction(mut self, reduction: Reduction) -> SamplingFixture {
        self.reduction = reduction;
        self
    }

    /// Records the chain, as the engine does.
    pub fn encode(&self, gpu: &Gpu, rec: &mut Recorder) {
        let (l, rows, m) = (&self.logits, self.rows, self.draws);
        let (p, cut, k) = (&self.params, &self.cut, &self.keys);
        softmax::encode(gpu, rec, l, rows, &self.stats, Extra::Nothing);
        if let Some((adjusts, n, saved, _)) = &self.adjusts {
            logit_adjust::encode(gpu, rec, l, rows, adjusts, *n, saved);
        }
        if let Some((specs, n, allowed)) = &self.keep_only {
            mask::encode_keep_only(gpu, rec, l, rows, specs, *n, allowed);
        }
        if let Some((pairs, n)) = &self.masked {
            mask::encode(gpu, rec, l, rows, pairs, *n);
        }
        truncate_with(gpu, rec, (l, rows), p, cut, self.reduction);
        draw_with(gpu, rec, l, (p, cut), (k, m, &self.tokens), self.reduction);
        let (tokens, stats) = (&self.tokens, &self.stats);
        encode_draw_logprobs(
            gpu,
            rec,
            l,
            stats,
            p,
            cut,
            k,
            tokens,
            m,
            &self.logprobs,
            &self.sampling,
            self.adjusts
                .as_ref()
                .map(|(adjusts, n, saved, scratch)| Restore {
                    rows,
                    adjusts,
                    n: *n,
                    saved,
                    scratch,
                }),
        );
    }

    /// Runs the chain and reads every output back.
    pub async fn run(&self, gpu: &Gpu) -> Result<Drawn, SproutError> {
        gpu.write(&self.cut, &vec![f32::NAN; 2 * self.rows]);
        gpu.write(&self.tokens, &vec![u32::MAX; self.draws]);
        for t in [&self.logprobs, &self.sampling] {
            gpu.write(t, &vec![f32::NAN; self.draws]);
        }
        let mut rec = gpu.recorder();
        self.encode(gpu, &mut rec);
        rec.submit();
        Ok(Drawn {
            cut: gpu.read_f32(&self.cut).await?,
            tokens: gpu.read_u32(&self.tokens).await?,
            logprobs: gpu.read_f32(&self.logprobs).await?,
            sampling: gpu.read_f32(&self.sampling).await?,
        })
    }
}
