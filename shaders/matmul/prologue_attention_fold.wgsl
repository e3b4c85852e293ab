// Prologue: x is the attention's output [m, n_heads * head_dim], where the rows that
// attention split (flash-decoding) are not written yet: their page states are in `states`,
// and this prologue folds them as it reads, with attention_combine.wgsl's fold
// (common/attention_fold.wgsl, appended by the host: the same bits), which saves that dispatch.
// Per row, row_slots holds (first slot, slots), or (0xffffffff, 0) for a row written whole.
// The heads are k's runs of p.head_dim values (k = n_heads * head_dim); head_dim is a
// multiple of 4, so x is read as vec4s and xin1 takes its value from one.
@group(0) @binding(B_STATES) var<storage, read> states: array<vec4<f32>>; // [slots, n_heads, 1 + head_dim / 4]: (M, L, 0, 0), then O
@group(0) @binding(B_ROW_SLOTS) var<storage, read> row_slots: array<u32>; // [m, 2]

fn prologue_setup(first: u32, lid: u32) {}

fn xin4(i: u32, local: u32, k: u32) -> vec4<f32> {
    let first = row_slots[2u * i];
    if (first == 0xffffffffu) {
        return x4(x_row(i), k);
    }
    let hd4 = p.head_dim / 4u;
    let c = (k % p.head_dim) / 4u;
    return fold_states(first, row_slots[2u * i + 1u], p.k / p.head_dim, hd4, k / p.head_dim, c);
}

fn xin1(i: u32, local: u32, k: u32) -> f32 {
    return xin4(i, local, k & ~3u)[k & 3u];
}
