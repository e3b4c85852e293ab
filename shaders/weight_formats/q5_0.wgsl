// Q5_0 as uploaded (src/gpu/weights.rs): blocks of 32 values in 24 bytes: f16 scale d, two
// bytes of padding, a u32 qh whose bit j is value j's fifth bit, then 16 bytes of nibbles
// ordered as Q4_0; value = d * ((nibble | fifth bit << 4) - 16). (The file's blocks are 22
// bytes; the padding makes every word read here 4-byte aligned, and the layout from word 1
// on Q5_1's: the q5_* helpers in common.wgsl.) q - 16 is exact in f32, and so is its
// product with d.

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = (base >> 2u) + (k >> 5u) * 6u;
    return f16_exact(w[block]) * (q5_ints4_at(block, k & 31u) - vec4<f32>(16.0));
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = (base >> 2u) + (k >> 5u) * 6u;
    return f16_exact(w[block]) * (q5_int1(block, k & 31u) - 16.0);
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
    return blk.d * (q5_block_ints4(blk.qh, blk.q, s) - vec4<f32>(16.0));
}
