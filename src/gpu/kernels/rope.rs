//! Rotary position embedding: the pair layouts and the cos/sin table the fused q|k|v
//! projection's epilogue (shaders/matmul/epilogue_qkv_rope.wgsl) and `head_norm_rope`
//! read.
//!
//! Angles are `pos * freq[i]`, `freq[i] = theta^(-2i / head_dim)` ([`RopeTable::new`]) or
//! any per-pair frequencies a model's scaling gives ([`RopeTable::with_frequencies`], from
//! `ModelConfig::rope_frequencies`). Their cos and sin are never computed on the GPU
//! (WGSL's are accurate only near [-pi, pi]): a [`RopeTable`] is built once on the CPU in
//! f64 and uploaded as f32. A position outside the table gives NaN (size the table to the
//! longest context); a table the adapter cannot bind is an error, never a panic (the
//! context length is read from a model file). No reductions: each value is independent
//! of the batch.

use crate::error::SproutError;
use crate::gpu::{Gpu, Tensor};

/// Which values of a head are rotated together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(2i, 2i + 1)`: GGUF / ggml "norm" rope (llama.cpp's LLaMA layout).
    Interleaved,
    /// Pairs `(i, i + head_dim / 2)`: Hugging Face `rotate_half` / ggml "neox".
    HalfSplit,
}

impl RopeLayout {
    pub const ALL: [RopeLayout; 2] = [RopeLayout::Interleaved, RopeLayout::HalfSplit];
}

/// `theta^(-2i / head_dim)` for each pair `i < head_dim / 2`, in f64.
pub fn frequencies(head_dim: usize, theta: f64) -> Vec<f64> {
    assert!(
        head_dim.is_multiple_of(2),
        "rope: head_dim {head_dim} is odd"
    );
    (0..head_dim / 2)
        .map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64))
        .collect()
}

/// `[max_positions, frequencies.len(), 2]`: `(cos, sin)` of `pos * freq`, computed in f64.
pub fn table_values(frequencies: &[f64], max_positions: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(max_positions * frequencies.len() * 2);
    for pos in 0..max_positions {
        for &f in frequencies {
            let (s, c) = (pos as f64 * f).sin_cos();
            out.extend([c as f32, s as f32]);
        }
    }
    out
}

/// The cos/sin table on the GPU, for one head size and every position below `max_positions`.
pub struct RopeTable {
    pub values: Tensor,
    pub head_dim: usize,
    pub max_positions: usize,
}

impl RopeTable {
    /// The standard table: `freq[i] = theta^(-2i / head_dim)`.
    pub fn new(
        gpu: &Gpu,
        head_dim: usize,
        theta: f64,
        max_positions: usize,
    ) -> Result<RopeTable, SproutError> {
        Self::with_frequencies(gpu, &frequencies(head_dim, theta), max_positions)
    }

    /// A table for any per-pair frequencies (scaled variants compute their own). The
    /// context length comes from a model file: a table larger than the adapter can bind
    /// is an error naming it, checked before anything is computed or allocated.
    pub fn with_frequencies(
        gpu: &Gpu,
        frequencies: &[f64],
        max_positions: usize,
    ) -> Result<RopeTable, SproutError> {
        let too_large = || {
            SproutError::Model(format!(
                "context length {max_positions}: its rope table of {max_positions} positions x \
                 {} pairs exceeds the adapter's storage-binding limit of {} bytes",
                frequencies.len(),
                gpu.caps.max_binding
            ))
        };
        if frequencies.is_empty() {
            return Err(SproutError::Model(
                "rope: a head needs at least one pair of values".into(),
            ));
        }
        let bytes = (max_positions as u64)
            .checked_mul(frequencies.len() as u64 * 8)
            .ok_or_else(too_large)?;
        if bytes > gpu.caps.max_binding {
            return Err(too_large());
        }
        Ok(RopeTable {
            values: gpu.upload(&table_values(frequencies, max_positions)),
            head_dim: frequencies.len() * 2,
            max_positions,
        })
    }
}
