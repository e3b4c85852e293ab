// Epilogue of the fused q|k|v projection: bias (when HAS_BIAS), RoPE on q and k, then q to
// its buffer and k and v to their slots of the paged KV pool.
//
// The weight's rows are q (q_dim), then k and v (kv_dim each). RoPE rotates the pairs of
// adjacent columns (2d, 2d + 1) of every head with angle pos * freq[d], from a cos/sin table
// built on the CPU in f64:
//     (a, b) <- (fma(a, cos, -(b * sin)), fma(a, sin, b * cos))
// (models whose RoPE pairs column d with d + head_dim / 2 have their q and k rows
// permuted at load so that those pairs are adjacent). A position at or beyond the table
// writes NaN, so the mistake cannot pass unnoticed. A slot past the pool writes nothing.
// The host puts `qkv_bias` before this (qkv_bias.wgsl: column col's bias from `vectors`,
// the RMSNorm prologue's binding or, after a plain prologue, its own).
@group(0) @binding(B_TABLE) var<storage, read> table: array<f32>;      // [max_positions, head_dim / 2, 2] (cos, sin)
@group(0) @binding(B_ROWINFO) var<storage, read> rowinfo: array<u32>;  // [m, 4]: (table offset, position, slot, adapter)
@group(0) @binding(B_Q) var<storage, read_write> q_out: array<f32>;   // [m, q_dim]
@group(0) @binding(B_K) var<storage, read_write> k_pool: array<f32>;  // [pool rows, kv_dim]
@group(0) @binding(B_V) var<storage, read_write> v_pool: array<f32>;  // [pool rows, kv_dim]

fn emit_pair(i: u32, n: u32, a0: f32, a1: f32) {
    if (i >= p.m || n >= p.rows) {
        return;
    }
    let col = p.n_offset + n; // even
    var v0 = a0;
    var v1 = a1;
    if (HAS_BIAS) {
        v0 = v0 + qkv_bias(col);
        v1 = v1 + qkv_bias(col + 1u);
    }
    let pos = rowinfo[4u * i + 1u];
    if (col < p.q_dim + p.kv_dim) {
        if (pos >= p.max_positions) {
            v0 = quiet_nan();
            v1 = v0;
        } else {
            let half = p.head_dim / 2u;
            let t = 2u * (pos * half + (col % p.head_dim) / 2u);
            let c = table[t];
            let s = table[t + 1u];
            let x0 = v0;
            let x1 = v1;
            v0 = fma(x0, c, -(x1 * s));
            v1 = fma(x0, s, x1 * c);
        }
    }
    if (col < p.q_dim) {
        q_out[i * p.q_dim + col] = v0;
        q_out[i * p.q_dim + col + 1u] = v1;
        return;
    }
    let slot = rowinfo[4u * i + 2u];
    if (slot >= arrayLength(&k_pool) / p.kv_dim) {
        return;
    }
    if (col < p.q_dim + p.kv_dim) {
        let at = slot * p.kv_dim + col - p.q_dim;
        k_pool[at] = v0;
        k_pool[at + 1u] = v1;
    } else {
        let at = slot * p.kv_dim + col - p.q_dim - p.kv_dim;
        v_pool[at] = v0;
        v_pool[at + 1u] = v1;
    }
}
