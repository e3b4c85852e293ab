//! Reference for the RMSNorm prologue of the fused matmuls: `x / sqrt(mean(x²) + eps) *
//! weight`, in f64.

/// `x` is `[m, d]`, `weight` is `[d]`; the result is `[m, d]`.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, d: usize) -> Vec<f32> {
    assert_eq!(
        weight.len(),
        d,
        "rmsnorm: weight has {} values, rows have {d}",
        weight.len()
    );
    assert_eq!(
        x.len() % d,
        0,
        "rmsnorm: x has {} values, not whole rows of {d}",
        x.len()
    );
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(d) {
        let scale = inv_rms(row, eps);
        out.extend(
            row.iter()
                .zip(weight)
                .map(|(&v, &w)| (v as f64 * scale * w as f64) as f32),
        );
    }
    out
}

/// `1 / sqrt(mean(row²) + eps)`, in f64.
pub fn inv_rms(row: &[f32], eps: f32) -> f64 {
    let mean_square = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / row.len() as f64;
    1.0 / (mean_square + eps as f64).sqrt()
}
