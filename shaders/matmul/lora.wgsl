// The LoRA term of a base projection: y = W x + B' (A x), with B' = (alpha / r) B scaled on
// the CPU and t = A x computed beforehand by a plain matmul (for every projection that
// shares this x: R is the sum of their ranks). For output (i, col), col = n_offset + n,
//     lora = 0.0
//     for j in 0 .. R, in increasing order: lora = fma(B'[col, j], t[i, j], lora)
//     v = v + lora
// before the epilogue's own work (bias, RoPE, gating, the residual add, the store). It
// reads only row i's t and weight row col's B', in one fixed order, so it is the same bits
// whichever shape, tile or batch computed the base value. A row whose RowInfo adapter
// word is 0 skips the add altogether (adding 0.0 would turn a -0.0 into +0.0): its
// outputs are bitwise those of the kernel without the term.
//
// The shapes add the term in one of two ways, with this same arithmetic: the CPU tile
// inlines the chain for its whole tile (src/gpu/kernels/matmul/tile.rs: each B' value
// loaded once for all the tile's rows of x), the others call lora_emit.wgsl's `emit_pair`,
// which wraps the epilogue's (renamed `emit_pair_base` by the host).
@group(0) @binding(B_LORA_T) var<storage, read> lora_t: array<f32>; // [m, lora_rank]
@group(0) @binding(B_LORA_B) var<storage, read> lora_b: array<f32>; // [n_total, lora_rank]

fn lora_term(i: u32, col: u32) -> f32 {
    let t0 = i * p.lora_rank;
    let b0 = col * p.lora_rank;
    var acc = 0.0;
    for (var j = 0u; j < p.lora_rank; j += 1u) {
        acc = fma(lora_b[b0 + j], lora_t[t0 + j], acc);
    }
    return acc;
}

