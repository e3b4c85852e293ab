// Q6_K as uploaded (src/gpu/weights.rs): super-blocks of 256 values in 212 bytes (53
// words): ql[128] (words 0-31), qh[64] (words 32-47), i8 scales[16] (words 48-51), f16 d
// and two bytes of padding (word 52). (The file's blocks are 210 bytes; the padding makes
// every word read here 4-byte aligned.) Value 128 h + 32 g + l (half h, group g < 4,
// l < 32) has low bits nibble g / 2 of ql[64 h + 32 (g % 2) + l], high bits 2g..2g+1 of
// qh[32 h + l], and scale scales[8 h + 2 g + l / 16]; value = (d * scale) * (q - 32), exact
// (src/formats/k_quants.rs). The matmul's 32-value block b is group b % 4 of half
// (b % 8) / 4 of super-block b / 8.

// d * scales[i] of the super-block at word s.
fn q6_k_scale(s: u32, i: u32) -> f32 {
    let scale = bitcast<i32>(w[s + 48u + (i >> 2u)] << (24u - 8u * (i & 3u))) >> 24u;
    return f16_exact(w[s + 52u]) * f32(scale);
}

// Four values' q - 32: their low bits in the low nibble of each byte of `lo`, their high
// bits in the low two bits of each byte of `hi`.
fn q6_k_values(lo: u32, hi: u32) -> vec4<f32> {
    let q = (lo & 0x0f0f0f0fu) | ((hi & 0x03030303u) << 4u);
    let bytes = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(0xffu);
    return vec4<f32>(bytes) - vec4<f32>(32.0);
}

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let s = (base >> 2u) + (k >> 8u) * 53u;
    let h = (k >> 7u) & 1u;
    let g = (k >> 5u) & 3u;
    let l = k & 31u;
    let lo = w[s + 16u * h + 8u * (g & 1u) + (l >> 2u)] >> (4u * (g >> 1u));
    let hi = w[s + 32u + 8u * h + (l >> 2u)] >> (2u * g);
    return q6_k_scale(s, 8u * h + 2u * g + (l >> 4u)) * q6_k_values(lo, hi);
}

fn w_load1(base: u32, k: u32) -> f32 {
    let s = (base >> 2u) + (k >> 8u) * 53u;
    let h = (k >> 7u) & 1u;
    let g = (k >> 5u) & 3u;
    let l = k & 31u;
    let byte = (l & 3u) * 8u;
    let lo = (w[s + 16u * h + 8u * (g & 1u) + (l >> 2u)] >> (byte + 4u * (g >> 1u))) & 0xfu;
    let hi = (w[s + 32u + 8u * h + (l >> 2u)] >> (byte + 2u * g)) & 3u;
    return q6_k_scale(s, 8u * h + 2u * g + (l >> 4u)) * (f32(lo | (hi << 4u)) - 32.0);
}

// A whole 32-value block: d times its two scales (values 0-15, 16-31), the word indices of
// its low and high bits, and their shifts.
struct WBlock {
    ds: vec2<f32>,
    ql: u32,
    qh: u32,
    lo_shift: u32,
    hi_shift: u32,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let s = (base >> 2u) + (b >> 3u) * 53u;
    let h = (b >> 2u) & 1u;
    let g = b & 3u;
    let i = 8u * h + 2u * g;
    return WBlock(
        vec2<f32>(q6_k_scale(s, i), q6_k_scale(s, i + 1u)),
        s + 16u * h + 8u * (g & 1u),
        s + 32u + 8u * h,
        4u * (g >> 1u),
        2u * g,
    );
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    let scale = select(blk.ds.x, blk.ds.y, s >= 4u);
    return scale * q6_k_values(w[blk.ql + s] >> blk.lo_shift, w[blk.qh + s] >> blk.hi_shift);
}
