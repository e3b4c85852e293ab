// Epilogue: the gated MLP activation of Gemma's models. The weight's rows alternate gate
// and up (row 2j is gate j, row 2j + 1 is up j), so each pair of outputs gives
//     y[i, j] = gelu_tanh(gate) * up
// with gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3) (PyTorch's
// gelu(approximate="tanh")). WGSL's tanh is not used: implementations may compute it as
// (e^2u - 1) / (e^2u + 1), which is inf / inf = NaN once e^2u overflows (|u| > 44), and
// 1 + tanh(u) cancels for negative u. Instead 0.5 (1 + tanh(u)) = sigmoid(2u), taken as
// silu's sigmoid is, with exp() only of a non-positive argument: it never overflows. The
// cubic is taken of x clamped to +-15, where exp(-2|u|) has already underflowed to 0 (2|u|
// > 260), so the clamp changes no output and x^3 cannot overflow: every finite gate gives
// a finite value, x itself for a large positive x and -0 for a large negative one.
@group(0) @binding(B_OUT) var<storage, read_write> y: array<f32>; // [m, y_cols]

fn gelu_tanh(x: f32) -> f32 {
    let xc = clamp(x, -15.0, 15.0);
    let u = 0.7978845608 * (xc + 0.044715 * xc * xc * xc);
    let e = exp(-2.0 * abs(u));
    let sigmoid = select(e, 1.0, u >= 0.0) / (1.0 + e);
    return x * sigmoid;
}

fn emit_pair(i: u32, n: u32, gate: f32, up: f32) {
    if (i < p.m && n + 1u < p.rows) {
        y[i * p.y_cols + (p.n_offset + n) / 2u] = gelu_tanh(gate) * up;
    }
}
