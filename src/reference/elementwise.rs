//! References for the elementwise steps the fused matmuls run in their epilogues (SiLU- and
//! GELU-gate, the residual add, the bias) and the gather of the rows that draw, computed in
//! f64.

/// `silu(x) = x / (1 + e^-x)`: 0 for x -> -inf, x for x -> +inf.
pub fn silu(x: f64) -> f64 {
    if x >= 0.0 {
        x / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        x * e / (1.0 + e)
    }
}

/// `out[i] = silu(gate[i]) * up[i]`.
pub fn silu_gate(gate: &[f32], up: &[f32]) -> Vec<f32> {
    assert_eq!(
        gate.len(),
        up.len(),
        "silu_gate: gate and up differ in length"
    );
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| (silu(g as f64) * u as f64) as f32)
        .collect()
}

/// `gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x³)))`, PyTorch's
/// `gelu(approximate="tanh")` (Gemma's MLP activation): x for x -> +inf, 0 for x -> -inf.
pub fn gelu_tanh(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + u.tanh())
}

/// `out[i] = gelu_tanh(gate[i]) * up[i]`.
pub fn gelu_gate(gate: &[f32], up: &[f32]) -> Vec<f32> {
    assert_eq!(
        gate.len(),
        up.len(),
        "gelu_gate: gate and up differ in length"
    );
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| (gelu_tanh(g as f64) * u as f64) as f32)
        .collect()
}

/// `a[i] + b[i]`.
pub fn residual_add(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "residual_add: a and b differ in length");
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// `x[r, c] + bias[c]` for rows of `bias.len()` values.
pub fn add_bias(x: &[f32], bias: &[f32]) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, v)| v + bias[i % bias.len()])
        .collect()
}

/// `src[rows[r], :]` for each `r`, rows of `width` values (zeros for a row past `src`, as
/// on the GPU).
pub fn gather_rows(src: &[f32], rows: &[u32], width: usize) -> Vec<f32> {
    assert!(width > 0, "gather_rows reference: width is 0");
    rows.iter()
        .flat_map(|&r| {
            let start = r as usize * width;
            match src.get(start..start + width) {
                Some(row) => row.to_vec(),
                None => vec![0.0; width],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_tanh_matches_pytorch_and_saturates() {
        // torch.nn.functional.gelu(x, approximate="tanh") in f64.
        for (x, want) in [
            (1.0, 0.841_191_990_608_276_8),
            (-1.0, -0.158_808_009_391_723_24),
            (3.0, 2.996_362_607_918_227),
        ] {
            assert!((gelu_tanh(x) - want).abs() < 1e-12, "{x}: {}", gelu_tanh(x));
        }
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert_eq!(gelu_tanh(1e20), 1e20);
        assert_eq!(gelu_tanh(-1e20), 0.0);
    }
}
