//! Reference for `gpu::kernels::attention`: causal grouped-query attention over a
//! contiguous KV cache, a plain softmax (max subtracted) accumulated in f64.

use crate::gpu::kernels::attention::AttentionShape;

/// `q` is `[t, n_heads, head_dim]`, `k` and `v` are `[s_cap, n_kv_heads, head_dim]` with
/// rows `0 .. pos0 + t` valid; the result is `[t, n_heads, head_dim]`. Query row `i` (at
/// position `pos0 + i`) attends keys `0 ..= pos0 + i`; query head `h` uses kv head
/// `h / (n_heads / n_kv_heads)`.
pub fn attention(shape: &AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    assert!(
        shape.n_kv_heads > 0 && shape.n_heads.is_multiple_of(shape.n_kv_heads),
        "attention reference: n_heads must be a multiple of n_kv_heads"
    );
    let AttentionShape {
        t,
        pos0,
        n_heads,
        n_kv_heads,
        head_dim: hd,
        scale,
    } = *shape;
    assert!(
        q.len() >= shape.q_len(),
        "attention reference: q is too short"
    );
    assert!(
        k.len() >= shape.kv_len() && v.len() >= shape.kv_len(),
        "attention reference: k or v is too short"
    );
    let group = n_heads / n_kv_heads;
    let row = |buf: &[f32], key: usize, g: usize| -> Vec<f64> {
        let start = (key * n_kv_heads + g) * hd;
        buf[start..start + hd].iter().map(|&x| x as f64).collect()
    };
    let mut out = vec![0.0f32; shape.q_len()];
    for i in 0..t {
        let n_keys = pos0 + i + 1;
        for h in 0..n_heads {
            let g = h / group;
            let start = (i * n_heads + h) * hd;
            let qr = &q[start..start + hd];
            let scores: Vec<f64> = (0..n_keys)
                .map(|j| {
                    let kr = row(k, j, g);
                    qr.iter().zip(&kr).map(|(&a, b)| a as f64 * b).sum::<f64>() * scale as f64
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut o = vec![0.0f64; hd];
            for (j, w) in weights.iter().enumerate() {
                for (od, vd) in o.iter_mut().zip(row(v, j, g)) {
                    *od += w / total * vd;
                }
            }
            for (dst, x) in out[start..start + hd].iter_mut().zip(o) {
                *dst = x as f32;
            }
        }
    }
    out
}
