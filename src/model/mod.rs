//! Models: configs, the sources weights are read from (GGUF files, Hugging Face
//! directories, random dummy weights, any of them quantized on load), the fused weight
//! layout, the decoder forward pass, and export to a Hugging Face directory. Byte layouts
//! (weight formats, the GGUF container) are `crate::formats`; text to ids is
//! `crate::tokenizer`.

pub mod config;
mod config_check;
pub mod decoder;
pub mod decoder_weights;
#[cfg(not(target_arch = "wasm32"))]
pub mod default_model;
pub mod dummy;
pub mod export;
#[cfg(not(target_arch = "wasm32"))]
pub mod fetch;
pub mod fused_weights;
pub mod gemma3;
pub mod gguf_model;
pub mod hf_config;
pub mod lora;
#[cfg(not(target_arch = "wasm32"))]
pub mod named;
pub mod names;
#[cfg(not(target_arch = "wasm32"))]
pub mod open;
pub mod quantize_on_load;
pub mod qwen3;
pub mod rope_scaling;
pub mod safetensors_dir;
pub mod smollm3;
pub mod source;
pub mod weight_residency;
