// f16: 2 bytes per value, little-endian; a row may start 2 mod 4.
fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let byte = base + 2u * k;
    return vec4<f32>(unpack2x16float(w_u32_at(byte)), unpack2x16float(w_u32_at(byte + 4u)));
}

fn w_load1(base: u32, k: u32) -> f32 {
    return w_f16_at(base + 2u * k);
}
