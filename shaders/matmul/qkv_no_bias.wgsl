// A q|k|v projection without biases: HAS_BIAS is false, so this is never called.
fn qkv_bias(col: u32) -> f32 {
    return 0.0;
}
