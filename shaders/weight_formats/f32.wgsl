// f32: 4 bytes per value. Rows start 4-byte aligned.
fn w_load4(base: u32, k: u32) -> vec4<f32> {
    let i = (base >> 2u) + k;
    return vec4<f32>(bitcast<f32>(w[i]), bitcast<f32>(w[i + 1u]), bitcast<f32>(w[i + 2u]), bitcast<f32>(w[i + 3u]));
}

fn w_load1(base: u32, k: u32) -> f32 {
    return bitcast<f32>(w[(base >> 2u) + k]);
}
