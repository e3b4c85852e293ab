// The workgroup reductions shared by the kernels that reduce a row over the vocabulary
// (softmax.wgsl, sample.wgsl, top_logprobs.wgsl). Need the kernel's `WG` (invocations per
// workgroup, a power of two) and `NO_INDEX`. Each invocation offers its own partial; a
// fixed binary tree combines them (level s: invocation t < s takes in t + s), so the
// result does not depend on how the partials were spread. workgroup_argmax keeps the
// larger value and, on equal values, the lower index; workgroup_sum adds; workgroup_u32
// adds, takes the minimum or the maximum of u32s (exact: any order gives the same bits, but
// it meets the same pairs all the same). Every invocation must call them (they have
// barriers); all get the result.
//
// The levels from WG / 2 down to TREE_END run in workgroup memory; the host appends the
// tail that does the rest and defines TREE_END: reduce_tree.wgsl (the tree to its end,
// every adapter) or reduce_butterfly.wgsl (the last levels as a subgroup butterfly, which
// meets the same pairs: the same bits without the barriers).

var<workgroup> best_value: array<f32, WG>;
var<workgroup> best_index: array<u32, WG>;
var<workgroup> sum_slots: array<f32, WG>;
var<workgroup> u32_slots: array<u32, WG>;

// workgroup_u32's operations.
const U32_ADD: u32 = 0u;
const U32_MIN: u32 = 1u;
const U32_MAX: u32 = 2u;

struct Best {
    value: f32,
    index: u32,
}

// Whether (v, i) beats (bv, bi) by the rule above.
fn beats(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return i != NO_INDEX && (bi == NO_INDEX || v > bv || (v == bv && i < bi));
}

fn combine_u32(op: u32, a: u32, b: u32) -> u32 {
    switch (op) {
        case U32_MIN: {
            return min(a, b);
        }
        case U32_MAX: {
            return max(a, b);
        }
        default: {
            return a + b;
        }
    }
}

fn workgroup_argmax(t: u32, value: f32, index: u32) -> Best {
    best_value[t] = value;
    best_index[t] = index;
    workgroupBarrier();
    for (var s = WG / 2u; s >= TREE_END; s >>= 1u) {
        if (t < s && beats(best_value[t + s], best_index[t + s], best_value[t], best_index[t])) {
            best_value[t] = best_value[t + s];
            best_index[t] = best_index[t + s];
        }
        workgroupBarrier();
    }
    let best = argmax_tail();
    // Nobody may overwrite the arrays before everyone has read the result.
    workgroupBarrier();
    return best;
}

fn workgroup_sum(t: u32, value: f32) -> f32 {
    sum_slots[t] = value;
    workgroupBarrier();
    for (var s = WG / 2u; s >= TREE_END; s >>= 1u) {
        if (t < s) {
            sum_slots[t] = sum_slots[t] + sum_slots[t + s];
        }
        workgroupBarrier();
    }
    let total = sum_tail();
    workgroupBarrier();
    return total;
}

fn workgroup_u32(t: u32, value: u32, op: u32) -> u32 {
    u32_slots[t] = value;
    workgroupBarrier();
    for (var s = WG / 2u; s >= TREE_END; s >>= 1u) {
        if (t < s) {
            u32_slots[t] = combine_u32(op, u32_slots[t], u32_slots[t + s]);
        }
        workgroupBarrier();
    }
    let result = u32_tail(op);
    workgroupBarrier();
    return result;
}
