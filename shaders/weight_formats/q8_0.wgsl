// Q8_0: blocks of 32 values, 34 bytes: f16 scale d, then 32 signed bytes q; value = d * q.
fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = base + (k >> 5u) * 34u;
    let d = w_f16_at(block);
    return d * unpack_i8x4(w_u32_at(block + 2u + (k & 31u)));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = base + (k >> 5u) * 34u;
    let j = k & 31u;
    let q = w_u16_at(block + 2u + (j & ~1u)) >> ((j & 1u) * 8u);
    return w_f16_at(block) * f32((bitcast<i32>(q << 24u)) >> 24u);
}

// A whole block: the scale, and the byte offset of its 32 values.
struct WBlock {
    d: f32,
    at: u32,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let block = base + b * 34u;
    return WBlock(w_f16_at(block), block + 2u);
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    return blk.d * unpack_i8x4(w_u32_at(blk.at + 4u * s));
}
