// Rotary position embedding, in place, for every head of every row:
//     (x[a], x[b]) <- (x[a] cos - x[b] sin, x[a] sin + x[b] cos),  angle = pos * freq[i]
// over the head_dim / 2 pairs (a, b) of a head:
//     rope_interleaved: (2i, 2i + 1)           GGUF / ggml "norm" rope
//     rope_half:        (i, i + head_dim / 2)   Hugging Face rotate_half / "neox"
//
// cos and sin come from a table built on the CPU in f64 (WGSL's sin and cos are accurate
// only near [-pi, pi]; angles here reach the context length). A position at or beyond the
// table's length writes NaN to its pairs, so the mistake cannot pass unnoticed.
// One invocation per pair; no reductions, so each value is independent of the batch.

struct Params {
    m: u32,             // rows (tokens)
    n_heads: u32,       // heads per row
    head_dim: u32,      // values per head (even)
    max_positions: u32, // rows of the table
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // [m, n_heads, head_dim]
@group(0) @binding(2) var<storage, read> positions: array<u32>; // [m]
@group(0) @binding(3) var<storage, read> table: array<f32>;     // [max_positions, head_dim / 2, 2] (cos, sin)

const WG: u32 = 256u;

// Rotates pair `pair` (a flat index over [m, n_heads, head_dim / 2]) of either layout.
fn rotate(pair: u32, interleaved: bool) {
    let half = p.head_dim / 2u;
    if (pair >= p.m * p.n_heads * half) {
        return;
    }
    let head = pair / half; // flat over [m, n_heads]
    let i = pair % half;
    let row = head / p.n_heads;
    var a = head * p.head_dim + i;
    var b = a + half;
    if (interleaved) {
        a = head * p.head_dim + 2u * i;
        b = a + 1u;
    }
    let pos = positions[row];
    if (pos >= p.max_positions) {
        let nan = quiet_nan();
        x[a] = nan;
        x[b] = nan;
        return;
    }
    let t = 2u * (pos * half + i);
    let c = table[t];
    let s = table[t + 1u];
    let x0 = x[a];
    let x1 = x[b];
    x[a] = fma(x0, c, -(x1 * s));
    x[b] = fma(x0, s, x1 * c);
}

fn pair_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// Dispatch: ceil(m * n_heads * head_dim / 2 / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn rope_interleaved(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    rotate(pair_index(wid, nwg, lid), true);
}

// Dispatch: as rope_interleaved.
@compute @workgroup_size(256)
fn rope_half(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    rotate(pair_index(wid, nwg, lid), false);
}
