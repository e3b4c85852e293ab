// Elementwise kernels over flat f32 arrays of any length n.
//
//     silu_gate:    dst[i] = silu(src0[i]) * src1[i]    (out = silu(gate) * up)
//     residual_add: dst[i] += src0[i]                   (a += b, in place)
//     add_bias:     dst[i] += src0[i % cols]            (x[m, cols] += bias[cols], in place)
//     gather_rows:  dst[r, c] = src0[rows[r], c]        (m rows of cols values; n = m * cols)
//
// The entry points share one set of bindings; residual_add and add_bias bind the first two.
// src1 is read as u32 words: silu_gate bitcasts them to f32 (exact), gather_rows reads them
// as row indices. gather_rows copies, bitwise; a row index past src gives zeros.
// One invocation per element. The host folds the workgroups into a 2D grid when there are
// more than the adapter allows per dimension: element i is
// (wid.y * num_workgroups.x + wid.x) * 256 + lid, and invocations past n do nothing.

struct Params {
    n: u32,    // elements of dst written
    cols: u32, // add_bias: values per row (the bias length); gather_rows: values per row
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>; // [n] silu_gate: out; residual_add: a; add_bias: x; gather_rows: [m, cols]
@group(0) @binding(2) var<storage, read> src0: array<f32>;      // [n] silu_gate: gate; residual_add: b; add_bias: bias [cols]; gather_rows: [*, cols]
@group(0) @binding(3) var<storage, read> src1: array<u32>;      // silu_gate: up [n] (f32 bits); gather_rows: rows [m]

const WG: u32 = 256u;

fn element(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// x * sigmoid(x), with exp() only of a non-positive argument: it never overflows, so a
// large |x| gives x (x >> 0) or -0 (x << 0), never inf or NaN.
fn silu(x: f32) -> f32 {
    let e = exp(-abs(x));
    let sigmoid = select(e, 1.0, x >= 0.0) / (1.0 + e);
    return x * sigmoid;
}

// Dispatch: ceil(n / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn silu_gate(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = element(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    dst[i] = silu(src0[i]) * bitcast<f32>(src1[i]);
}

// Dispatch: ceil(n / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn residual_add(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = element(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    dst[i] = dst[i] + src0[i];
}

// Dispatch: ceil(n / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn add_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = element(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    dst[i] = dst[i] + src0[i % p.cols];
}

// Dispatch: ceil(n / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn gather_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = element(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    let r = i / p.cols;
    let c = i % p.cols;
    let src_row = src1[r];
    if (src_row >= arrayLength(&src0) / p.cols) {
        dst[i] = 0.0;
        return;
    }
    dst[i] = src0[src_row * p.cols + c];
}
