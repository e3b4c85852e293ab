// Per-head RMSNorm and RoPE of a stored q|k|v projection (models with q and k norms,
// Qwen3), then q to its buffer and k and v to their slots of the paged KV pool:
//     q head h:  (x * inv_rms) * q_norm, rotated       -> q_out[i, h]
//     k head h:  (x * inv_rms) * k_norm, rotated       -> k_pool[slot, h]
//     v head h:  x as it is                            -> v_pool[slot, h]
// with inv_rms = 1 / sqrt(ss / head_dim + eps), ss the head's sum of squares folded in one
// fixed order: a sequential fma chain over its values from 0, in stored order. One
// invocation owns one head of one row and reads nothing another writes, so a head's
// result is bitwise the same whatever else is in the batch.
//
// Rows of x are [q (q_dim), k (kv_dim), v (kv_dim)], q and k heads with their RoPE pairs
// in adjacent columns (2d, 2d + 1) (rows permuted at load, norm weights with them), each
// pair rotated by the angle pos * freq[d] from the cos/sin table built on the CPU in f64,
// exactly as the fused q|k|v epilogue does (shaders/matmul/epilogue_qkv_rope.wgsl):
//     (a, b) <- (fma(a, cos, -(b * sin)), fma(a, sin, b * cos))
// A position at or beyond the table writes NaN to q and k. A slot past the pool writes
// no k or v (q is still written).
// The host appends shaders/common/nan.wgsl (quiet_nan).

struct Params {
    m: u32,             // rows
    q_dim: u32,         // n_heads * head_dim
    kv_dim: u32,        // n_kv_heads * head_dim
    head_dim: u32,      // even
    q_norm: u32,        // offset of the q norm's head_dim weights in `vectors`
    k_norm: u32,        // offset of the k norm's head_dim weights in `vectors`
    eps: f32,
    max_positions: u32, // positions in the table
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;             // [m, q_dim + 2 kv_dim]
@group(0) @binding(2) var<storage, read> vectors: array<f32>;       // the layer's f32 vectors
@group(0) @binding(3) var<storage, read> table: array<f32>;         // [max_positions, head_dim / 2, 2] (cos, sin)
@group(0) @binding(4) var<storage, read> rowinfo: array<u32>;       // [m, 4]: (table offset, position, slot, adapter)
@group(0) @binding(5) var<storage, read_write> q_out: array<f32>;   // [m, q_dim]
@group(0) @binding(6) var<storage, read_write> k_pool: array<f32>;  // [pool rows, kv_dim]
@group(0) @binding(7) var<storage, read_write> v_pool: array<f32>;  // [pool rows, kv_dim]

const WG: u32 = 64u;

// Dispatch: ceil(m * heads_per_row / 64) workgroups, folded into (x, y, 1), with
// heads_per_row = (q_dim + 2 kv_dim) / head_dim: q heads, then k heads, then v heads.
@compute @workgroup_size(64)
fn head_norm_rope(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let width = p.q_dim + 2u * p.kv_dim;
    let heads = width / p.head_dim;
    let unit = (wid.y * nwg.x + wid.x) * WG + lid;
    if (unit >= p.m * heads) {
        return;
    }
    let i = unit / heads;
    let col0 = (unit % heads) * p.head_dim; // the head's first column in the row
    let base = i * width + col0;
    let slot = rowinfo[4u * i + 2u];
    let in_pool = slot < arrayLength(&k_pool) / p.kv_dim;
    if (col0 >= p.q_dim + p.kv_dim) {
        // A v head: copied as it is.
        if (in_pool) {
            let at = slot * p.kv_dim + col0 - p.q_dim - p.kv_dim;
            for (var d = 0u; d < p.head_dim; d += 1u) {
                v_pool[at + d] = x[base + d];
            }
        }
        return;
    }
    let is_q = col0 < p.q_dim;
    if (!is_q && !in_pool) {
        return;
    }
    var ss = 0.0;
    for (var d = 0u; d < p.head_dim; d += 1u) {
        let v = x[base + d];
        ss = fma(v, v, ss);
    }
    let inv_rms = 1.0 / sqrt(ss / f32(p.head_dim) + p.eps);
    let w = select(p.k_norm, p.q_norm, is_q);
    let pos = rowinfo[4u * i + 1u];
    let half = p.head_dim / 2u;
    for (var d = 0u; d < half; d += 1u) {
        let x0 = (x[base + 2u * d] * inv_rms) * vectors[w + 2u * d];
        let x1 = (x[base + 2u * d + 1u] * inv_rms) * vectors[w + 2u * d + 1u];
        var v0 = quiet_nan();
        var v1 = v0;
        if (pos < p.max_positions) {
            let t = 2u * (pos * half + d);
            let c = table[t];
            let s = table[t + 1u];
            v0 = fma(x0, c, -(x1 * s));
            v1 = fma(x0, s, x1 * c);
        }
        if (is_q) {
            let at = i * p.q_dim + col0 + 2u * d;
            q_out[at] = v0;
            q_out[at + 1u] = v1;
        } else {
            let at = slot * p.kv_dim + col0 - p.q_dim + 2u * d;
            k_pool[at] = v0;
            k_pool[at + 1u] = v1;
        }
    }
}
