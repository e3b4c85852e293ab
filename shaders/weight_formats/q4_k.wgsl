// Q4_K: super-blocks of 256 values in 144 bytes (36 words, uploaded as stored): f16 d and
// f16 dmin (word 0), 12 bytes of packed 6-bit scales and minimums (words 1-3), then 128
// bytes of nibbles (words 4-35). The matmul's 32-value block b is sub-block j = b % 8 of
// super-block b / 8: its values are the low (j even) or high (j odd) nibbles of bytes
// 32 (j / 2) .. 32 (j / 2) + 31; value = fma(d * sc, q, -(dmin * m)) (k_scale_min in
// common.wgsl). The products are exact (src/formats/k_quants.rs), so the one rounding is
// the fma's, as on the CPU.

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let s = (base >> 2u) + (k >> 8u) * 36u;
    let j = (k >> 5u) & 7u;
    let dm = k_scale_min(s, j);
    let q = w[s + 4u + 8u * (j >> 1u) + ((k & 31u) >> 2u)] >> (4u * (j & 1u));
    return fma(vec4<f32>(dm.x), unpack_u4x4(q), vec4<f32>(-dm.y));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let s = (base >> 2u) + (k >> 8u) * 36u;
    let j = (k >> 5u) & 7u;
    let l = k & 31u;
    let dm = k_scale_min(s, j);
    let q = (w[s + 4u + 8u * (j >> 1u) + (l >> 2u)] >> ((l & 3u) * 8u + 4u * (j & 1u))) & 0xfu;
    return fma(dm.x, f32(q), -dm.y);
}

// A whole 32-value block: its (d * sc, dmin * m), the word index of its 32 bytes of
// nibbles, and which nibble is its.
struct WBlock {
    dm: vec2<f32>,
    at: u32,
    shift: u32,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let s = (base >> 2u) + (b >> 3u) * 36u;
    let j = b & 7u;
    return WBlock(k_scale_min(s, j), s + 4u + 8u * (j >> 1u), 4u * (j & 1u));
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    let q = w[blk.at + s] >> blk.shift;
    return fma(vec4<f32>(blk.dm.x), unpack_u4x4(q), vec4<f32>(-blk.dm.y));
}
