//! Reference for RoPE, which the fused q|k|v matmul's epilogue and `head_norm_rope` apply:
//! each pair rotated by `pos * freq[i]` (`theta^(-2i / head_dim)` unless a model scales
//! them), with the angle, its cos and sin and the rotation all in f64.

use crate::gpu::kernels::rope::RopeLayout;

/// `x` is `[m, n_heads, head_dim]` with `positions[m]`; returns the rotated copy.
pub fn rope(
    x: &[f32],
    positions: &[u32],
    n_heads: usize,
    head_dim: usize,
    theta: f64,
    layout: RopeLayout,
) -> Vec<f32> {
    assert_eq!(head_dim % 2, 0, "rope: head_dim {head_dim} is odd");
    let freqs: Vec<f64> = (0..head_dim / 2)
        .map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64))
        .collect();
    rope_frequencies(x, positions, n_heads, &freqs, layout)
}

/// [`rope`] with any per-pair frequencies (`head_dim` is twice their number).
pub fn rope_frequencies(
    x: &[f32],
    positions: &[u32],
    n_heads: usize,
    freqs: &[f64],
    layout: RopeLayout,
) -> Vec<f32> {
    let half = freqs.len();
    let head_dim = 2 * half;
    assert_eq!(
        x.len(),
        positions.len() * n_heads * head_dim,
        "rope: x does not match positions"
    );
    let mut out = x.to_vec();
    for (head, values) in out.chunks_exact_mut(head_dim).enumerate() {
        let pos = positions[head / n_heads] as f64;
        for (i, &freq) in freqs.iter().enumerate() {
            let (a, b) = match layout {
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                RopeLayout::HalfSplit => (i, i + half),
            };
            let (s, c) = (pos * freq).sin_cos();
            let (x0, x1) = (values[a] as f64, values[b] as f64);
            values[a] = (x0 * c - x1 * s) as f32;
            values[b] = (x0 * s + x1 * c) as f32;
        }
    }
    out
}
