// Q5_K: super-blocks of 256 values in 176 bytes (44 words, uploaded as stored): f16 d and
// f16 dmin (word 0), 12 bytes of packed 6-bit scales and minimums (words 1-3, as Q4_K's),
// 32 bytes of fifth bits qh (words 4-11), then 128 bytes of nibbles (words 12-43). The
// matmul's 32-value block b is sub-block j = b % 8 of super-block b / 8: value l of it has
// the low (j even) or high (j odd) nibble of byte 32 (j / 2) + l as its low four bits and
// bit j of qh[l] as its fifth; value = fma(d * sc, q, -(dmin * m)) (k_scale_min in
// common.wgsl). The products are exact (src/formats/k_quants.rs), so the one rounding is
// the fma's, as on the CPU.

// The fifth bits of values l .. l + 3 of sub-block j, from the qh word holding qh[l..l + 4]
// (one bit of each byte).
fn q5_k_fifth4(qh: u32, j: u32) -> vec4<u32> {
    let h = qh >> j;
    return vec4<u32>(h, h >> 8u, h >> 16u, h >> 24u);
}

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let s = (base >> 2u) + (k >> 8u) * 44u;
    let j = (k >> 5u) & 7u;
    let l4 = (k & 31u) >> 2u;
    let dm = k_scale_min(s, j);
    let q = w[s + 12u + 8u * (j >> 1u) + l4] >> (4u * (j & 1u));
    let high = q5_k_fifth4(w[s + 4u + l4], j);
    return fma(vec4<f32>(dm.x), unpack_u5x4(q, high), vec4<f32>(-dm.y));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let s = (base >> 2u) + (k >> 8u) * 44u;
    let j = (k >> 5u) & 7u;
    let l = k & 31u;
    let byte = (l & 3u) * 8u;
    let dm = k_scale_min(s, j);
    let nibble = (w[s + 12u + 8u * (j >> 1u) + (l >> 2u)] >> (byte + 4u * (j & 1u))) & 0xfu;
    let fifth = (w[s + 4u + (l >> 2u)] >> (byte + j)) & 1u;
    return fma(dm.x, f32(nibble | (fifth << 4u)), -dm.y);
}

// A whole 32-value block: its (d * sc, dmin * m), the word indices of its 32 bytes of
// nibbles and of the super-block's fifth bits, and which nibble and which bit are its.
struct WBlock {
    dm: vec2<f32>,
    at: u32,
    qh: u32,
    shift: u32,
    j: u32,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let s = (base >> 2u) + (b >> 3u) * 44u;
    let j = b & 7u;
    return WBlock(k_scale_min(s, j), s + 12u + 8u * (j >> 1u), s + 4u, 4u * (j & 1u), j);
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    let q = unpack_u5x4(w[blk.at + s] >> blk.shift, q5_k_fifth4(w[blk.qh + s], blk.j));
    return fma(vec4<f32>(blk.dm.x), q, vec4<f32>(-blk.dm.y));
}
