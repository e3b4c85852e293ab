// A quiet NaN, made at run time. WGSL forbids NaN as the value of a constant expression,
// and browsers' compilers reject `bitcast<f32>(0x7fc00000u)` for it, so the bits go
// through a variable.
fn quiet_nan() -> f32 {
    var bits = 0x7fc00000u;
    return bitcast<f32>(bits);
}
