//! Gemma 3 (`Gemma3ForCausalLM`, `gemma3_text`; GGUF `gemma3`), as its differences from
//! the Llama decoder (`model::decoder`), exactly as transformers computes them in f32:
//! - the embedding rows are multiplied by `sqrt(hidden_size)`, rounded to f32
//!   ([`ModelConfig::embedding_scale`]);
//! - every RMSNorm multiplies by `1 + w`: Hugging Face files store `w`, a GGUF stores
//!   `w + 1` already (llama.cpp's converter adds it). Sources hand the decoder the
//!   multiplier: a directory's norm vectors get [`HF_NORM_OFFSET`] added in f32 as they are
//!   read (what transformers' `1.0 + weight.float()` gives), and an export subtracts it
//!   again, which is exact for the multiplier but not always for `w` (`(1 + w) - 1` loses
//!   the bits of `w` below 2^-24: at most 6e-8 away);
//! - a sandwich block: `h = x + post_attn_norm(attn(attn_norm(x)))`, then
//!   `out = h + post_mlp_norm(mlp(mlp_norm(h)))` (the post norms act on the branch, before
//!   the residual add: `gpu::kernels::norm_add`);
//! - q and k heads RMS-normalised before RoPE, as Qwen3's (`model::qwen3`);
//! - attention scores scaled by `query_pre_attn_scalar ** -0.5`;
//! - the MLP `down(gelu_tanh(gate x) * up x)`;
//! - sliding-window attention on the layers `layer_types` marks `sliding_attention`
//!   (without it, all but every `sliding_window_pattern`-th, default 6): key j is visible to
//!   query i when `i - j < sliding_window`. Those layers rotate with their own RoPE base,
//!   `rope_local_base_freq` (10,000), never scaled; the others with `rope_theta` and its
//!   scaling. transformers 5 writes both bases as `rope_parameters.sliding_attention` and
//!   `.full_attention`.
//!
//! A GGUF says less: the window (`gemma3.attention.sliding_window`) but neither the layer
//! pattern, the local base nor the attention scalar, which llama.cpp (and transformers
//! reading a GGUF) take as Gemma 3's: every 6th layer global, base 10,000, and the scalar
//! `head_dim` (27B's `hidden / heads`, the one size that differs).
//!
//! Softcapping (Gemma 2's), bidirectional attention (EmbeddingGemma) and any activation but
//! `gelu_pytorch_tanh` are refused by name; so is RoPE scaling other than llama3's (4B and
//! up use `linear`), as everywhere.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::formats::gguf::GgufMetadata;
use crate::model::config::{ModelConfig, SlidingWindow};
use crate::model::names::LayerTensor;
use crate::model::rope_scaling::{RopeScaling, rope_from_hf};

/// transformers' `sliding_window_pattern` when config.json gives neither it nor
/// `layer_types`: every 6th layer attends globally.
pub const DEFAULT_SLIDING_WINDOW_PATTERN: usize = 6;
/// transformers' `rope_local_base_freq` default, and llama.cpp's for every Gemma 3 GGUF.
pub const DEFAULT_LOCAL_ROPE_THETA: f64 = 10_000.0;
/// transformers' `Gemma3TextConfig` defaults for what a config.json may leave out.
pub const DEFAULT_HEAD_DIM: usize = 256;
pub const DEFAULT_KV_HEADS: usize = 4;
const DEFAULT_ROPE_THETA: f64 = 1_000_000.0;
const DEFAULT_QUERY_PRE_ATTN_SCALAR: f64 = 256.0;
const DEFAULT_SLIDING_WINDOW: usize = 4096;
/// What a Hugging Face file's norm weights lack from the multiplier the decoder uses.
pub const HF_NORM_OFFSET: f32 = 1.0;

/// What Gemma 3 reads from config.json beyond the fields every family has.
pub(crate) struct Gemma3Hf {
    pub rope_theta: f64,
    pub rope_scaling: Option<RopeScaling>,
    pub sliding_window: SlidingWindow,
    pub query_pre_attn_scalar: f64,
}

#[derive(Deserialize)]
struct Fields {
    num_hidden_layers: usize,
    hidden_activation: Option<String>,
    hidden_act: Option<String>,
    query_pre_attn_scalar: Option<f64>,
    sliding_window: Option<usize>,
    layer_types: Option<Vec<String>>,
    sliding_window_pattern: Option<usize>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    partial_rotary_factor: Option<f64>,
    final_logit_softcapping: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    use_bidirectional_attention: Option<bool>,
}

/// Gemma 3's own fields of `config_json`; an error (the text after `config.json: `) names
/// a field sprout would compute differently.
pub(crate) fn from_hf(config_json: &str) -> Result<Gemma3Hf, String> {
    let f: Fields = serde_json::from_str(config_json).map_err(|e| e.to_string())?;
    for (field, act) in [
        ("hidden_activation", &f.hidden_activation),
        ("hidden_act", &f.hidden_act),
    ] {
        if let Some(act) = act.as_deref().filter(|a| *a != "gelu_pytorch_tanh") {
            return Err(format!(
                "{field} `{act}` is not supported (Gemma 3: only gelu_pytorch_tanh)"
            ));
        }
    }
    for (field, cap) in [
        ("final_logit_softcapping", f.final_logit_softcapping),
        ("attn_logit_softcapping", f.attn_logit_softcapping),
    ] {
        if let Some(cap) = cap {
            return Err(format!("{field} is {cap}: softcapping is not supported"));
        }
    }
    if f.use_bidirectional_attention == Some(true) {
        return Err(
            "use_bidirectional_attention is true: only causal attention is supported".into(),
        );
    }
    let (rope_theta, rope_scaling, local_theta) = match f.rope_parameters.as_ref() {
        Some(p) if p.get("full_attention").is_some() || p.get("sliding_attention").is_some() => {
            if f.rope_local_base_freq.is_some() {
                return Err(
                    "rope_local_base_freq and rope_parameters.sliding_attention are both set; \
                     give one"
                        .into(),
                );
            }
            let (theta, scaling) = rope_from_hf(
                f.rope_theta.or(Some(DEFAULT_ROPE_THETA)),
                f.rope_scaling.as_ref(),
                p.get("full_attention"),
                f.partial_rotary_factor,
            )
            .map_err(|e| e.replace("rope_parameters", "rope_parameters.full_attention"))?;
            let (local, local_scaling) = rope_from_hf(
                Some(DEFAULT_LOCAL_ROPE_THETA).filter(|_| p.get("sliding_attention").is_none()),
                None,
                p.get("sliding_attention"),
                None,
            )
            .map_err(|e| e.replace("rope_parameters", "rope_parameters.sliding_attention"))?;
            if local_scaling.is_some() {
                return Err(
                    "rope_parameters.sliding_attention scales RoPE: Gemma 3's local \
                            layers never do, and sprout does not support it"
                        .into(),
                );
            }
            (theta, scaling, local)
        }
        _ => {
            let (theta, scaling) = rope_from_hf(
                f.rope_theta.or(Some(DEFAULT_ROPE_THETA)),
                f.rope_scaling.as_ref(),
                f.rope_parameters.as_ref(),
                f.partial_rotary_factor,
            )?;
            let local = f.rope_local_base_freq.unwrap_or(DEFAULT_LOCAL_ROPE_THETA);
            (theta, scaling, local)
        }
    };
    let layers = sliding_layers(
        f.layer_types.as_deref(),
        f.sliding_window_pattern,
        f.num_hidden_layers,
    )?;
    let size = f.sliding_window.unwrap_or(DEFAULT_SLIDING_WINDOW);
    if size == 0 {
        return Err("sliding_window is 0".into());
    }
    Ok(Gemma3Hf {
        rope_theta,
        rope_scaling,
        sliding_window: SlidingWindow {
            size,
            layers,
            rope_theta: local_theta,
        },
        query_pre_attn_scalar: f
            .query_pre_attn_scalar
            .unwrap_or(DEFAULT_QUERY_PRE_ATTN_SCALAR),
    })
}

/// The sliding-window layers: those `layer_types` marks `sliding_attention`, or without
/// it every layer but each `pattern`-th (default 6).
pub fn sliding_layers(
    layer_types: Option<&[String]>,
    pattern: Option<usize>,
    n_layers: usize,
) -> Result<Vec<usize>, String> {
    match layer_types {
        Some(types) => {
            if types.len() != n_layers {
                return Err(format!(
                    "layer_types has {} entries for {n_layers} layers",
                    types.len()
                ));
            }
            let mut layers = Vec::new();
            for (i, t) in types.iter().enumerate() {
                match t.as_str() {
                    "sliding_attention" => layers.push(i),
                    "full_attention" => {}
                    other => {
                        return Err(format!(
                            "layer_types[{i}] is `{other}` (Gemma 3: sliding_attention or \
                             full_attention)"
                        ));
                    }
                }
            }
            Ok(layers)
        }
        None => {
            let pattern = pattern.unwrap_or(DEFAULT_SLIDING_WINDOW_PATTERN);
            if pattern == 0 {
                return Err("sliding_window_pattern is 0".into());
            }
            Ok((0..n_layers).filter(|i| (i + 1) % pattern != 0).collect())
        }
    }
}

/// What a GGUF's `gemma3.*` metadata says beyond the common keys: the window, and what
/// llama.cpp takes as given (see the module doc). An error names the key.
pub(crate) fn from_gguf(
    meta: &GgufMetadata,
    c: &ModelConfig,
) -> Result<(SlidingWindow, f64), String> {
    for key in [
        "gemma3.attn_logit_softcapping",
        "gemma3.final_logit_softcapping",
    ] {
        if let Ok(Some(cap)) = meta.f64(key) {
            return Err(format!("{key} is {cap}: softcapping is not supported"));
        }
    }
    let size = match meta
        .u64("gemma3.attention.sliding_window")
        .map_err(|e| e.to_string())?
    {
        Some(0) => return Err("gemma3.attention.sliding_window is 0".into()),
        Some(w) => usize::try_from(w).unwrap_or(usize::MAX),
        None => return Err("the GGUF metadata has no gemma3.attention.sliding_window".into()),
    };
    let rope_theta = meta
        .f64("gemma3.rope.freq_base_swa")
        .map_err(|e| e.to_string())?
        .unwrap_or(DEFAULT_LOCAL_ROPE_THETA);
    let layers = sliding_layers(None, None, c.n_layers)?;
    // llama.cpp's attention scale for Gemma 3: 1/sqrt(head_dim), but 27B (62 layers)'s
    // 1/sqrt(hidden / heads), as its config.json's query_pre_attn_scalar says.
    let scalar = match c.n_layers {
        62 => (c.hidden_size / c.n_heads) as f64,
        _ => c.head_dim as f64,
    };
    Ok((
        SlidingWindow {
            size,
            layers,
            rope_theta,
        },
        scalar,
    ))
}

/// Hugging Face's name for a Gemma 3 layer tensor where it differs from Llama's: its
/// `post_attention_layernorm` is the norm *after* attention, and the MLP's input norm is
/// `pre_feedforward_layernorm`.
pub fn hf_layer_suffix(t: LayerTensor) -> Option<&'static str> {
    match t {
        LayerTensor::MlpNorm => Some("pre_feedforward_layernorm.weight"),
        LayerTensor::PostAttnNorm => Some("post_attention_layernorm.weight"),
        LayerTensor::PostMlpNorm => Some("post_feedforward_layernorm.weight"),
        _ => None,
    }
}

/// The fields of an exported `config.json` that only Gemma 3 has, as transformers'
/// `Gemma3TextConfig` names them.
pub(crate) fn hf_config_fields(c: &ModelConfig) -> Vec<(&'static str, Value)> {
    let (size, layer_types, local) = match &c.sliding_window {
        Some(w) => {
            let types: Vec<&str> = (0..c.n_layers)
                .map(|l| match w.layers.contains(&l) {
                    true => "sliding_attention",
                    false => "full_attention",
                })
                .collect();
            (w.size, types, w.rope_theta)
        }
        None => (
            c.max_positions,
            vec!["full_attention"; c.n_layers],
            DEFAULT_LOCAL_ROPE_THETA,
        ),
    };
    vec![
        ("hidden_activation", json!("gelu_pytorch_tanh")),
        (
            "query_pre_attn_scalar",
            json!(
                c.query_pre_attn_scalar
                    .unwrap_or(DEFAULT_QUERY_PRE_ATTN_SCALAR)
            ),
        ),
        ("sliding_window", json!(size)),
        ("layer_types", json!(layer_types)),
        ("rope_local_base_freq", json!(local)),
        ("final_logit_softcapping", Value::Null),
        ("attn_logit_softcapping", Value::Null),
        ("attention_bias", json!(false)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sliding_layers_from_the_types_or_the_pattern() {
        let t = types(&["sliding_attention", "full_attention", "sliding_attention"]);
        assert_eq!(sliding_layers(Some(&t), None, 3), Ok(vec![0, 2]));
        // transformers' default: all but every 6th.
        assert_eq!(sliding_layers(None, None, 7), Ok(vec![0, 1, 2, 3, 4, 6]));
        assert_eq!(sliding_layers(None, Some(3), 4), Ok(vec![0, 1, 3]));
        let e = sliding_layers(Some(&t), None, 4).unwrap_err();
        assert!(e.contains("3 entries for 4 layers"), "{e}");
        let bad = types(&["full_attention", "chunked_attention"]);
        let e = sliding_layers(Some(&bad), None, 2).unwrap_err();
        assert!(e.contains("layer_types[1] is `chunked_attention`"), "{e}");
        assert!(sliding_layers(None, Some(0), 2).is_err());
    }
}
