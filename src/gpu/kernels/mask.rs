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
//!
//! [`keep_only`] is the other mask: every token of a row but an allowed few.

use crate::gpu::kernels::logit_entries::{self, EntryKernel};
use crate::gpu::kernels::logits::Logits;
use crate::gpu::{Gpu, Recorder, Tensor};

pub mod keep_only;
pub use keep_only::{KeepOnly, encode_keep_only};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/mask_tokens.wgsl");
/// Pairs per workgroup (`WG` in the shader).
pub const WORKGROUP: usize = logit_entries::WORKGROUP;

/// The logit a masked token gets: finite (logits must be finite) and far below any real
/// logit, so its probability is 0 at any temperature >= 1e-8. (`MASKED_LOGIT` in the
/// shader.)
pub const MASKED_LOGIT: f32 = -1e30;

/// The masking kernel.
pub const KERNEL: EntryKernel = EntryKernel {
    entry: "mask_tokens",
    source: SOURCE,
    per_entry: false,
};

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
    logit_entries::encode(gpu, rec, &KERNEL, logits, rows, (pairs, 2, n), None);
}
