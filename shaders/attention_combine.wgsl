// The last step of attention for rows computed in several work items (flash-decoding):
// folds each row's states from scratch, in slot order, exactly as attention.wgsl folds
// pages, then writes O / L. With (M, L, O) the first slot's state, for each next slot's
// (m, l, o):
//     M' = max(M, m), a = exp(M - M'), b = exp(m - M'), L = fma(L, a, l * b), O = fma(O, a, o * b)
// The first slot holds the fold of the row's first pages and each later slot one page, so
// the output is bitwise what one workgroup folding every page gives. A slot with L = 0
// holds no visible key (every page of it before a sliding window): it is skipped, and the
// fold starts at the first slot with keys, as the whole row's fold starts at its first
// visible page. (A slot with keys has L >= 1: its page's largest score gives exp(0).)
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
@group(0) @binding(1) var<storage, read> scratch: array<vec4<f32>>;     // [slots, n_heads, 1 + head_dim / 4]
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
        var started = false;
        var big_m = 0.0;
        var big_l = 0.0;
        var big_o = vec4<f32>(0.0);
        for (var s = 0u; s < count; s += 1u) {
            let at = ((first + s) * p.n_heads + h) * (hd4 + 1u);
            let m = scratch[at].x;
            let l = scratch[at].y;
            let o = scratch[at + 1u + c];
            if (l == 0.0) {
                continue; // no visible key
            }
            if (!started) {
                big_m = m;
                big_l = l;
                big_o = o;
                started = true;
                continue;
            }
            let mm = max(big_m, m);
            let a = exp(big_m - mm);
            let b = exp(m - mm);
            big_l = fma(big_l, a, l * b);
            big_o = fma(big_o, vec4<f32>(a), o * b);
            big_m = mm;
        }
        out[(row * p.n_heads + h) * hd4 + c] = big_o / big_l;
    }
}
