// For the float formats, which have no blocks: a "block" is 32 consecutive values, read
// by the format's w_load4.
struct WBlock {
    base: u32,
    k: u32,
}

fn w_block(base: u32, b: u32) -> WBlock {
    return WBlock(base, b * 32u);
}

fn w_block4(blk: WBlock, s: u32) -> vec4<f32> {
    return w_load4(blk.base, blk.k + 4u * s);
}
