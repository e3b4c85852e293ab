// bf16: the high 16 bits of an f32, 2 bytes per value; a row may start 2 mod 4.
fn bf16x2(u: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(u << 16u), bitcast<f32>(u & 0xffff0000u));
}

fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let byte = base + 2u * k;
    return vec4<f32>(bf16x2(w_u32_at(byte)), bf16x2(w_u32_at(byte + 4u)));
}

fn w_load1(base: u32, k: u32) -> f32 {
    return bitcast<f32>(w_u16_at(base + 2u * k) << 16u);
}
