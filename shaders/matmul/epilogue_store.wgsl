// Epilogue: y[i, n] = the output.
@group(0) @binding(B_OUT) var<storage, read_write> y: array<f32>; // [m, n_total]

fn emit(i: u32, n: u32, v: f32) {
    if (i < p.m && n < p.rows) {
        y[i * p.n_total + p.n_offset + n] = v;
    }
}

// Outputs come in pairs of adjacent weight rows (n even); the second may be past the end.
fn emit_pair(i: u32, n: u32, v0: f32, v1: f32) {
    emit(i, n, v0);
    emit(i, n + 1u, v1);
}
