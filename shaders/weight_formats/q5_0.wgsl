// Q5_0 as uploaded (src/gpu/weights.rs): blocks of 32 values in 24 bytes: f16 scale d, two
// bytes of padding, a u32 qh whose bit j is value j's fifth bit, then 16 bytes of nibbles
// ordered as Q4_0; value = d * ((nibble | fifth bit << 4) - 16). (The file's blocks are 22
// bytes; the padding makes every word read here 4-byte aligned.)

// Four values: their nibbles in the low nibble of each byte of `q`, their fifth bits in
// the low four bits of `h`. (q - 16 is exact in f32, and so is its product with d.)
fn q5_0_values(d: f32, q: u32, h: u32) -> vec4<f32> {
    let fifth = vec4<u32>(h, h >> 1u, h >> 2u, h >> 3u) & vec4<u32>(1u);
    let nibbles = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(0xfu);
    return d * (vec4<f32>(nibbles | (fifth << vec4<u32>(4u))) - vec4<f32>(16.0));
}

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = (base >> 2u) + (k >> 5u) * 6u;
    let j = k & 31u;
    let q = w[block + 2u + ((j & 15u) >> 2u)] >> ((j >> 4u) * 4u);
    return q5_0_values(f16_exact(w[block]), q, w[block + 1u] >> j);
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = (base >> 2u) + (k >> 5u) * 6u;
    let j = k & 31u;
    let b = j & 15u;
    let nibble = (w[block + 2u + (b >> 2u)] >> ((b & 3u) * 8u + (j >> 4u) * 4u)) & 0xfu;
    let q = nibble | (((w[block + 1u] >> j) & 1u) << 4u);
    return f16_exact(w[block]) * (f32(q) - 16.0);
}

// A whole block: the scale, the fifth bits, and the 16 bytes of nibbles as four words.
struct WBlock {
    d: f32,
    qh: u32,
    q: vec4<u32>,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let i = (base >> 2u) + b * 6u;
    return WBlock(
        f16_exact(w[i]),
        w[i + 1u],
        vec4<u32>(w[i + 2u], w[i + 3u], w[i + 4u], w[i + 5u]),
    );
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    return q5_0_values(blk.d, blk.q[s & 3u] >> ((s >> 2u) * 4u), blk.qh >> (4u * s));
}
