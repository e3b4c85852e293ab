//! Forbidding tokens in rows of logits (shaders/mask_tokens.wgsl): the stop tokens of a
//! sample that has not yet reached its `min_tokens`.
//!
//! Recorded after `softmax::encode` has written the row statistics (so raw log-probs stay
//! those of the model) and before `sample::encode_truncate`: a masked token gets
//! [`MASKED_LOGIT`], so it is never kept, drawn, or taken by a greedy row while another
//! token of the row is unmasked.
//!
//! Invariants: each pair writes one logit, a constant: every other logit is untouched bit
//! for bit, the result does not depend on the order or grouping of the pairs, and a pair
//! may repeat. A pair past the rows or the vocabulary writes nothing (the host cannot check
//! pairs: they live on the GPU). The logits come in chunks of rows ([`Logits`]), one
//! dispatch per chunk, each writing the pairs of its own rows.

use crate::gpu::grid::grid;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/mask_tokens.wgsl");
/// Pairs per workgroup (`WG` in the shader).
pub const WORKGROUP: usize = 64;

/// The logit a masked token gets: finite (logits must be finite) and far below any real
/// logit, so its probability is 0 at any temperature >= 1e-8. (`MASKED_LOGIT` in the
/// shader.)
pub const MASKED_LOGIT: f32 = -1e30;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    rows: u32,
    vocab: u32,
    first_row: u32,
}

/// The masking kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaskKernel;

impl KernelSpec for MaskKernel {
    fn name(&self) -> String {
        "mask_tokens".into()
    }

    fn source(&self) -> String {
        SOURCE.into()
    }

    fn entry(&self) -> &'static str {
        "mask_tokens"
    }

    fn storage(&self) -> &'static [Access] {
        // pairs, logits
        &[Access::Read, Access::ReadWrite]
    }
}

/// Records `logits[pairs[2i], pairs[2i + 1]] = MASKED_LOGIT` for `i in 0..n`, where
/// `pairs [2n]` u32 are (row, token); pairs whose row >= `rows` or token >= the vocabulary
/// are skipped. One dispatch per chunk of the logits, each masking the pairs of its rows.
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    rows: usize,
    pairs: &Tensor,
    n: usize,
) {
    let vocab = logits.vocab;
    assert!(vocab > 0, "mask_tokens: the vocabulary is empty");
    assert!(
        logits.rows >= rows,
        "mask_tokens: logits hold {} rows, need {rows}",
        logits.rows
    );
    assert!(
        pairs.len >= 2 * n,
        "mask_tokens: pairs hold {} values, need (row, token) for {n}",
        pairs.len
    );
    let n = u32::try_from(n).expect("mask_tokens: more than 2^32 pairs");
    let kernel = gpu.pipeline(&MaskKernel);
    for chunk in logits.chunks(rows) {
        let params = Params {
            n,
            rows: chunk.rows as u32,
            vocab: vocab as u32,
            first_row: chunk.first_row as u32,
        };
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &[&pairs.buffer, &chunk.tensor.buffer],
            grid(gpu, (n as usize).div_ceil(WORKGROUP)),
        );
    }
}
