//! Models: weight formats, configs, the sources weights are read from (GGUF files,
//! Hugging Face directories, random dummy weights), tokenizers, and the decoder forward
//! pass.

pub mod chat;
pub mod config;
pub mod decoder;
#[cfg(not(target_arch = "wasm32"))]
pub mod default_model;
pub mod dummy;
pub mod format;
pub mod fused_weights;
pub mod gguf;
pub mod gguf_metadata;
pub mod gguf_model;
pub mod gguf_tokenizer;
pub mod gguf_writer;
pub mod hf_config;
pub mod names;
#[cfg(not(target_arch = "wasm32"))]
pub mod open;
pub mod paged_kv;
pub mod safetensors_dir;
pub mod source;
pub mod tokenizer;

/// Lower-case hex of `bytes` (hashes in records and errors).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
