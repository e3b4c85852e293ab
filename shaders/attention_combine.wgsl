// The last step of attention for rows computed in several work items (flash-decoding):
// folds each row's states, in slot order, exactly as attention.wgsl folds pages
// (common/attention_fold.wgsl, appended by the host), then writes O / L. The first slot holds the
// fold of the row's first pages and each later slot one page, so the output is bitwise
// what one workgroup folding every page gives.
//
// One workgroup of 64 per combined row; invocation e handles (head, column) pairs e,
// e + 64, ...; every invocation of a head repeats the same scalar fold (cheap, and the same
// operations).

struct Params {
    n_heads: u32,
    head_dim: u32,
    n_rows: u32, // rows to combine in this dispatch
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> states: array<vec4<f32>>;      // [slots, n_heads, 1 + head_dim / 4]
@group(0) @binding(2) var<storage, read> combine: array<u32>;           // [n_rows, 4]: (row, first slot, slots, 0)
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;   // [t, n_heads, head_dim / 4]

// Dispatch: (n_rows, 1, 1).
@compute @workgroup_size(64)
fn attention_combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r = wid.x;
    if (r >= p.n_rows) {
        return;
    }
    let row = combine[4u * r];
    let first = combine[4u * r + 1u];
    let count = combine[4u * r + 2u];
    let hd4 = p.head_dim / 4u;
    for (var e = lid; e < p.n_heads * hd4; e += 64u) {
        let h = e / hd4;
        let c = e % hd4;
        out[(row * p.n_heads + h) * hd4 + c] = fold_states(first, count, p.n_heads, hd4, h, c);
    }
}
