//! Plain-Rust f32 references for every GPU kernel: simple, obviously correct, slow.
//! Tests compare the GPU against these with a stated tolerance.

pub mod matmul;
