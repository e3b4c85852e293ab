//! Drawing one token per row of logits on the GPU (shaders/sample.wgsl), so that only the
//! chosen ids come back, never the logits.
//!
//! The draw is the Gumbel-max trick with noise from a counter-based hash keyed by
//! (seed, stream, position, token id): exact sampling from `softmax(logits / T)`, and a
//! row's draw depends only on its own key, not on its batch. Greedy rows take the argmax.
//! Pair it with `softmax::Extra::TargetLogprobs` to get each drawn token's log-probability.

use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Tensor};

const KERNEL: &str = include_str!("../../../shaders/sample.wgsl");

/// The kernel with the shared workgroup argmax appended.
pub(crate) fn source() -> String {
    format!("{KERNEL}\n{}", crate::gpu::shaders::ARGMAX)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    vocab: u32,
    _pad: [u32; 2],
}

/// How one row is drawn (`RowKey` in the shader).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleKey {
    pub seed_lo: u32,
    pub seed_hi: u32,
    pub stream: u32,
    pub position: u32,
    pub inv_temperature: f32,
    pub greedy: u32,
    _pad: [u32; 2],
}

impl SampleKey {
    /// Draws at `temperature` (0 is greedy) for sample `stream` at `position`.
    pub fn new(seed: u64, stream: u32, position: u32, temperature: f32) -> SampleKey {
        let greedy = temperature <= 0.0;
        SampleKey {
            seed_lo: seed as u32,
            seed_hi: (seed >> 32) as u32,
            stream,
            position,
            inv_temperature: if greedy { 0.0 } else { 1.0 / temperature },
            greedy: greedy as u32,
            _pad: [0; 2],
        }
    }
}

pub fn spec() -> KernelSpec {
    KernelSpec {
        key: "sample".into(),
        source: source(),
        entry: "sample",
        storage: &[Access::Read, Access::Read, Access::ReadWrite],
    }
}

/// Records `tokens[r] = draw(logits[r, ..], keys[r])` for `m` rows of `vocab` logits.
/// `keys` holds `m` [`SampleKey`]s (upload them with `gpu.upload`).
pub fn encode(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    logits: &Tensor,
    m: usize,
    vocab: usize,
    keys: &Tensor,
    tokens: &Tensor,
) {
    const KEY_WORDS: usize = size_of::<SampleKey>() / 4;
    assert!(vocab > 0, "sample: the vocabulary is empty");
    assert!(
        logits.len >= m * vocab,
        "sample: logits hold {} values, need {m}x{vocab}",
        logits.len
    );
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
        _pad: [0; 2],
    };
    gpu.dispatch(
        encoder,
        &gpu.pipeline(&spec()),
        bytemuck::bytes_of(&params),
        &[&logits.buffer, &keys.buffer, &tokens.buffer],
        grid(gpu, m),
    );
}
