// Matrix multiplication against a weight matrix in its stored format, with a fused
// prologue (how x is read) and epilogue (what is done with each output):
//     out[i, n] = epilogue(sum_k prologue(x)[i, k] * W[n, k])     for the rows n of one weight part.
//
// A module is this header, one prologue (prologue_*.wgsl), one epilogue (epilogue_*.wgsl),
// one shape (the CPU tile written by src/gpu/kernels/matmul/tile.rs, matvec.wgsl or
// gemm.wgsl), the weight decoder (shaders/weight_formats/) and an activation reader
// (shaders/activations/: x4 and x1 over binding 1); with a LoRA term, also lora.wgsl, whose
// emit_pair wraps the epilogue's (renamed emit_pair_base). The host replaces each `B_*`
// binding number and prepends the shape's constants.
//
// The order of operations is the contract that makes every shape give bitwise the same
// output (batch invariance): for each output,
//     acc = 0.0
//     for each block b of 32 values of k (the last may be shorter in the float formats):
//         part = 0.0
//         for k in the block, in increasing order: part = fma(w[n, k], xin[i, k], part)
//         acc = acc + part
// then, with a LoRA term and a row that has the adapter, acc = acc + (one fma chain over
// the term's R products, lora.wgsl), then the epilogue. Weights are decoded exactly as the
// decoders do, and xin by the prologue's one formula. The shapes differ only in which invocation computes which part
// and who folds them: never in the arithmetic.

struct Params {
    m: u32,             // rows of x (batch rows)
    k: u32,             // values per row of x and per weight row
    rows: u32,          // weight rows in this part (its outputs)
    n_offset: u32,      // the part's first weight row
    n_total: u32,       // weight rows in all parts (columns of a stored output)
    row_bytes: u32,     // bytes per weight row in its stored format
    eps: f32,           // RMSNorm prologue: added to the mean square
    vec_offset: u32,    // RMSNorm prologue: where the norm's weights start in `vectors`
    bias_offset: u32,   // QKV epilogue: where the q|k|v biases start in `vectors`
    q_dim: u32,         // QKV epilogue: query columns (n_heads * head_dim)
    kv_dim: u32,        // QKV epilogue: key (and value) columns
    head_dim: u32,      // QKV epilogue: values per head (even)
    max_positions: u32, // QKV epilogue: rows of the RoPE table
    y_cols: u32,        // SiLU-gate epilogue: columns of the output (n_total / 2)
    gather_first: u32,  // gathered rows: batch row i reads rows_index[gather_first + i]
    lora_rank: u32,     // LoRA term: values per row of t and of B' (R)
}

@group(0) @binding(0) var<uniform> p: Params;
// binding 1 is x [*, k] f32: declared by the activation reader.
@group(0) @binding(2) var<storage, read> w: array<u32>; // [rows, row_bytes] stored format

// The canonical block sum of four consecutive products, in order.
fn fma4(wv: vec4<f32>, xv: vec4<f32>, part: f32) -> f32 {
    var s = fma(wv.x, xv.x, part);
    s = fma(wv.y, xv.y, s);
    s = fma(wv.z, xv.z, s);
    return fma(wv.w, xv.w, s);
}
