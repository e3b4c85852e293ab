// The workgroup argmax shared by the kernels that reduce a row over the vocabulary
// (softmax.wgsl, sample.wgsl). Needs the kernel's `WG` (invocations per workgroup, a power
// of two) and `NO_INDEX`. Each invocation offers its own best (value, index), NO_INDEX for
// none; a fixed binary tree combines them, the larger value winning and, on equal values,
// the lower index. Every invocation must call it (it has barriers); all get the result.

var<workgroup> best_value: array<f32, WG>;
var<workgroup> best_index: array<u32, WG>;

struct Best {
    value: f32,
    index: u32,
}

// Whether (v, i) beats (bv, bi) by the rule above.
fn beats(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return i != NO_INDEX && (bi == NO_INDEX || v > bv || (v == bv && i < bi));
}

fn workgroup_argmax(t: u32, value: f32, index: u32) -> Best {
    best_value[t] = value;
    best_index[t] = index;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s && beats(best_value[t + s], best_index[t + s], best_value[t], best_index[t])) {
            best_value[t] = best_value[t + s];
            best_index[t] = best_index[t + s];
        }
        workgroupBarrier();
    }
    let best = Best(best_value[0], best_index[0]);
    // Nobody may overwrite the arrays before everyone has read the result.
    workgroupBarrier();
    return best;
}
