//! Byte layouts, a leaf that imports nothing else of sprout's but its error type: the
//! weight formats and their blocks, a tensor's stored bytes, the GGUF container (read and
//! written), safetensors files (written; `model::safetensors_dir` reads them), and the hex
//! text of hashes. The GPU kernels, the model readers and the tokenizer all build on these;
//! none of them is imported here.

pub mod gguf;
mod hex;
mod k_quants;
pub mod safetensors_writer;
mod tensor_data;
mod weight_format;

pub use hex::hex;
pub use k_quants::QK_K;
pub use tensor_data::{StoredTensor, TensorData};
pub use weight_format::{FormatError, QK, WeightFormat, dequantize, dequantize_row, quantize};
