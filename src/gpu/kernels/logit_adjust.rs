//! Changing chosen logits of rows before sampling (shaders/logit_adjust.wgsl): vLLM's
//! `logit_bias`, `repetition_penalty`, `presence_penalty` and `frequency_penalty`, as one
//! [`LogitAdjust`] per (row, token) the host builds from a request and its tokens.
//!
//! Recorded after `softmax::encode` has written the row statistics and before the masks (`mask::encode_keep_only`, `mask::encode`) and
//! `sample::encode_truncate`: a mask then writes its constant over whatever the
//! adjustments gave, so a masked token stays masked whatever its bias or penalty (vLLM's
//! masks give -inf, which no bias or penalty moves). The logits it changes are saved, and
//! [`encode_restore`] puts them back after the draws, so that a drawn token's raw log-prob
//! (`sample::encode_draw_logprobs`, run again then) is the model's.
//!
//! Arithmetic, per entry, in f32: `l = logit + bias`, then `m = l * scale` with
//! `scale = pos_scale` when `l > 0` and `neg_scale` otherwise, then `m - subtract`
//! clamped to `[MASKED_LOGIT, -MASKED_LOGIT]`. The product is rounded before the
//! subtraction on every driver (its bits pass through an OR with a uniform 0 that no
//! compiler can see through), so no driver can contract the two into an fma: an explicit
//! `fma()` would not pin the rounding either, since WGSL lets it be computed unfused (and
//! llvmpipe does). The clamp keeps the logits finite (softmax and sampling need them
//! finite) for any finite parameters, and is never reached by real logits.
//!
//! Invariants: the caller gives each (row, token) at most one entry, so each entry reads
//! and writes one logit of its own and the result does not depend on the order of the
//! entries; every logit no entry names is untouched bit for bit. An entry past the rows or
//! the vocabulary writes nothing (the host cannot check entries: they live on the GPU).
//! The logits come in chunks of rows ([`Logits`]), one dispatch per chunk, each changing
//! the entries of its own rows.

use crate::gpu::kernels::logit_entries::{self, EntryKernel};
use crate::gpu::kernels::logits::Logits;
use crate::gpu::{Gpu, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/logit_adjust.wgsl");

/// One adjusted logit: 24 bytes, `Adjust` in the shader.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LogitAdjust {
    pub row: u32,
    pub token: u32,
    /// Added first (`logit_bias`; 0 for none).
    pub bias: f32,
    /// The factor of a logit > 0 after the bias (1 / `repetition_penalty`).
    pub pos_scale: f32,
    /// The factor of a logit <= 0 after the bias (`repetition_penalty`).
    pub neg_scale: f32,
    /// Subtracted last (`presence_penalty + frequency_penalty * count`; 0 for none).
    pub subtract: f32,
}

impl LogitAdjust {
    /// `repetition` 1.0 = no repetition penalty for this token; pos_scale = 1/repetition
    /// (computed on the host in f32), neg_scale = repetition.
    pub fn new(row: u32, token: u32, bias: f32, repetition: f32, subtract: f32) -> LogitAdjust {
        LogitAdjust {
            row,
            token,
            bias,
            pos_scale: 1.0 / repetition,
            neg_scale: repetition,
            subtract,
        }
    }
}

/// The adjusting kernel.
pub const KERNEL: EntryKernel = EntryKernel {
    entry: "logit_adjust",
    source: SOURCE,
    per_entry: true,
};

/// The kernel putting back what [`KERNEL`] saved.
pub const RESTORE: EntryKernel = EntryKernel {
    entry: "logit_restore",
    source: SOURCE,
    per_entry: true,
};

/// Records, for each of the `n` entries of `adjusts` (a Tensor of LogitAdjust words) whose
/// row < rows and token < vocab:
/// l = logits[row, token]; l = l + bias; l = l * (l > 0 ? pos_scale : neg_scale);
/// l = l - subtract; logits[row, token] = l.
/// (The product is rounded to f32 before the subtraction on every driver, and the result
/// is clamped to `[MASKED_LOGIT, -MASKED_LOGIT]`: see the module doc.) Entries are unique
/// per (row, token): the caller's invariant. Each entry's logit before is written to
/// `saved[i]` (`saved` holds at least `n` f32), for [`encode_restore`]. One dispatch per
/// chunk of the logits.
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    rows: usize,
    adjusts: &Tensor,
    n: usize,
    saved: &Tensor,
) {
    encode_entries(gpu, rec, &KERNEL, logits, rows, (adjusts, n, saved));
}

/// Records `logits[row, token] = saved[i]` for the same entries: the logits [`encode`]
/// changed are the model's again, bit for bit (so the raw log-probs of drawn tokens can be
/// read after the draws).
pub fn encode_restore(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    rows: usize,
    adjusts: &Tensor,
    n: usize,
    saved: &Tensor,
) {
    encode_entries(gpu, rec, &RESTORE, logits, rows, (adjusts, n, saved));
}

/// Records `kernel` (adjusting or restoring) over the first `n` entries of `adjusts`, with
/// their saved logits.
fn encode_entries(
    gpu: &Gpu,
    rec: &mut Recorder,
    kernel: &EntryKernel,
    logits: &Logits,
    rows: usize,
    (adjusts, n, saved): (&Tensor, usize, &Tensor),
) {
    let entries = (adjusts, size_of::<LogitAdjust>() / 4, n);
    logit_entries::encode(gpu, rec, kernel, logits, rows, entries, Some(saved));
}

#[cfg(test)]
mod tests {
    use super::LogitAdjust;

    #[test]
    fn an_entry_is_the_shaders_24_bytes_in_field_order() {
        assert_eq!(size_of::<LogitAdjust>(), 24);
        let a = LogitAdjust::new(3, 7, 1.5, 2.0, 0.25);
        let words: &[u32] = bytemuck::cast_slice(std::slice::from_ref(&a));
        assert_eq!(
            words,
            [
                3,
                7,
                1.5f32.to_bits(),
                0.5f32.to_bits(),
                2.0f32.to_bits(),
                0.25f32.to_bits()
            ]
        );
    }
}
