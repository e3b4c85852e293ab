// The tail of the workgroup reductions (argmax.wgsl) for every adapter: the tree runs to
// its last level in workgroup memory, and the result is slot 0.
const TREE_END: u32 = 1u;

fn argmax_tail() -> Best {
    return Best(best_value[0], best_index[0]);
}

fn sum_tail() -> f32 {
    return sum_slots[0];
}

fn u32_tail(op: u32) -> u32 {
    return u32_slots[0];
}
