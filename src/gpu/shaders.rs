//! WGSL sources, embedded at compile time, and how kernels are composed from them.
//!
//! A kernel that reads weights is its own WGSL plus one weight-format decoder from
//! `shaders/weight_formats/` (which defines `w_load4` and `w_load1` over the kernel's
//! `w: array<u32>` binding, and `w_block` and `w_block4` for whole 32-value blocks, a
//! K-quant's being one eighth of a super-block; the float formats share theirs,
//! `unblocked.wgsl`). `tests/shaders.rs` validates every kernel composed with every decoder.

use crate::formats::WeightFormat;

/// The workgroup argmax and sums shared by the vocabulary reductions (softmax, sample,
/// top_logprobs), and the two tails that end them (`kernels::reduction::Reduction::compose`
/// appends them).
pub const ARGMAX: &str = include_str!("../../shaders/common/argmax.wgsl");
pub const REDUCE_TREE: &str = include_str!("../../shaders/common/reduce_tree.wgsl");
pub const REDUCE_BUTTERFLY: &str = include_str!("../../shaders/common/reduce_butterfly.wgsl");

/// `quiet_nan()`, for kernels that write NaN to mark an invalid input.
pub const NAN: &str = include_str!("../../shaders/common/nan.wgsl");
/// The fold of a split attention row's page states: the combine step's, and the
/// o-projection prologue's that folds as it reads (the same function, so the same bits).
pub const ATTENTION_FOLD: &str = include_str!("../../shaders/common/attention_fold.wgsl");

pub const WEIGHT_COMMON: &str = include_str!("../../shaders/weight_formats/common.wgsl");
const UNBLOCKED: &str = include_str!("../../shaders/weight_formats/unblocked.wgsl");

/// The decoder for one weight format.
pub fn weight_decoder(format: WeightFormat) -> &'static str {
    match format {
        WeightFormat::F32 => include_str!("../../shaders/weight_formats/f32.wgsl"),
        WeightFormat::F16 => include_str!("../../shaders/weight_formats/f16.wgsl"),
        WeightFormat::Bf16 => include_str!("../../shaders/weight_formats/bf16.wgsl"),
        WeightFormat::Q8_0 => include_str!("../../shaders/weight_formats/q8_0.wgsl"),
        WeightFormat::Q4_0 => include_str!("../../shaders/weight_formats/q4_0.wgsl"),
        WeightFormat::Q4_1 => include_str!("../../shaders/weight_formats/q4_1.wgsl"),
        WeightFormat::Q5_0 => include_str!("../../shaders/weight_formats/q5_0.wgsl"),
        WeightFormat::Q5_1 => include_str!("../../shaders/weight_formats/q5_1.wgsl"),
        WeightFormat::Q4_K => include_str!("../../shaders/weight_formats/q4_k.wgsl"),
        WeightFormat::Q5_K => include_str!("../../shaders/weight_formats/q5_k.wgsl"),
        WeightFormat::Q6_K => include_str!("../../shaders/weight_formats/q6_k.wgsl"),
    }
}

/// `kernel` with the decoder for `format` appended.
pub fn with_weights(kernel: &str, format: WeightFormat) -> String {
    let blocks = if format.is_quantized() { "" } else { UNBLOCKED };
    format!(
        "{kernel}\n{WEIGHT_COMMON}\n{}\n{blocks}",
        weight_decoder(format)
    )
}
