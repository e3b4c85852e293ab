// Activations x [m, k] f32 read one value at a time; any k.
@group(0) @binding(1) var<storage, read> x: array<f32>; // [m, k]

fn x4(row: u32, k: u32) -> vec4<f32> {
    let i = row * p.k + k;
    return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

fn x1(row: u32, k: u32) -> f32 {
    return x[row * p.k + k];
}
