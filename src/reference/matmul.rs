//! Reference for `gpu::kernels::matmul`: `y[m, n] = Σ_k x[m, k] · w[n, k]`, summed in f64,
//! and the same with a LoRA term, `y[i, n] += Σ_j b[n, j] · t[i, j]` for the rows whose
//! adapter word is not 0 (summed in f64 with the product, rounded once).

/// `x` is `[m, k]`, `w` is `[n, k]` (already dequantized), the result `[m, n]`.
pub fn matmul(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let none = vec![0; m];
    let no_term = Lora {
        t: &[],
        b: &[],
        rank: 0,
        adapters: &none,
    };
    matmul_lora(x, w, (m, k, n), &no_term)
}

/// A LoRA term: `t` is `[m, rank]`, `b` `[n, rank]` (B' in the weight's row layout), and
/// `adapters[i]` row i's RowInfo adapter word (0: the row gets no term).
pub struct Lora<'a> {
    pub t: &'a [f32],
    pub b: &'a [f32],
    pub rank: usize,
    pub adapters: &'a [u32],
}

/// `x · wᵀ + t · bᵀ` for the rows with the adapter, `x · wᵀ` for the others.
pub fn matmul_lora(
    x: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    lora: &Lora,
) -> Vec<f32> {
    let r = lora.rank;
    assert_eq!(lora.adapters.len(), m, "reference matmul: adapter words");
    let mut y = vec![0.0f32; m * n];
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        let with_term = lora.adapters[i] != 0;
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let mut s: f64 = xr.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
            if with_term {
                let (tr, br) = (&lora.t[i * r..(i + 1) * r], &lora.b[j * r..(j + 1) * r]);
                s += tr
                    .iter()
                    .zip(br)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>();
            }
            y[i * n + j] = s as f32;
        }
    }
    y
}
