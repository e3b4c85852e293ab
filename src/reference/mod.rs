//! Plain-Rust f32 references for every GPU kernel: simple, obviously correct, slow.
//! Tests compare the GPU against these with a stated tolerance.

pub mod attention;
pub mod elementwise;
pub mod embedding;
pub mod head_norm_rope;
pub mod kv_write;
pub mod logit_adjust;
pub mod mask;
pub mod matmul;
pub mod norm_add;
pub mod rmsnorm;
pub mod rope;
pub mod sample;
pub mod softmax;
pub mod target_rank;
pub mod top_logprobs;
