//! Models: weight formats (and, later, configs, file loading, tokenizers, the forward pass).

pub mod format;
