// Q8_0 as uploaded (src/gpu/weights.rs): blocks of 32 values in 36 bytes: f16 scale d, two
// bytes of padding, then 32 signed bytes q; value = d * q. (The file's blocks are 34 bytes;
// the padding makes every word read here 4-byte aligned.)
fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let block = (base >> 2u) + (k >> 5u) * 9u;
    let d = unpack2x16float(w[block]).x;
    return d * unpack_i8x4(w[block + 1u + ((k & 31u) >> 2u)]);
}

fn w_load1(base: u32, k: u32) -> f32 {
    let block = (base >> 2u) + (k >> 5u) * 9u;
    let j = k & 31u;
    let q = w[block + 1u + (j >> 2u)] >> ((j & 3u) * 8u);
    return unpack2x16float(w[block]).x * f32((bitcast<i32>(q << 24u)) >> 24u);
}

// A whole block: the scale, and the word index of its 32 values.
struct WBlock {
    d: f32,
    at: u32,
}

fn w_block(base: u32, b: u32) -> WBlock {
    let block = (base >> 2u) + b * 9u;
    return WBlock(unpack2x16float(w[block]).x, block + 1u);
}

// Values 4s..4s+3 of the block (s < 8), exactly as w_load4 decodes them.
fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    return blk.d * unpack_i8x4(w[blk.at + s]);
}
