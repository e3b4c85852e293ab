// The LoRA term added output by output (the MatVec and Gemm shapes): `emit_pair` adds
// lora.wgsl's `lora_term` to each output of a row with the adapter, then hands the pair on
// to the epilogue's own, renamed `emit_pair_base` by the host.
// Outputs come in pairs of adjacent weight rows (n even); the second may be past the end.
fn emit_pair(i: u32, n: u32, v0: f32, v1: f32) {
    if (i >= p.m || n >= p.rows) {
        return;
    }
    var a0 = v0;
    var a1 = v1;
    if (rowinfo[4u * i + 3u] != 0u) {
        let col = p.n_offset + n;
        a0 = a0 + lora_term(i, col);
        if (n + 1u < p.rows) {
            a1 = a1 + lora_term(i, col + 1u);
        }
    }
    emit_pair_base(i, n, a0, a1);
}
