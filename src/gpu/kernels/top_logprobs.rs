//! The most likely alternatives of each logits row and their log-probabilities
//! (shaders/top_logprobs.wgsl), so that only the `n` best ids and log-probs per position
//! come back, never the logits.
//!
//! Recorded after `softmax::encode` has written the [`RowStats`] of the same logits. For
//! row `r` with `n = min(counts[r], n_max, vocab)`, entry `j < n` of the row's `n_max` is
//! the `j`-th token in the order (logit descending, lowest index first among equal logits;
//! -0 and +0 are equal) and its raw log-prob `logit - lse[r]`: the same f32 subtraction as
//! softmax's `target_logprobs`, so bitwise the value it gives for that row and token.
//! Entries `n..n_max` hold id `u32::MAX` and log-prob NaN.
//!
//! One workgroup per row picks the tokens one by one: round `j` takes the workgroup
//! maximum, in that order, over the tokens after round `j - 1`'s pick, reduced in a fixed
//! order (shaders/common/argmax.wgsl). Picks are exact, and a row's results depend only on
//! its logits, lse and count: bitwise the same alone or in any batch, wherever the row
//! sits (ARCHITECTURE.md, principle 1).
//!
//! The logits come in chunks of rows ([`Logits`]), one dispatch per chunk; a row's
//! results do not depend on the chunk that holds it. Logits must be finite (see `softmax`).

use crate::gpu::grid::grid;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::kernels::reduction::Reduction;
use crate::gpu::kernels::softmax::RowStats;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const KERNEL: &str = include_str!("../../../shaders/top_logprobs.wgsl");

/// The most alternatives a position may ask for.
pub const MAX_TOP_LOGPROBS: usize = 20;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    vocab: u32,
    n_max: u32,
    first_row: u32,
}

/// The alternatives kernel, with its workgroup argmax's tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TopLogprobsKernel {
    pub reduction: Reduction,
}

impl KernelSpec for TopLogprobsKernel {
    fn name(&self) -> String {
        format!("top_logprobs/{}", self.reduction.key())
    }

    fn source(&self) -> String {
        self.reduction.compose(KERNEL)
    }

    fn entry(&self) -> &'static str {
        "top_logprobs"
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        // logits, stats, counts, ids, logprobs
        &[Read, Read, Read, ReadWrite, ReadWrite]
    }
}

/// Records, for each row `r` in `0..rows` of `logits` with `n = counts[r]`
/// (u32, at most `n_max`, `n_max <= MAX_TOP_LOGPROBS`):
/// `ids[r * n_max + j]` and `logprobs[r * n_max + j]` for `j < n` = the `j`-th most likely
/// token of row `r` (descending logit, lowest index first among equal logits) and its raw
/// log-prob `logit - lse[r]` with `lse` from `stats` (`softmax::RowStats` of the same
/// logits): the same f32 subtraction softmax's `target_logprobs` does, so bitwise the value
/// it gives for that row and token.
/// Entries `j` in `n..n_max` get id `u32::MAX` and log-prob NaN. (The counts live on the
/// GPU, so the host cannot check them: a count above `n_max` is taken as `n_max`, and
/// entries `j >= vocab` are unused ones.) The adapter's best reductions pick the tokens.
#[allow(clippy::too_many_arguments)]
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    stats: &RowStats,
    counts: &Tensor,
    rows: usize,
    n_max: usize,
    ids: &Tensor,
    logprobs: &Tensor,
) {
    let reduction = Reduction::best(&gpu.caps);
    let inputs = (logits, stats, counts);
    encode_with(gpu, rec, inputs, (rows, n_max), (ids, logprobs), reduction);
}

/// [`encode`] with the given reductions (which the adapter must be able to run).
pub fn encode_with(
    gpu: &Gpu,
    rec: &mut Recorder,
    (logits, stats, counts): (&Logits, &RowStats, &Tensor),
    (rows, n_max): (usize, usize),
    (ids, logprobs): (&Tensor, &Tensor),
    reduction: Reduction,
) {
    let vocab = logits.vocab;
    assert!(vocab > 0, "top_logprobs: the vocabulary is empty");
    assert!(
        n_max <= MAX_TOP_LOGPROBS,
        "top_logprobs: n_max {n_max} exceeds MAX_TOP_LOGPROBS ({MAX_TOP_LOGPROBS})"
    );
    assert!(
        logits.rows >= rows,
        "top_logprobs: logits hold {} rows, need {rows}",
        logits.rows
    );
    assert!(
        stats.rows >= rows && stats.stats.len >= 2 * rows,
        "top_logprobs: row stats hold {} rows ({} values), need (max, lse) of {rows}",
        stats.rows,
        stats.stats.len
    );
    assert!(
        counts.len >= rows,
        "top_logprobs: counts hold {} values, need {rows}",
        counts.len
    );
    for (name, t) in [("ids", ids), ("logprobs", logprobs)] {
        assert!(
            t.len >= rows * n_max,
            "top_logprobs: {name} hold {} values, need {rows}x{n_max}",
            t.len
        );
    }
    let kernel = gpu.pipeline(&TopLogprobsKernel { reduction });
    for chunk in logits.chunks(rows) {
        let params = Params {
            rows: chunk.rows as u32,
            vocab: vocab as u32,
            n_max: n_max as u32,
            first_row: chunk.first_row as u32,
        };
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &[
                &chunk.tensor.buffer,
                &stats.stats.buffer,
                &counts.buffer,
                &ids.buffer,
                &logprobs.buffer,
            ],
            grid(gpu, chunk.rows),
        );
    }
}
