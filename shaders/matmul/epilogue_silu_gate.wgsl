// Epilogue: the gated MLP activation. The weight's rows alternate gate and up (row 2j is
// gate j, row 2j + 1 is up j), so each pair of outputs gives
//     y[i, j] = silu(gate) * up
// with silu(x) = x * sigmoid(x), exp() taken only of a non-positive argument: it never
// overflows, so a large |x| gives x (x >> 0) or -0 (x << 0), never inf or NaN.
@group(0) @binding(B_OUT) var<storage, read_write> y: array<f32>; // [m, y_cols]

fn silu(x: f32) -> f32 {
    let e = exp(-abs(x));
    let sigmoid = select(e, 1.0, x >= 0.0) / (1.0 + e);
    return x * sigmoid;
}

fn emit_pair(i: u32, n: u32, gate: f32, up: f32) {
    if (i < p.m && n + 1u < p.rows) {
        y[i * p.y_cols + (p.n_offset + n) / 2u] = silu(gate) * up;
    }
}
