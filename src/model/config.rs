//! What the decoder needs to know about a model, whatever file it came from.
//!
//! Invariant: every reader ends with [`ModelConfig::validate`], so a config that a source
//! hands out has no zero size and no product of sizes (a head group, a tensor's element
//! count, the tensor count) that overflows; the code that sizes buffers from it can then
//! multiply freely.

use serde::Serialize;

use crate::error::SproutError;
use crate::gpu::kernels::rope::RopeLayout;
use crate::model::names::{LayerTensor, TensorName};

/// Decoder-only transformer families sprout runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama 2 and 3, SmolLM, Mistral without sliding window.
    Llama,
    /// Qwen2: Llama's shape plus biases on the q, k and v projections.
    Qwen2,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    /// How q and k pair their dimensions for RoPE *as stored in this file*: GGUF's Llama
    /// weights are permuted for interleaved pairs, Hugging Face's use the half-split.
    #[serde(skip)]
    pub rope_layout: RopeLayout,
    /// The longest context the model was trained for.
    pub max_positions: usize,
    /// The output projection is the token embedding (no separate `lm_head`).
    pub tied_embeddings: bool,
    pub bos_token_id: Option<u32>,
    /// Any of these ends a sample.
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub fn has_qkv_bias(&self) -> bool {
        self.architecture == Architecture::Qwen2
    }

    /// An error naming the field and its value unless every size is positive and every
    /// product the decoder forms from them fits in `usize`. A file's reader also checks
    /// the layer count against the layers whose tensors it holds
    /// ([`crate::model::names::check_layer_count`]) before listing them.
    pub fn validate(&self) -> Result<(), SproutError> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("max_positions", self.max_positions),
        ];
        if let Some((field, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(SproutError::Model(format!("{field} is 0")));
        }
        let overflow = |what: String| SproutError::Model(format!("{what} overflows"));
        let q = self.n_heads.checked_mul(self.head_dim).ok_or_else(|| {
            overflow(format!(
                "n_heads {} x head_dim {}",
                self.n_heads, self.head_dim
            ))
        })?;
        let kv = self.n_kv_heads.checked_mul(self.head_dim).ok_or_else(|| {
            overflow(format!(
                "n_kv_heads {} x head_dim {}",
                self.n_kv_heads, self.head_dim
            ))
        })?;
        kv.checked_mul(2)
            .and_then(|kv2| q.checked_add(kv2))
            .ok_or_else(|| overflow(format!("the q|k|v width {q} + 2 x {kv}")))?;
        self.n_layers
            .checked_mul(LayerTensor::ALL.len())
            .ok_or_else(|| overflow(format!("the tensor count of n_layers {}", self.n_layers)))?;
        for name in TensorName::one_of_each(self) {
            let (rows, cols) = name.shape(self);
            rows.checked_mul(cols)
                .ok_or_else(|| overflow(format!("tensor {name}'s {rows} x {cols} elements")))?;
        }
        Ok(())
    }
}
