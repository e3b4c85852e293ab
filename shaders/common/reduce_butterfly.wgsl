// The tail of the workgroup reductions (argmax.wgsl) where the adapter has subgroups: the
// tree's levels below TREE_END (the host prepends it: the adapter's smallest subgroup size,
// a power of two) as a butterfly. Lane l of every subgroup starts from slot l % TREE_END
// and, for s = TREE_END / 2 down to 1, combines its value with lane l ^ s's
// (subgroupShuffleXor). For l < s that lane is l + s: the pair the tree meets at level s,
// in the same order, so lane 0 ends with the tree's result bit for bit, whatever the
// subgroup's size and whichever invocations it holds (lanes past TREE_END repeat the first
// TREE_END, and l ^ s stays within their block). subgroupShuffle(x, 0) hands lane 0's
// result to the others (every lane is active: the reductions run in uniform control flow).
// subgroupAdd is never used: its order is the implementation's.
//
// The entry points set `sg_lane` from @builtin(subgroup_invocation_id) before reducing.

var<private> sg_lane: u32;

fn argmax_tail() -> Best {
    var v = best_value[sg_lane % TREE_END];
    var i = best_index[sg_lane % TREE_END];
    for (var s = TREE_END / 2u; s > 0u; s >>= 1u) {
        let ov = subgroupShuffleXor(v, s);
        let oi = subgroupShuffleXor(i, s);
        if (beats(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    return Best(subgroupShuffle(v, 0u), subgroupShuffle(i, 0u));
}

fn sum_tail() -> f32 {
    var x = sum_slots[sg_lane % TREE_END];
    for (var s = TREE_END / 2u; s > 0u; s >>= 1u) {
        x = x + subgroupShuffleXor(x, s);
    }
    return subgroupShuffle(x, 0u);
}

fn u32_tail(op: u32) -> u32 {
    var x = u32_slots[sg_lane % TREE_END];
    for (var s = TREE_END / 2u; s > 0u; s >>= 1u) {
        x = combine_u32(op, x, subgroupShuffleXor(x, s));
    }
    return subgroupShuffle(x, 0u);
}
