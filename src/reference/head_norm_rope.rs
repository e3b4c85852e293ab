//! Reference for `head_norm_rope`, as the chain of references it replaces: the
//! stored q|k|v projection split into q, k and v; RMSNorm over each q head and each k
//! head (`rmsnorm` with rows of `head_dim`); RoPE on adjacent pairs; the KV-cache write.
//! A position at or beyond `max_positions` gives NaN q and k (as the GPU's table does).

use crate::gpu::kernels::rope::RopeLayout;
use crate::reference::{kv_write::kv_write, rmsnorm::rmsnorm, rope::rope_frequencies};

/// The heads: `n_heads` q heads, `n_kv_heads` k and v heads of `head_dim`.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// `x` is `[m, q_dim + 2 kv_dim]` for `positions[m]` and `slots[m]`; `freqs` has
/// `head_dim / 2` values. Returns q `[m, q_dim]` and writes k and v to the pools' slots
/// (a slot past the pools writes nothing).
#[allow(clippy::too_many_arguments)]
pub fn head_norm_rope(
    x: &[f32],
    heads: Heads,
    (q_norm, k_norm, eps): (&[f32], &[f32], f32),
    positions: &[u32],
    slots: &[u32],
    (freqs, max_positions): (&[f64], usize),
    k_pool: &mut [f32],
    v_pool: &mut [f32],
) -> Vec<f32> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    assert_eq!(freqs.len() * 2, head_dim, "head_norm_rope: frequencies");
    let (q_dim, kv_dim) = (n_heads * head_dim, n_kv_heads * head_dim);
    let width = q_dim + 2 * kv_dim;
    assert_eq!(x.len(), positions.len() * width, "head_norm_rope: x");
    let part = |from: usize, len: usize| -> Vec<f32> {
        x.chunks_exact(width)
            .flat_map(|row| row[from..from + len].to_vec())
            .collect()
    };
    let (q, k, v) = (
        part(0, q_dim),
        part(q_dim, kv_dim),
        part(q_dim + kv_dim, kv_dim),
    );
    let normed_and_rotated = |y: &[f32], weight: &[f32], n: usize| -> Vec<f32> {
        let normed = rmsnorm(y, weight, eps, head_dim);
        let mut out = rope_frequencies(&normed, positions, n, freqs, RopeLayout::Interleaved);
        for (row, &pos) in out.chunks_exact_mut(n * head_dim).zip(positions) {
            if pos as usize >= max_positions {
                row.fill(f32::NAN);
            }
        }
        out
    };
    let q = normed_and_rotated(&q, q_norm, n_heads);
    let k = normed_and_rotated(&k, k_norm, n_kv_heads);
    kv_write(&k, &v, slots, kv_dim, k_pool, v_pool);
    q
}
