//! `sprout export`: any model sprout loads, written out as a Hugging Face directory that
//! transformers (and sprout) load: `model.safetensors` in Hugging Face's names and layout
//! (`tensors`), `config.json`, `generation_config.json` and `tokenizer_config.json`
//! (`json_files`), `tokenizer.json`, all written into a temporary directory and renamed
//! into place when complete (`directory`, native only).

#[cfg(not(target_arch = "wasm32"))]
pub mod directory;
pub mod json_files;
pub mod tensors;
