// The RMSNorm of each of the m rows of x, added to `out` (the post-norm residual add of
// Gemma's norms after attention and after the MLP) or stored in it (a normalised input
// that several matmuls then read plainly: a LoRA site's A product and its base projection):
//     out[r, c] = out[r, c] + (x[r, c] * inv_rms[r]) * g[c]   (ADD), or
//     out[r, c] = (x[r, c] * inv_rms[r]) * g[c],      g = vectors[offset .. offset + width]
//     inv_rms[r] = 1 / sqrt(ss_r / width + eps)
// with exactly the arithmetic of the matmul's RMSNorm prologue (matmul/prologue_rmsnorm.wgsl),
// so a norm gives the same bits here as there: ss_r is summed in the canonical order, per
// block of 32 values a sequential fma chain from 0, the blocks' parts added in block order
// from 0; the normalised value is (x * inv_rms) * g, rounded twice.
//
// The host prepends `const ADD: bool` and `const ROW_PER_WORKGROUP: bool`:
// - false (CPU adapters): each invocation owns a row, sums its blocks and writes it;
// - true (GPUs): a workgroup owns a row, its invocations sum blocks lid, lid + WG, ... in
//   chunks of WG blocks, invocation 0 adds a chunk's parts in block order, and the
//   invocations write the row's columns lid, lid + WG, ...
// The same operations on the same values in the same order: bitwise the same outputs.
//
// Plain core WGSL: no f16, no subgroups.

struct Params {
    m: u32,      // rows
    width: u32,  // values per row
    offset: u32, // where the norm's weights start in `vectors`
    eps: f32,    // added to the mean square
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [m, width]
@group(0) @binding(2) var<storage, read> vectors: array<f32>;    // norm weights at p.offset
@group(0) @binding(3) var<storage, read_write> out: array<f32>;  // [m, width], added to or stored

const WG: u32 = 64u;

var<workgroup> parts: array<f32, WG>;
var<workgroup> row_inv_rms: f32;

// The sum of squares of block b of the row starting at `base`: a sequential fma chain.
fn square_block(base: u32, b: u32) -> f32 {
    let k1 = min(b * 32u + 32u, p.width);
    var part = 0.0;
    for (var k = b * 32u; k < k1; k += 1u) {
        let v = x[base + k];
        part = fma(v, v, part);
    }
    return part;
}

fn inv_rms_of(ss: f32) -> f32 {
    return 1.0 / sqrt(ss / f32(p.width) + p.eps);
}

// Adds (or stores) column c of the normalised row starting at `base`.
fn add_normed(base: u32, c: u32, inv_rms: f32) {
    let normed = (x[base + c] * inv_rms) * vectors[p.offset + c];
    if (ADD) {
        out[base + c] = out[base + c] + normed;
    } else {
        out[base + c] = normed;
    }
}

// Dispatch: a grid of (one workgroup per row) or (one per WG rows), numbered
// wid.y * num_workgroups.x + wid.x.
@compute @workgroup_size(64)
fn norm_add(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = wid.y * nwg.x + wid.x;
    let blocks = (p.width + 31u) / 32u;
    if (ROW_PER_WORKGROUP) {
        let row = group;
        if (row >= p.m) {
            return; // uniform: the whole workgroup leaves
        }
        let base = row * p.width;
        var ss = 0.0;
        for (var c0 = 0u; c0 < blocks; c0 += WG) {
            let n = min(WG, blocks - c0);
            if (lid < n) {
                parts[lid] = square_block(base, c0 + lid);
            }
            workgroupBarrier();
            if (lid == 0u) {
                for (var j = 0u; j < n; j += 1u) {
                    ss = ss + parts[j];
                }
            }
            workgroupBarrier();
        }
        if (lid == 0u) {
            row_inv_rms = inv_rms_of(ss);
        }
        workgroupBarrier();
        let inv_rms = row_inv_rms;
        for (var c = lid; c < p.width; c += WG) {
            add_normed(base, c, inv_rms);
        }
    } else {
        let row = group * WG + lid;
        if (row >= p.m) {
            return;
        }
        let base = row * p.width;
        var ss = 0.0;
        for (var b = 0u; b < blocks; b += 1u) {
            ss = ss + square_block(base, b);
        }
        let inv_rms = inv_rms_of(ss);
        for (var c = 0u; c < p.width; c += 1u) {
            add_normed(base, c, inv_rms);
        }
    }
}
