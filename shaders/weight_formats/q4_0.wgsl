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
