//! What the decoder needs to know about a model, whatever file it came from.
//!
//! Invariant: every reader ends with [`ModelConfig::validate`] (in `config_check`), so a
//! config that a source hands out has no zero size and no product of sizes (a head group,
//! a tensor's element count, the tensor count) that overflows; the code that sizes
//! buffers from it can then multiply freely.

use serde::Serialize;

use crate::gpu::kernels::rope::{RopeLayout, frequencies};
use crate::model::rope_scaling::RopeScaling;
use crate::tokenizer::chat_template::TemplateTokens;

/// Decoder-only transformer families sprout runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama 2 and 3, SmolLM, Mistral without sliding window.
    Llama,
    /// Qwen2: Llama's shape plus biases on the q, k and v projections.
    Qwen2,
    /// Qwen3: Llama's shape plus an RMSNorm over each q and k head (`model::qwen3`).
    Qwen3,
    /// SmolLM3: Llama's shape with RoPE left out of some layers (`model::smollm3`).
    SmolLm3,
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
    /// How the per-pair frequencies are scaled (Llama 3.x), if at all
    /// ([`ModelConfig::rope_frequencies`]).
    pub rope_scaling: Option<RopeScaling>,
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
    /// The layers whose q and k are not rotated (SmolLM3's `no_rope_layers`), in order;
    /// empty for every other family.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layers_without_rope: Vec<usize>,
}

impl ModelConfig {
    /// The per-pair RoPE frequencies the model computes with: `theta^(-2i / head_dim)`,
    /// scaled as its config says, in f64.
    pub fn rope_frequencies(&self) -> Vec<f64> {
        let mut freqs = frequencies(self.head_dim, self.rope_theta);
        if let Some(scaling) = &self.rope_scaling {
            scaling.apply(&mut freqs);
        }
        freqs
    }
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub fn has_qkv_bias(&self) -> bool {
        self.architecture == Architecture::Qwen2
    }

    /// Each q and k head is RMS-normalised (weights `q_norm`, `k_norm` of `head_dim`)
    /// before RoPE.
    pub fn has_qk_norm(&self) -> bool {
        self.architecture == Architecture::Qwen3
    }

    /// What a chat template prints as `bos_token` and `eos_token`: the beginning-of-sequence
    /// token and the first end-of-sequence token.
    pub fn template_tokens(&self) -> TemplateTokens {
        TemplateTokens {
            bos: self.bos_token_id,
            eos: self.eos_token_ids.first().copied(),
        }
    }
}
