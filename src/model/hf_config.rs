//! A Hugging Face `config.json` (and `generation_config.json`) as a [`ModelConfig`].
//!
//! Architectures: `LlamaForCausalLM`, `MistralForCausalLM` (only without a sliding window
//! shorter than its context) and `Qwen2ForCausalLM` (`model_type` when `architectures` is
//! absent). Defaults as transformers': `num_key_value_heads` = heads, `head_dim` =
//! hidden / heads, `rope_theta` 10000, `tie_word_embeddings` false. Anything sprout would
//! compute differently (rope scaling, another activation, Llama attention or MLP biases,
//! sliding windows) is an error naming the field, as is a size of 0. RoPE pairs are
//! half-split. The layer count is checked against the tensors present by the directory's
//! reader, which has them.

use serde::Deserialize;

use crate::error::SproutError;
use crate::gpu::kernels::rope::RopeLayout;
use crate::model::config::{Architecture, ModelConfig};

/// The fields of `config.json` that sprout reads.
#[derive(Deserialize)]
struct HfConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    max_position_embeddings: usize,
    tie_word_embeddings: Option<bool>,
    vocab_size: usize,
    bos_token_id: Option<TokenIds>,
    eos_token_id: Option<TokenIds>,
    sliding_window: Option<u64>,
    use_sliding_window: Option<bool>,
    rope_scaling: Option<serde_json::Value>,
    hidden_act: Option<String>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl TokenIds {
    fn ids(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

#[derive(Deserialize)]
struct GenerationConfig {
    eos_token_id: Option<TokenIds>,
}

/// The config from `config.json` (plus `generation_config.json`'s eos ids); `has` says
/// whether a tensor (by its Hugging Face name) exists, for tied embeddings.
pub fn config_from_hf(
    config_json: &str,
    generation_config_json: Option<&str>,
    has: impl Fn(&str) -> bool,
) -> Result<ModelConfig, SproutError> {
    let c: HfConfig = serde_json::from_str(config_json)
        .map_err(|e| SproutError::Model(format!("config.json: {e}")))?;
    let bad = |m: String| Err(SproutError::Model(format!("config.json: {m}")));
    let name = c
        .architectures
        .as_ref()
        .and_then(|a| a.first().cloned())
        .or_else(|| c.model_type.clone())
        .unwrap_or_default();
    let (architecture, mistral) = match name.as_str() {
        "LlamaForCausalLM" | "llama" => (Architecture::Llama, false),
        "MistralForCausalLM" | "mistral" => (Architecture::Llama, true),
        "Qwen2ForCausalLM" | "qwen2" => (Architecture::Qwen2, false),
        other => {
            return bad(format!(
                "architecture `{other}` is not supported (supported: LlamaForCausalLM, \
                 MistralForCausalLM, Qwen2ForCausalLM)"
            ));
        }
    };
    if mistral
        && let Some(window) = c.sliding_window
        && window < c.max_position_embeddings as u64
    {
        return bad(format!(
            "this Mistral model uses sliding-window attention (sliding_window = {window}, \
             shorter than its {} positions), which sprout does not support",
            c.max_position_embeddings
        ));
    }
    if architecture == Architecture::Qwen2 && c.use_sliding_window == Some(true) {
        return bad("use_sliding_window is true: sliding-window attention is not supported".into());
    }
    if let Some(scaling) = c.rope_scaling.as_ref().filter(|s| !s.is_null()) {
        let kind = scaling
            .get("rope_type")
            .or_else(|| scaling.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("unknown");
        if kind != "default" {
            return bad(format!("rope scaling `{kind}` is not supported yet"));
        }
    }
    if let Some(act) = c.hidden_act.as_deref().filter(|a| *a != "silu") {
        return bad(format!("hidden_act `{act}` is not supported (only silu)"));
    }
    if c.attention_bias == Some(true) && architecture == Architecture::Llama {
        return bad(
            "attention_bias is true: biases on Llama's projections are not supported".into(),
        );
    }
    if c.mlp_bias == Some(true) {
        return bad("mlp_bias is true: biases on the MLP are not supported".into());
    }
    let sizes = [
        ("vocab_size", Some(c.vocab_size)),
        ("hidden_size", Some(c.hidden_size)),
        ("intermediate_size", Some(c.intermediate_size)),
        ("num_hidden_layers", Some(c.num_hidden_layers)),
        ("num_attention_heads", Some(c.num_attention_heads)),
        ("num_key_value_heads", c.num_key_value_heads),
        ("head_dim", c.head_dim),
        ("max_position_embeddings", Some(c.max_position_embeddings)),
    ];
    if let Some((field, _)) = sizes.iter().find(|(_, v)| *v == Some(0)) {
        return bad(format!("{field} is 0"));
    }
    let n_heads = c.num_attention_heads;
    let n_kv_heads = c.num_key_value_heads.unwrap_or(n_heads);
    if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
        return bad(format!(
            "{n_heads} attention heads cannot share {n_kv_heads} kv heads evenly"
        ));
    }
    let head_dim = match c.head_dim {
        Some(d) => d,
        None if c.hidden_size.is_multiple_of(n_heads) => c.hidden_size / n_heads,
        None => {
            return bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {n_heads}",
                c.hidden_size
            ));
        }
    };
    let mut eos_token_ids = c
        .eos_token_id
        .as_ref()
        .map(TokenIds::ids)
        .unwrap_or_default();
    if let Some(text) = generation_config_json {
        let g: GenerationConfig = serde_json::from_str(text)
            .map_err(|e| SproutError::Model(format!("generation_config.json: {e}")))?;
        for id in g
            .eos_token_id
            .as_ref()
            .map(TokenIds::ids)
            .unwrap_or_default()
        {
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }
    }
    if let Some(id) = eos_token_ids
        .iter()
        .find(|&&id| id as usize >= c.vocab_size)
    {
        return bad(format!(
            "eos id {id} is outside the vocabulary of {}",
            c.vocab_size
        ));
    }
    let config = ModelConfig {
        architecture,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        n_layers: c.num_hidden_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        rms_norm_eps: c.rms_norm_eps as f32,
        rope_theta: c.rope_theta.unwrap_or(10000.0),
        rope_layout: RopeLayout::HalfSplit,
        max_positions: c.max_position_embeddings,
        tied_embeddings: c.tie_word_embeddings.unwrap_or(false) || !has("lm_head.weight"),
        bos_token_id: c
            .bos_token_id
            .as_ref()
            .and_then(|b| b.ids().first().copied()),
        eos_token_ids,
    };
    config
        .validate()
        .map_err(|e| SproutError::Model(format!("config.json: {e}")))?;
    Ok(config)
}
