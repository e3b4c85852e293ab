// Q4_1: blocks of 32 values, 20 bytes: f16 scale d, f16 minimum m, then 16 bytes of
// nibbles ordered as Q4_0; value = d * nibble + m. Blocks are 4-byte aligned.
fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = base + (k >> 5u) * 20u;
    let j = k & 31u;
    let dm = unpack2x16float(w[block >> 2u]);
    let q = w[(block + 4u + (j & 15u)) >> 2u] >> ((j >> 4u) * 4u);
    return fma(vec4<f32>(dm.x), unpack_u4x4(q), vec4<f32>(dm.y));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = base + (k >> 5u) * 20u;
    let j = k & 31u;
    let b = j & 15u;
    let dm = unpack2x16float(w[block >> 2u]);
    let q = (w[(block + 4u + b) >> 2u] >> ((b & 3u) * 8u + (j >> 4u) * 4u)) & 0xfu;
    return fma(dm.x, f32(q), dm.y);
}

// A whole block: the scale and minimum, and the 16 bytes of nibbles as four words.
struct WBlock {
    dm: vec2<f32>,
    q: vec4<u32>,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let i = (base + b * 20u) >> 2u;
    return WBlock(unpack2x16float(w[i]), vec4<u32>(w[i + 1u], w[i + 2u], w[i + 3u], w[i + 4u]));
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    let q = blk.q[s & 3u] >> ((s >> 2u) * 4u);
    return fma(vec4<f32>(blk.dm.x), unpack_u4x4(q), vec4<f32>(blk.dm.y));
}
