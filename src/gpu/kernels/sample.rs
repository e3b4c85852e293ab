//! Drawing tokens from chosen rows of logits on the GPU (shaders/sample.wgsl), so that only
//! the chosen ids (and their log-probabilities) come back, never the logits.
//!
//! Each draw has a [`SampleKey`]: its seed, request (prompt index), stream (sample of a
//! group), position, temperature, and the logits row it reads; several draws may read one
//! row (the G samples of a group drawing their first token from the shared prompt's
//! logits). The draw is the Gumbel-max trick with noise from a counter-based hash keyed by
//! (seed, request, stream, position, token id): exact sampling from `softmax(logits / T)`.
//! Greedy draws take the argmax.
//!
//! Invariant: a draw depends only on its key and the values of its logits row, never on
//! the other draws of the dispatch nor on where its row sits in the logits buffer
//! (DESIGN.md, principle 1). [`encode_draw_logprobs`] gives each drawn token's
//! log-probability from `softmax::RowStats`, bitwise the value softmax's target_logprobs
//! gives for that row and token.

use crate::gpu::grid::grid;
use crate::gpu::kernels::softmax::RowStats;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Tensor};

const KERNEL: &str = include_str!("../../../shaders/sample.wgsl");
/// Draws per workgroup of `draw_logprobs` (`LOGPROB_WG` in the shader).
const LOGPROB_WORKGROUP: usize = 64;
/// 32-bit words per [`SampleKey`].
const KEY_WORDS: usize = size_of::<SampleKey>() / 4;

/// The kernel with the shared workgroup argmax appended.
pub(crate) fn source() -> String {
    format!("{KERNEL}\n{}", crate::gpu::shaders::ARGMAX)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    vocab: u32,
    rows: u32,
    _pad: u32,
}

/// How one token is drawn (`DrawKey` in the shader): 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleKey {
    pub seed_lo: u32,
    pub seed_hi: u32,
    /// Which sample of a group.
    pub stream: u32,
    /// The position of the token being drawn.
    pub position: u32,
    pub inv_temperature: f32,
    /// 1: argmax, no noise.
    pub greedy: u32,
    /// Which prompt (request) the draw belongs to; mixed into the noise.
    pub request: u32,
    /// The logits row this draw reads.
    pub row: u32,
}

impl SampleKey {
    /// Draws at `temperature` (0 is greedy) for sample `stream` of request `request` at
    /// `position`, from logits row `row`.
    pub fn new(
        seed: u64,
        request: u32,
        stream: u32,
        position: u32,
        temperature: f32,
        row: u32,
    ) -> SampleKey {
        let greedy = temperature <= 0.0;
        SampleKey {
            seed_lo: seed as u32,
            seed_hi: (seed >> 32) as u32,
            stream,
            position,
            inv_temperature: if greedy { 0.0 } else { 1.0 / temperature },
            greedy: greedy as u32,
            request,
            row,
        }
    }
}

/// The kernels of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleKernel {
    /// One token per draw.
    Sample,
    /// The log-probability of each drawn token.
    DrawLogprobs,
}

pub fn spec(kernel: SampleKernel) -> KernelSpec {
    use Access::{Read, ReadWrite};
    let (entry, storage): (&'static str, &'static [Access]) = match kernel {
        SampleKernel::Sample => ("sample", &[Read, Read, ReadWrite]),
        SampleKernel::DrawLogprobs => ("draw_logprobs", &[Read, Read, ReadWrite, Read, ReadWrite]),
    };
    KernelSpec {
        key: format!("sample/{entry}"),
        source: source(),
        entry,
        storage,
    }
}

/// Rows of `vocab` logits that `logits` holds, after checking it holds whole rows.
fn logits_rows(what: &str, logits: &Tensor, vocab: usize) -> u32 {
    assert!(vocab > 0, "{what}: the vocabulary is empty");
    assert!(
        logits.len >= vocab,
        "{what}: logits hold {} values, less than one row of {vocab}",
        logits.len
    );
    u32::try_from(logits.len).expect("logits hold more than 2^32 values");
    (logits.len / vocab) as u32
}

/// Records `tokens[d] = draw(logits[keys[d].row, ..], keys[d])` for `d in 0..m` draws.
/// `logits` holds rows of `vocab` values; `keys` holds `m` [`SampleKey`]s (upload them with
/// `gpu.upload`). A key whose row is past the logits draws `u32::MAX`.
pub fn encode(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    logits: &Tensor,
    vocab: usize,
    keys: &Tensor,
    m: usize,
    tokens: &Tensor,
) {
    let rows = logits_rows("sample", logits, vocab);
    assert!(
        keys.len >= m * KEY_WORDS,
        "sample: keys hold {} words, need {m} keys",
        keys.len
    );
    assert!(
        tokens.len >= m,
        "sample: tokens hold {} ids, need {m}",
        tokens.len
    );
    let params = Params {
        m: m as u32,
        vocab: vocab as u32,
        rows,
        _pad: 0,
    };
    gpu.dispatch(
        encoder,
        &gpu.pipeline(&spec(SampleKernel::Sample)),
        bytemuck::bytes_of(&params),
        &[&logits.buffer, &keys.buffer, &tokens.buffer],
        grid(gpu, m),
    );
}

/// Records `logprobs[d] = logits[keys[d].row, tokens[d]] - lse[keys[d].row]` for
/// `d in 0..m`, with `lse` from `stats` (softmax's row statistics of the same logits):
/// bitwise the value softmax's `target_logprobs` gives for that row and token (NaN for a
/// token `>= vocab` or a row past the logits or the stats).
#[allow(clippy::too_many_arguments)]
pub fn encode_draw_logprobs(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    logits: &Tensor,
    vocab: usize,
    stats: &RowStats,
    keys: &Tensor,
    tokens: &Tensor,
    m: usize,
    logprobs: &Tensor,
) {
    assert!(
        stats.stats.len >= 2 * stats.rows,
        "draw_logprobs: row stats hold {} values, not the (max, lse) of {} rows",
        stats.stats.len,
        stats.rows
    );
    // A row is readable when both the logits and the stats hold it.
    let rows = logits_rows("draw_logprobs", logits, vocab)
        .min(u32::try_from(stats.rows).unwrap_or(u32::MAX));
    assert!(
        keys.len >= m * KEY_WORDS,
        "draw_logprobs: keys hold {} words, need {m} keys",
        keys.len
    );
    assert!(
        tokens.len >= m,
        "draw_logprobs: tokens hold {} ids, need {m}",
        tokens.len
    );
    assert!(
        logprobs.len >= m,
        "draw_logprobs: logprobs hold {} values, need {m}",
        logprobs.len
    );
    let params = Params {
        m: m as u32,
        vocab: vocab as u32,
        rows,
        _pad: 0,
    };
    gpu.dispatch(
        encoder,
        &gpu.pipeline(&spec(SampleKernel::DrawLogprobs)),
        bytemuck::bytes_of(&params),
        &[
            &logits.buffer,
            &keys.buffer,
            &tokens.buffer,
            &stats.stats.buffer,
            &logprobs.buffer,
        ],
        grid(gpu, m.div_ceil(LOGPROB_WORKGROUP)),
    );
}
