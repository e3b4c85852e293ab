// Q5_1: blocks of 32 values in 24 bytes (6 words, uploaded as stored, every field
// aligned): f16 scale d and f16 minimum m (word 0), a u32 qh whose bit j is value j's
// fifth bit (word 1), then 16 bytes of nibbles ordered as Q4_0 (words 2-5: Q5_0's layout,
// read by the q5_* helpers in common.wgsl); value = d * (nibble | fifth bit << 4) + m.
// (d * q is exact in f32, so the fma's is the one rounding, as on the CPU.)

// d and m of the block at word i, exactly (subnormals included).
fn q5_1_dm(i: u32) -> vec2<f32> {
    let dm = w[i];
    return vec2<f32>(f16_exact(dm), f16_exact(dm >> 16u));
}

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = (base >> 2u) + (k >> 5u) * 6u;
    let dm = q5_1_dm(block);
    return fma(vec4<f32>(dm.x), q5_ints4_at(block, k & 31u), vec4<f32>(dm.y));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = (base >> 2u) + (k >> 5u) * 6u;
    let dm = q5_1_dm(block);
    return fma(dm.x, q5_int1(block, k & 31u), dm.y);
}

// A whole block: the scale and minimum, the fifth bits, and the 16 bytes of nibbles as
// four words.
struct WBlock {
    dm: vec2<f32>,
    qh: u32,
    q: vec4<u32>,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let i = (base >> 2u) + b * 6u;
    return WBlock(q5_1_dm(i), w[i + 1u], vec4<u32>(w[i + 2u], w[i + 3u], w[i + 4u], w[i + 5u]));
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    return fma(vec4<f32>(blk.dm.x), q5_block_ints4(blk.qh, blk.q, s), vec4<f32>(blk.dm.y));
}
