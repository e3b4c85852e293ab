//! One module per kernel family. Each records dispatches into a caller's command encoder
//! (so a forward pass is one submit) and has a CPU reference in `crate::reference`.

pub mod attention;
pub mod elementwise;
pub mod embedding;
pub mod matmul;
pub mod rmsnorm;
pub mod rope;
pub mod softmax;
