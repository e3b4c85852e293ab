// Matrix multiplication against a weight matrix in its stored format:
//     y[m, n_offset + n] = sum_k x[m, k] * W[n, k]      for the rows n of one weight part.
//
// Two paths, one arithmetic. `matvec` computes one output per invocation (decode: one row
// of x); `matmul_tiled` computes TM rows of x per invocation, loading each weight once for
// all of them (prefill, batches). For every output both run exactly the same sequence of
// operations: four running fma lanes over k in steps of 4, a scalar fma tail, then
// ((l0 + l1) + (l2 + l3)) + tail. So a row's result is bitwise the same whichever path
// computed it and however many rows shared the dispatch.
//
// The host appends the weight decoder (w_load4, w_load1) for the weight's format and one
// of the activation readers in shaders/activations/ (x4, x1 and the binding of x):
// vec4 loads when k % 4 == 0, scalar loads otherwise. Both read the same values.

struct Params {
    m: u32,         // rows of x
    k: u32,         // columns of x = values per weight row
    rows: u32,      // weight rows in this part
    n_offset: u32,  // first output column written by this part
    n_total: u32,   // columns of y
    row_bytes: u32, // bytes per weight row in its stored format
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// binding 1 is x [m, k] f32: declared by the activation reader.
@group(0) @binding(2) var<storage, read> w: array<u32>;       // [rows, row_bytes] stored format
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [m, n_total]

const TM: u32 = 8u;

fn finish(lanes: vec4<f32>, tail: f32) -> f32 {
    return ((lanes.x + lanes.y) + (lanes.z + lanes.w)) + tail;
}

// Dispatch: (ceil(rows / 64), m, 1).
@compute @workgroup_size(64)
fn matvec(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = gid.x;
    let m = gid.y;
    if (n >= p.rows || m >= p.m) {
        return;
    }
    let base = n * p.row_bytes;
    let k4 = p.k & ~3u;
    var lanes = vec4<f32>(0.0);
    for (var k = 0u; k < k4; k += 4u) {
        lanes = fma(w_load4(base, k), x4(m, k), lanes);
    }
    var tail = 0.0;
    for (var k = k4; k < p.k; k += 1u) {
        tail = fma(w_load1(base, k), x1(m, k), tail);
    }
    y[m * p.n_total + p.n_offset + n] = finish(lanes, tail);
}

// Dispatch: (ceil(rows / 64), ceil(m / TM), 1).
@compute @workgroup_size(64)
fn matmul_tiled(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = gid.x;
    let m0 = gid.y * TM;
    if (n >= p.rows) {
        return;
    }
    let base = n * p.row_bytes;
    let k4 = p.k & ~3u;
    var lanes: array<vec4<f32>, TM>;
    var tails: array<f32, TM>;
    for (var k = 0u; k < k4; k += 4u) {
        let wv = w_load4(base, k);
        for (var t = 0u; t < TM; t += 1u) {
            // Rows past the end repeat the last row; their results are not written.
            let m = min(m0 + t, p.m - 1u);
            lanes[t] = fma(wv, x4(m, k), lanes[t]);
        }
    }
    for (var k = k4; k < p.k; k += 1u) {
        let wk = w_load1(base, k);
        for (var t = 0u; t < TM; t += 1u) {
            let m = min(m0 + t, p.m - 1u);
            tails[t] = fma(wk, x1(m, k), tails[t]);
        }
    }
    for (var t = 0u; t < TM; t += 1u) {
        let m = m0 + t;
        if (m < p.m) {
            y[m * p.n_total + p.n_offset + n] = finish(lanes[t], tails[t]);
        }
    }
}
