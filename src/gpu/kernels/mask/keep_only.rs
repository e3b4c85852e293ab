//! Keeping only the allowed tokens of rows (shaders/keep_only.wgsl): vLLM's
//! `allowed_token_ids`. Recorded where the mask of `mask::encode` is (after the softmax
//! statistics and any `logit_adjust`, before truncation): every other token of the row
//! gets `MASKED_LOGIT`.
//!
//! Each [`KeepOnly`] names a row and a slice of one shared `allowed` buffer holding token
//! ids sorted ascending (the caller's invariant; repeats do no harm). A slice that runs
//! past the buffer is clamped to it (`first` to its length, `count` to what is left), so
//! the kernel never reads out of bounds; a slice clamped to nothing masks the whole row.
//! An unsorted slice keeps an unspecified set of tokens (still in bounds).
//!
//! Invariants: the kernel writes only the constant `MASKED_LOGIT`, so every logit it
//! keeps is untouched bit for bit and the result does not depend on the order of specs
//! or workgroups; two specs for one row keep the tokens both allow. A spec past the rows
//! writes nothing. Work is spread as (spec, tile of [`TILE`] tokens) workgroups folded
//! into a 2D grid, each invocation finding its tokens in the slice by binary search, so
//! a vocabulary of 262,144 is 256 workgroups per spec. The logits come in chunks of rows
//! ([`Logits`]), one dispatch per chunk; a dispatch runs every spec's workgroups, and
//! those of specs whose row another chunk holds return after reading the spec.

use crate::gpu::grid::grid;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../../shaders/keep_only.wgsl");
/// Tokens of a row per workgroup (`TILE` in the shader).
pub const TILE: usize = 1024;

/// A row that may draw only the tokens `allowed[first .. first + count]` (sorted
/// ascending, no repeats): 16 bytes, `KeepOnly` in the shader.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KeepOnly {
    pub row: u32,
    pub first: u32,
    pub count: u32,
    /// Unread; 0.
    pub reserved: u32,
}

impl KeepOnly {
    /// Row `row` keeps `allowed[first .. first + count]`.
    pub fn new(row: u32, first: u32, count: u32) -> KeepOnly {
        KeepOnly {
            row,
            first,
            count,
            reserved: 0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    rows: u32,
    vocab: u32,
    first_row: u32,
    tiles: u32,
    allowed_len: u32,
    pad: [u32; 2],
}

/// The keep-only kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeepOnlyKernel;

impl KernelSpec for KeepOnlyKernel {
    fn name(&self) -> String {
        "keep_only".into()
    }

    fn source(&self) -> String {
        SOURCE.into()
    }

    fn entry(&self) -> &'static str {
        "keep_only"
    }

    fn storage(&self) -> &'static [Access] {
        // specs, allowed, logits
        &[Access::Read, Access::Read, Access::ReadWrite]
    }
}

/// Records: for each of the `n` KeepOnly specs whose row < rows, every logit of that row
/// whose token is not in its allowed slice becomes MASKED_LOGIT (the others are untouched
/// bit for bit). `allowed` holds the slices' token ids (`allowed.len` values; a slice past
/// them is clamped). One dispatch per chunk of the logits.
pub fn encode_keep_only(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    rows: usize,
    specs: &Tensor,
    n: usize,
    allowed: &Tensor,
) {
    let vocab = logits.vocab;
    assert!(vocab > 0, "keep_only: the vocabulary is empty");
    assert!(
        logits.rows >= rows,
        "keep_only: logits hold {} rows, need {rows}",
        logits.rows
    );
    let words = size_of::<KeepOnly>() / 4;
    assert!(
        specs.len >= words * n,
        "keep_only: specs hold {} words, need {words} for each of {n} specs",
        specs.len
    );
    let tiles = vocab.div_ceil(TILE);
    // The shader numbers workgroups spec * tiles + tile in a u32.
    let workgroups = n
        .checked_mul(tiles)
        .filter(|&w| u32::try_from(w).is_ok())
        .expect("keep_only: more than 2^32 workgroups");
    let allowed_len = u32::try_from(allowed.len).expect("keep_only: more than 2^32 allowed ids");
    let kernel = gpu.pipeline(&KeepOnlyKernel);
    for chunk in logits.chunks(rows) {
        let params = Params {
            n: n as u32,
            rows: chunk.rows as u32,
            vocab: vocab as u32,
            first_row: chunk.first_row as u32,
            tiles: tiles as u32,
            allowed_len,
            pad: [0; 2],
        };
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &[&specs.buffer, &allowed.buffer, &chunk.tensor.buffer],
            grid(gpu, workgroups),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::KeepOnly;

    #[test]
    fn a_spec_is_the_shaders_16_bytes_in_field_order() {
        let spec = KeepOnly::new(3, 7, 11);
        let words: &[u32] = bytemuck::cast_slice(std::slice::from_ref(&spec));
        assert_eq!(words, [3, 7, 11, 0]);
    }
}
