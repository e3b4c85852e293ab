// Q4_0: blocks of 32 values, 18 bytes: f16 scale d, then 16 bytes; value j < 16 is the low
// nibble of byte j, value j >= 16 the high nibble of byte j - 16; value = d * (nibble - 8).
fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = base + (k >> 5u) * 18u;
    let j = k & 31u;
    let q = w_u32_at(block + 2u + (j & 15u)) >> ((j >> 4u) * 4u);
    return w_f16_at(block) * (unpack_u4x4(q) - vec4<f32>(8.0));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = base + (k >> 5u) * 18u;
    let j = k & 31u;
    let b = j & 15u;
    let q = (w_u16_at(block + 2u + (b & ~1u)) >> ((b & 1u) * 8u + (j >> 4u) * 4u)) & 0xfu;
    return w_f16_at(block) * (f32(q) - 8.0);
}

// A whole block: the scale, and the 16 bytes of nibbles as four words.
struct WBlock {
    d: f32,
    q: vec4<u32>,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let at = base + b * 18u + 2u;
    return WBlock(
        w_f16_at(at - 2u),
        vec4<u32>(w_u32_at(at), w_u32_at(at + 4u), w_u32_at(at + 8u), w_u32_at(at + 12u)),
    );
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    let q = blk.q[s & 3u] >> ((s >> 2u) * 4u);
    return blk.d * (unpack_u4x4(q) - vec4<f32>(8.0));
}
