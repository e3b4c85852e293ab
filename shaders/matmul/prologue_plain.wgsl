// Prologue: x is read as it is. `local` (the row's index in the workgroup's rows) is unused.
fn prologue_setup(first: u32, lid: u32) {}

fn xin4(i: u32, local: u32, k: u32) -> vec4<f32> {
    return x4(x_row(i), k);
}

fn xin1(i: u32, local: u32, k: u32) -> f32 {
    return x1(x_row(i), k);
}
