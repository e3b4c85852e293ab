// The fold of a split row's page states, shared by attention_combine.wgsl and the
// o-projection's prologue that folds as it reads (matmul/prologue_attention_fold.wgsl), so
// that both give the same bits. The module declares `states`, [slots, n_heads, 1 + hd4]
// vec4s: per slot and head (M, L, 0, 0), then O. With (M, L, O) the first slot's state
// with L > 0, for each later one's (m, l, o) with l > 0:
//     M' = max(M, m), a = exp(M - M'), b = exp(m - M'), L = fma(L, a, l * b),
//     O = fma(O, a, o * b), M = M'
// and the result is O / L. A slot with L = 0 holds no visible key (every page of it before
// a sliding window): it is skipped, as the whole row's fold starts at its first visible
// page. (A slot with keys has L >= 1: its page's largest score gives exp(0).)

// Head h, output vec4 c of the row whose states are slots first .. first + count.
fn fold_states(first: u32, count: u32, n_heads: u32, hd4: u32, h: u32, c: u32) -> vec4<f32> {
    var started = false;
    var big_m = 0.0;
    var big_l = 0.0;
    var big_o = vec4<f32>(0.0);
    for (var s = 0u; s < count; s += 1u) {
        let at = ((first + s) * n_heads + h) * (hd4 + 1u);
        let m = states[at].x;
        let l = states[at].y;
        let o = states[at + 1u + c];
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
    return big_o / big_l;
}
