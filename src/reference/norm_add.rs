//! Reference for `gpu::kernels::norm_add`: the residual stream plus the RMSNorm of each row
//! times the norm's weights, in f64, rounded to f32 once.

use super::rmsnorm::inv_rms;

/// `out[r, c] + x[r, c] / sqrt(mean(x[r]²) + eps) * weight[c]` for rows of `width`; `out`
/// and `x` are `[m, width]`.
pub fn norm_add(out: &[f32], x: &[f32], weight: &[f32], eps: f32, width: usize) -> Vec<f32> {
    assert!(
        width > 0 && weight.len() == width && x.len().is_multiple_of(width),
        "norm_add reference: {} values of x, {} weights, rows of {width}",
        x.len(),
        weight.len()
    );
    assert_eq!(out.len(), x.len(), "norm_add reference: out and x differ");
    let mut result = Vec::with_capacity(out.len());
    for (row, dst) in x.chunks_exact(width).zip(out.chunks_exact(width)) {
        let scale = inv_rms(row, eps);
        result.extend(
            row.iter()
                .zip(weight)
                .zip(dst)
                .map(|((&v, &w), &o)| (o as f64 + v as f64 * scale * w as f64) as f32),
        );
    }
    result
}
