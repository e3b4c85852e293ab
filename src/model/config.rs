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
    /// Gemma 3: sandwich norms, q/k norms, GELU, sliding-window layers with their own RoPE
    /// base, scaled embeddings (`model::gemma3`).
    Gemma3,
}

/// Sliding-window attention on some layers (Gemma 3's local layers).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlidingWindow {
    /// The key at position j is visible to the query at position i when `i - j < size`.
    pub size: usize,
    /// The layers that attend through the window, in order.
    pub layers: Vec<usize>,
    /// Those layers' RoPE base (Gemma 3's `rope_local_base_freq`), never scaled.
    pub rope_theta: f64,
}

/// The gated MLP's activation: `down(act(gate x) * up x)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// PyTorch's `gelu(approximate="tanh")` (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
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
    /// Sliding-window layers (Gemma 3); `None` when every layer attends to every key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<SlidingWindow>,
    /// Attention scores are scaled by `query_pre_attn_scalar ** -0.5` (Gemma 3) rather
    /// than `head_dim ** -0.5`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_pre_attn_scalar: Option<f64>,
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
        matches!(
            self.architecture,
            Architecture::Qwen3 | Architecture::Gemma3
        )
    }

    /// The attention output and the MLP output are each RMS-normalised (weights
    /// `post_attn_norm`, `post_mlp_norm`) before their residual add (Gemma 3).
    pub fn has_post_norms(&self) -> bool {
        self.architecture == Architecture::Gemma3
    }

    pub fn activation(&self) -> Activation {
        match self.architecture {
            Architecture::Gemma3 => Activation::GeluTanh,
            _ => Activation::Silu,
        }
    }

    /// What the looked-up embedding rows are multiplied by: Gemma's `sqrt(hidden_size)`,
    /// rounded to f32 as transformers computes it in f32 (bf16 would round it further), and
    /// 1 for every other family.
    pub fn embedding_scale(&self) -> f32 {
        match self.architecture {
            Architecture::Gemma3 => (self.hidden_size as f64).sqrt() as f32,
            _ => 1.0,
        }
    }

    /// The factor attention scores are scaled by.
    pub fn attention_scale(&self) -> f32 {
        match self.query_pre_attn_scalar {
            Some(s) => s.powf(-0.5) as f32,
            None => 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    /// The sliding window layer `l` attends through, if any.
    pub fn window_of(&self, l: usize) -> Option<usize> {
        self.sliding_window
            .as_ref()
            .filter(|w| w.layers.contains(&l))
            .map(|w| w.size)
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
