// Matrix multiplication against a weight matrix in its stored format:
//     y[m, n_offset + n] = sum_k x[m, k] * W[n, k]      for the rows n of one weight part.
//
// Each invocation computes a tile of TM rows of x by TN weight rows (the host writes the
// entry point for the tile: small for decode, larger for batches). Loading an x value once
// for TN weight rows and decoding a weight once for TM rows of x is what makes the tile
// pay: on adapters that run invocations as CPU SIMD lanes every load is a gather.
//
// Every tile size runs exactly the same sequence of operations for every output: four
// running fma lanes over k in steps of 4, a scalar fma tail, then
// ((l0 + l1) + (l2 + l3)) + tail. So an output is bitwise the same whatever the tile and
// however many rows shared the dispatch (batch invariance).
//
// The host appends the weight decoder for the weight's format (w_block and w_block4 for
// whole 32-value blocks, w_load4 and w_load1 for the rest) and one of the activation
// readers in shaders/activations/ (x4, x1 and the binding of x): vec4 loads when
// k % 4 == 0, scalar loads otherwise. Both read the same values.

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

const WORKGROUP: u32 = 64u;

fn finish(lanes: vec4<f32>, tail: f32) -> f32 {
    return ((lanes.x + lanes.y) + (lanes.z + lanes.w)) + tail;
}

// Writes one output of the tile, unless its row of x or weight row is past the end.
fn store(m: u32, n: u32, lanes: vec4<f32>, tail: f32) {
    if (m < p.m && n < p.rows) {
        y[m * p.n_total + p.n_offset + n] = finish(lanes, tail);
    }
}

// The entry point `matmul` follows, written by the host for the tile (see
// src/gpu/kernels/matmul_tile.rs).
