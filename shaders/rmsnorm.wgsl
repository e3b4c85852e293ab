// RMSNorm of each row:  out[r, c] = x[r, c] / sqrt(mean_c(x[r, c]^2) + eps) * weight[c]
//
// One workgroup per row. The sum of squares is reduced in a fixed order: invocation t sums
// x[t], x[t + 256], x[t + 512], ... sequentially with fma, then a fixed binary tree over
// the 256 partial sums. Nothing depends on the number of rows, so a row's result is
// bitwise the same alone or in any batch. `out` must not alias `x`.

struct Params {
    m: u32,   // rows
    d: u32,   // values per row
    eps: f32, // added to the mean square
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // [m, d]
@group(0) @binding(2) var<storage, read> weight: array<f32>;   // [d]
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // [m, d]

const WG: u32 = 256u;

var<workgroup> partial: array<f32, WG>;

// Dispatch: m workgroups, folded into (x, y, 1); row = wid.y * num_workgroups.x + wid.x.
@compute @workgroup_size(256)
fn rmsnorm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.m) {
        return;
    }
    let base = row * p.d;
    var sum = 0.0;
    for (var c = t; c < p.d; c += WG) {
        let v = x[base + c];
        sum = fma(v, v, sum);
    }
    partial[t] = sum;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            partial[t] = partial[t] + partial[t + s];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(partial[0] / f32(p.d) + p.eps);
    for (var c = t; c < p.d; c += WG) {
        out[base + c] = (x[base + c] * scale) * weight[c];
    }
}
