// The q|k|v biases' buffer, bound by the epilogue when the prologue (plain) binds none.
@group(0) @binding(B_VECTORS) var<storage, read> vectors: array<f32>; // biases at p.bias_offset
