// The q|k|v epilogue's biases: column col's at p.bias_offset in `vectors` (bound by the
// RMSNorm prologue, or after a plain prologue by qkv_bias_binding.wgsl).
fn qkv_bias(col: u32) -> f32 {
    return vectors[p.bias_offset + col];
}
