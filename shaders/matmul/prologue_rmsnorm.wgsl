// Prologue: RMSNorm of each row of x, applied as x is read:
//     xin[i, k] = (x[i, k] * inv_rms[i]) * g[k],  inv_rms[i] = 1 / sqrt(ss_i / k + eps)
// with ss_i the sum of squares in the canonical order: per block of 32 values a sequential
// fma chain from 0, the blocks' parts added in block order. Every shape computes inv_rms
// with this same order (its invocations split the blocks, one folds them), so a row's
// normalised values are bitwise the same in every shape and batch.
//
// The shape declares `WG` (invocations), `PRO_ROWS` (rows per workgroup) and the workgroup
// array `scratch` of `SCRATCH` f32 (used here before the shape's own work begins).
@group(0) @binding(B_VECTORS) var<storage, read> vectors: array<f32>; // norm weights at p.vec_offset

var<workgroup> inv_rms: array<f32, PRO_ROWS>;

// The sum of squares of block b of x's row `row`.
fn square_block(row: u32, b: u32) -> f32 {
    let k1 = min(b * 32u + 32u, p.k);
    var part = 0.0;
    var k = b * 32u;
    for (; k + 4u <= k1; k += 4u) {
        let v = x4(row, k);
        part = fma4(v, v, part);
    }
    for (; k < k1; k += 1u) {
        let v = x1(row, k);
        part = fma(v, v, part);
    }
    return part;
}

// inv_rms of batch rows first .. first + PRO_ROWS (clamped to the last row). Every
// invocation calls it, in uniform control flow.
fn prologue_setup(first: u32, lid: u32) {
    let blocks = (p.k + 31u) / 32u;
    let per_chunk = SCRATCH / PRO_ROWS;
    var ss = 0.0;
    for (var c0 = 0u; c0 < blocks; c0 += per_chunk) {
        let n = min(per_chunk, blocks - c0);
        for (var t = lid; t < PRO_ROWS * n; t += WG) {
            let row = x_row(min(first + t / n, p.m - 1u));
            scratch[t] = square_block(row, c0 + t % n);
        }
        workgroupBarrier();
        if (lid < PRO_ROWS) {
            for (var j = 0u; j < n; j += 1u) {
                ss = ss + scratch[lid * n + j];
            }
        }
        workgroupBarrier();
    }
    if (lid < PRO_ROWS) {
        inv_rms[lid] = 1.0 / sqrt(ss / f32(p.k) + p.eps);
    }
    workgroupBarrier();
}

fn norm4(k: u32) -> vec4<f32> {
    let o = p.vec_offset + k;
    return vec4<f32>(vectors[o], vectors[o + 1u], vectors[o + 2u], vectors[o + 3u]);
}

fn xin4(i: u32, local: u32, k: u32) -> vec4<f32> {
    return (x4(x_row(i), k) * inv_rms[local]) * norm4(k);
}

fn xin1(i: u32, local: u32, k: u32) -> f32 {
    return (x1(x_row(i), k) * inv_rms[local]) * vectors[p.vec_offset + k];
}
