//! Reference for `gpu::kernels::embedding`: rows of a dequantized table, each value times
//! the scale (one f32 multiply), zeros for an id past its end.

/// `table` is `[vocab, dim]` (already dequantized); the result is `[ids.len(), dim]`.
pub fn embedding(table: &[f32], dim: usize, ids: &[u32], scale: f32) -> Vec<f32> {
    assert_eq!(
        table.len() % dim.max(1),
        0,
        "embedding: table is not whole rows of {dim}"
    );
    let vocab = table.len() / dim.max(1);
    let mut out = Vec::with_capacity(ids.len() * dim);
    for &id in ids {
        let id = id as usize;
        if id < vocab {
            out.extend(table[id * dim..(id + 1) * dim].iter().map(|v| v * scale));
        } else {
            out.extend(std::iter::repeat_n(0.0, dim));
        }
    }
    out
}
