// Activations x [m, k] f32 read four at a time; needs k % 4 == 0 (then every x4 is aligned).
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // [m, k / 4]

fn x4(row: u32, k: u32) -> vec4<f32> {
    return x[(row * p.k + k) >> 2u];
}

fn x1(row: u32, k: u32) -> f32 {
    let i = row * p.k + k;
    return x[i >> 2u][i & 3u];
}
