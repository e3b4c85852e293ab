//! Reference for `gpu::kernels::attention`: causal grouped-query attention (optionally
//! within a sliding window) over a paged KV pool for a varlen batch, a plain softmax (max
//! subtracted) accumulated in f64.

use crate::gpu::kernels::RowInfo;
use crate::gpu::kernels::attention::AttentionShape;

/// The pool row holding key `key` of the sequence whose block table starts at `table`:
/// `block_tables[table + key / block_size] * block_size + key % block_size`.
pub fn pool_row(block_tables: &[u32], table: usize, key: usize, block_size: usize) -> usize {
    block_tables[table + key / block_size] as usize * block_size + key % block_size
}

/// `q` is `[t, n_heads, head_dim]`; `k_pool` and `v_pool` are
/// `[num_blocks * block_size, n_kv_heads, head_dim]`; `rows` gives per query row the offset
/// of its sequence's block table in `block_tables` and its absolute position `p`.
/// Query row `i` attends keys `lo ..= p` of its sequence (`lo` is
/// [`AttentionShape::first_key`]: 0, or the first of the last `w` keys under a sliding
/// window of `w`), key `j` at pool row
/// [`pool_row`]`(block_tables, offset, j, block_size)`; query head `h` uses kv head
/// `h / (n_heads / n_kv_heads)`. The result is `[t, n_heads, head_dim]`.
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    block_tables: &[u32],
    rows: &[RowInfo],
) -> Vec<f32> {
    assert!(
        shape.n_kv_heads > 0 && shape.n_heads.is_multiple_of(shape.n_kv_heads),
        "attention reference: n_heads must be a multiple of n_kv_heads"
    );
    assert!(shape.block_size > 0, "attention reference: block_size is 0");
    let AttentionShape {
        t,
        n_heads,
        n_kv_heads,
        head_dim: hd,
        block_size,
        scale,
        window: _,
    } = *shape;
    assert!(
        q.len() >= shape.q_len(),
        "attention reference: q is too short"
    );
    assert!(
        rows.len() >= t,
        "attention reference: {} rows for t = {t}",
        rows.len()
    );
    let group = n_heads / n_kv_heads;
    let row = |buf: &[f32], pool_row: usize, g: usize| -> Vec<f64> {
        let start = (pool_row * n_kv_heads + g) * hd;
        assert!(
            start + hd <= buf.len(),
            "attention reference: pool row {pool_row} is past the pool"
        );
        buf[start..start + hd].iter().map(|&x| x as f64).collect()
    };
    let mut out = vec![0.0f32; shape.q_len()];
    for (i, query) in rows[..t].iter().enumerate() {
        let table = query.table_offset as usize;
        let n_keys = query.keys() as usize;
        let first = shape.first_key(query.position) as usize;
        let slots: Vec<usize> = (first..n_keys)
            .map(|j| pool_row(block_tables, table, j, block_size))
            .collect();
        for h in 0..n_heads {
            let g = h / group;
            let start = (i * n_heads + h) * hd;
            let qr = &q[start..start + hd];
            let scores: Vec<f64> = slots
                .iter()
                .map(|&s| {
                    let kr = row(k_pool, s, g);
                    qr.iter().zip(&kr).map(|(&a, b)| a as f64 * b).sum::<f64>() * scale as f64
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut o = vec![0.0f64; hd];
            for (w, &s) in weights.iter().zip(&slots) {
                for (od, vd) in o.iter_mut().zip(row(v_pool, s, g)) {
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
