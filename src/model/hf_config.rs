//! A Hugging Face `config.json` (and `generation_config.json`) as a [`ModelConfig`].
//!
//! Architectures: `LlamaForCausalLM`, `MistralForCausalLM` (only without a sliding window
//! shorter than its context), `Qwen2ForCausalLM`, `Qwen3ForCausalLM`, `SmolLM3ForCausalLM`
//! and `Gemma3ForCausalLM` (`model_type` when `architectures` is absent; Gemma 3's own
//! fields are read by `model::gemma3`). Defaults as transformers': `num_key_value_heads` absent is
//! heads for Llama, 8 for Mistral, 32 for Qwen2 and Qwen3 (null is heads); `head_dim` =
//! hidden / heads (Qwen3: 128), `rope_theta` 10000, `tie_word_embeddings` false. RoPE is
//! read in either form (`rope_theta` and `rope_scaling`, or transformers 5's
//! `rope_parameters`: `model::rope_scaling`). Anything sprout would compute differently
//! (a rope scaling other than llama3, partial rotary, another activation, Llama or Qwen3
//! attention biases, MLP biases, sliding windows, a layer type other than full attention)
//! is an error naming the field, as is a size of 0. RoPE pairs are half-split. The layer
//! count is checked against the tensors present by the directory's reader, which has them.

use serde::Deserialize;

use crate::error::SproutError;
use crate::gpu::kernels::rope::RopeLayout;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::rope_scaling::rope_from_hf;
use crate::model::{gemma3, qwen3, smollm3};

/// The fields of `config.json` that sprout reads.
#[derive(Deserialize)]
struct HfConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    /// Absent (`None`) and null (`Some(None)`) default differently.
    #[serde(default, deserialize_with = "present")]
    num_key_value_heads: Option<Option<usize>>,
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
    rope_parameters: Option<serde_json::Value>,
    partial_rotary_factor: Option<f64>,
    layer_types: Option<Vec<String>>,
    hidden_act: Option<String>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    no_rope_layers: Option<Vec<u64>>,
    no_rope_layer_interval: Option<usize>,
}

/// A field that is present, null or not: `Some(None)` for null, `None` (by `default`)
/// when absent.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
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
        "Qwen3ForCausalLM" | "qwen3" => (Architecture::Qwen3, false),
        "SmolLM3ForCausalLM" | "smollm3" => (Architecture::SmolLm3, false),
        "Gemma3ForCausalLM" | "gemma3_text" => (Architecture::Gemma3, false),
        "Gemma3ForConditionalGeneration" | "gemma3" => {
            return bad(format!(
                "architecture `{name}` is Gemma 3 with a vision tower (text_config inside); \
                 sprout runs the text-only Gemma3ForCausalLM"
            ));
        }
        other => {
            return bad(format!(
                "architecture `{other}` is not supported (supported: LlamaForCausalLM, \
                 MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, SmolLM3ForCausalLM, \
                 Gemma3ForCausalLM)"
            ));
        }
    };
    let gemma = match architecture {
        Architecture::Gemma3 => Some(
            gemma3::from_hf(config_json)
                .map_err(|m| SproutError::Model(format!("config.json: {m}")))?,
        ),
        _ => None,
    };
    let layers_without_rope = match architecture {
        Architecture::SmolLm3 => smollm3::layers_without_rope(
            c.no_rope_layers.as_deref(),
            c.no_rope_layer_interval,
            c.num_hidden_layers,
        )
        .map_err(|m| SproutError::Model(format!("config.json: {m}")))?,
        _ if c.no_rope_layers.is_some() || c.no_rope_layer_interval.is_some() => {
            let field = match c.no_rope_layers.is_some() {
                true => "no_rope_layers",
                false => "no_rope_layer_interval",
            };
            return bad(format!(
                "{field} is set, but {name} has no layers without RoPE (SmolLM3 does)"
            ));
        }
        _ => Vec::new(),
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
    if c.use_sliding_window == Some(true) {
        return bad("use_sliding_window is true: sliding-window attention is not supported".into());
    }
    // Gemma 3's layer types, RoPE and activation are its own (`gemma3::from_hf`).
    let (rope_theta, rope_scaling) = match &gemma {
        Some(g) => (g.rope_theta, g.rope_scaling.clone()),
        None => {
            if let Some((i, kind)) = c
                .layer_types
                .iter()
                .flatten()
                .enumerate()
                .find(|(_, t)| *t != "full_attention")
            {
                return bad(format!(
                    "layer_types[{i}] is `{kind}`: only full attention is supported"
                ));
            }
            if let Some(act) = c.hidden_act.as_deref().filter(|a| *a != "silu") {
                return bad(format!("hidden_act `{act}` is not supported (only silu)"));
            }
            rope_from_hf(
                c.rope_theta,
                c.rope_scaling.as_ref(),
                c.rope_parameters.as_ref(),
                c.partial_rotary_factor,
            )
            .map_err(|m| SproutError::Model(format!("config.json: {m}")))?
        }
    };
    if c.attention_bias == Some(true) && architecture != Architecture::Qwen2 {
        return bad(format!(
            "attention_bias is true: biases on {name}'s attention projections are not supported"
        ));
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
        ("num_key_value_heads", c.num_key_value_heads.flatten()),
        ("head_dim", c.head_dim),
        ("max_position_embeddings", Some(c.max_position_embeddings)),
    ];
    if let Some((field, _)) = sizes.iter().find(|(_, v)| *v == Some(0)) {
        return bad(format!("{field} is 0"));
    }
    let n_heads = c.num_attention_heads;
    let n_kv_heads = match c.num_key_value_heads {
        Some(n) => n.unwrap_or(n_heads),
        None if mistral => 8,
        None if architecture == Architecture::Llama => n_heads,
        None if architecture == Architecture::Gemma3 => gemma3::DEFAULT_KV_HEADS,
        None => 32,
    };
    if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
        return bad(format!(
            "{n_heads} attention heads cannot share {n_kv_heads} kv heads evenly"
        ));
    }
    let head_dim = match c.head_dim {
        Some(d) => d,
        None if architecture == Architecture::Qwen3 => qwen3::DEFAULT_HEAD_DIM,
        None if architecture == Architecture::Gemma3 => gemma3::DEFAULT_HEAD_DIM,
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
        rope_theta,
        rope_scaling,
        rope_layout: RopeLayout::HalfSplit,
        max_positions: c.max_position_embeddings,
        tied_embeddings: c.tie_word_embeddings.unwrap_or(false) || !has("lm_head.weight"),
        bos_token_id: c
            .bos_token_id
            .as_ref()
            .and_then(|b| b.ids().first().copied()),
        eos_token_ids,
        layers_without_rope,
        query_pre_attn_scalar: gemma.as_ref().map(|g| g.query_pre_attn_scalar),
        sliding_window: gemma.map(|g| g.sliding_window),
    };
    config
        .validate()
        .map_err(|e| SproutError::Model(format!("config.json: {e}")))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::model::rope_scaling::RopeScaling;

    /// Qwen3-0.6B's config.json, as the hub has it (sizes and fields).
    fn qwen3() -> Value {
        json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
            "max_position_embeddings": 40960, "max_window_layers": 28,
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
            "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
            "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
        })
    }

    /// Llama 3.2-1B's config.json (sizes and fields).
    fn llama32() -> Value {
        json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "attention_bias": false, "bos_token_id": 128000,
            "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
            "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
            "mlp_bias": false, "num_attention_heads": 32, "num_hidden_layers": 16,
            "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "rope_theta": 500000.0, "tie_word_embeddings": true, "vocab_size": 128256
        })
    }

    fn parse(v: &Value) -> Result<ModelConfig, String> {
        config_from_hf(&v.to_string(), None, |_| false).map_err(|e| e.to_string())
    }

    fn with(mut v: Value, changes: Value) -> Value {
        for (k, x) in changes.as_object().unwrap() {
            match x {
                Value::Null if k.starts_with('-') => {
                    v.as_object_mut().unwrap().remove(&k[1..]);
                }
                _ => v[k] = x.clone(),
            }
        }
        v
    }

    /// SmolLM3's layers without RoPE: from its list, or every 4th without one; a list
    /// elsewhere, or one that does not fit, is an error naming the field.
    #[test]
    fn smollm3_reads_its_layers_without_rope() {
        let smollm3 = with(
            qwen3(),
            json!({"architectures": ["SmolLM3ForCausalLM"],
            "model_type": "smollm3", "num_hidden_layers": 8, "-head_dim": null}),
        );
        assert_eq!(parse(&smollm3).unwrap().layers_without_rope, [3, 7]);
        let listed = with(
            smollm3.clone(),
            json!({"no_rope_layers": [1, 0, 1, 1, 1, 1, 1, 0]}),
        );
        let c = parse(&listed).unwrap();
        assert_eq!(
            (c.architecture, c.layers_without_rope),
            (Architecture::SmolLm3, vec![1, 7])
        );
        let e = parse(&with(smollm3, json!({"no_rope_layers": [1, 0]}))).unwrap_err();
        assert!(
            e.contains("no_rope_layers has 2 entries for 8 layers"),
            "{e}"
        );
        let e = parse(&with(qwen3(), json!({"no_rope_layers": [1, 0]}))).unwrap_err();
        assert!(e.contains("no_rope_layers is set"), "{e}");
        let e = parse(&with(qwen3(), json!({"no_rope_layer_interval": 4}))).unwrap_err();
        assert!(e.contains("no_rope_layer_interval is set"), "{e}");
    }

    /// Gemma 3 270M's config.json (sizes and fields, as the hub has it).
    fn gemma3() -> Value {
        json!({
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "_sliding_window_pattern": 6, "attention_bias": false, "attention_dropout": 0.0,
            "attn_logit_softcapping": null, "bos_token_id": 2, "eos_token_id": [1, 106],
            "final_logit_softcapping": null, "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640,
            "intermediate_size": 2048,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                "sliding_attention", "sliding_attention", "full_attention"],
            "max_position_embeddings": 32768, "num_attention_heads": 4,
            "num_hidden_layers": 6, "num_key_value_heads": 1, "pad_token_id": 0,
            "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
            "rope_local_base_freq": 10000.0, "rope_scaling": null, "rope_theta": 1000000.0,
            "sliding_window": 512, "use_bidirectional_attention": false,
            "vocab_size": 262144
        })
    }

    /// Gemma 3: its window, layer pattern, two RoPE bases and attention scalar, in both
    /// config forms; what it would compute differently is named.
    #[test]
    fn gemma3_reads_its_windows_bases_and_scalar() {
        let c = parse(&gemma3()).unwrap();
        assert_eq!(c.architecture, Architecture::Gemma3);
        assert!(c.has_qk_norm() && c.has_post_norms() && c.tied_embeddings);
        let w = c.sliding_window.clone().unwrap();
        assert_eq!(
            (w.size, w.layers.clone(), w.rope_theta),
            (512, vec![0, 1, 2, 3, 4], 1e4)
        );
        assert_eq!((c.rope_theta, c.query_pre_attn_scalar), (1e6, Some(256.0)));
        assert_eq!((c.window_of(4), c.window_of(5)), (Some(512), None));
        assert_eq!(c.embedding_scale(), 640f32.sqrt());
        assert_eq!(c.attention_scale(), 1.0 / 16.0);
        // Without layer_types: all but every 6th layer slide.
        let bare = with(
            gemma3(),
            json!({"-layer_types": null, "num_hidden_layers": 7}),
        );
        let layers = parse(&bare).unwrap().sliding_window.unwrap().layers;
        assert_eq!(layers, [0, 1, 2, 3, 4, 6]);
        // transformers 5's form of the same config.
        let v5 = with(
            gemma3(),
            json!({"-rope_theta": null, "-rope_scaling": null, "-rope_local_base_freq": null,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}),
        );
        let c5 = parse(&v5).unwrap();
        assert_eq!((c5.rope_theta, c5.sliding_window), (1e6, Some(w)));
        let cases = [
            (
                json!({"final_logit_softcapping": 30.0}),
                "final_logit_softcapping is 30",
            ),
            (
                json!({"attn_logit_softcapping": 50.0}),
                "attn_logit_softcapping is 50",
            ),
            (
                json!({"hidden_activation": "gelu"}),
                "hidden_activation `gelu`",
            ),
            (
                json!({"rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
                "rope scaling `linear`",
            ),
            (
                json!({"use_bidirectional_attention": true}),
                "use_bidirectional_attention",
            ),
            (
                json!({"layer_types": ["full_attention"]}),
                "layer_types has 1 entries",
            ),
            (json!({"sliding_window": 0}), "sliding_window is 0"),
            (
                json!({"architectures": ["Gemma3ForConditionalGeneration"]}),
                "vision tower",
            ),
        ];
        for (change, want) in cases {
            let e = parse(&with(gemma3(), change)).unwrap_err();
            assert!(
                e.starts_with("config.json: ") && e.contains(want),
                "{want}: {e}"
            );
        }
        let linear_v5 = with(
            v5,
            json!({"rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}),
        );
        let e = parse(&linear_v5).unwrap_err();
        assert!(e.contains("rope scaling `linear`"), "{e}");
    }

    #[test]
    fn qwen3_reads_its_head_size_and_norms() {
        let c = parse(&qwen3()).unwrap();
        assert_eq!(c.architecture, Architecture::Qwen3);
        assert!(c.has_qk_norm() && !c.has_qkv_bias() && c.tied_embeddings);
        assert_eq!(
            (c.hidden_size, c.head_dim, c.q_dim(), c.kv_dim()),
            (1024, 128, 2048, 1024)
        );
        assert_eq!((c.rope_theta, c.rope_scaling.clone()), (1e6, None));
        // transformers' Qwen3Config defaults: head_dim 128, 32 kv heads when absent.
        let bare = with(
            qwen3(),
            json!({"-head_dim": null, "-num_key_value_heads": null,
            "num_attention_heads": 32, "hidden_size": 4096}),
        );
        let c = parse(&bare).unwrap();
        assert_eq!((c.head_dim, c.n_kv_heads), (128, 32));
        let c = parse(&with(qwen3(), json!({"num_key_value_heads": null}))).unwrap();
        assert_eq!(c.n_kv_heads, 16, "null is the head count");
        let llama = with(llama32(), json!({"-num_key_value_heads": null}));
        assert_eq!(parse(&llama).unwrap().n_kv_heads, 32);
        // transformers 5's form of the same config.
        let v5 = with(
            qwen3(),
            json!({"-rope_theta": null, "-rope_scaling": null,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "layer_types": vec!["full_attention"; 28]}),
        );
        let c5 = parse(&v5).unwrap();
        assert_eq!((c5.rope_theta, c5.rope_scaling), (1e6, None));
    }

    #[test]
    fn llama3_scaling_in_both_forms() {
        let want = Some(RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        });
        let c = parse(&llama32()).unwrap();
        assert_eq!(
            (c.rope_theta, c.rope_scaling.clone(), c.head_dim),
            (5e5, want.clone(), 64)
        );
        let v5 = with(
            llama32(),
            json!({"-rope_theta": null, "-rope_scaling": null,
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192}}),
        );
        let c5 = parse(&v5).unwrap();
        assert_eq!((c5.rope_theta, c5.rope_scaling), (5e5, want));
        let old = with(
            llama32(),
            json!({"rope_scaling": {"type": "llama3", "factor": 32.0,
            "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192}}),
        );
        assert_eq!(parse(&old).unwrap().rope_scaling, c.rope_scaling);
        // The frequencies transformers' `_compute_llama3_parameters` gives for the first,
        // a blended and the last pair (f64 here; its own are f32).
        let f = c.rope_frequencies();
        assert_eq!(f[0], 1.0);
        assert!((f[31] - 500000f64.powf(-62.0 / 64.0) / 32.0).abs() < 1e-20);
        let base16 = 500000f64.powf(-32.0 / 64.0);
        assert!(
            f[16] < base16 && f[16] > base16 / 32.0,
            "pair 16 is blended"
        );
    }

    #[test]
    fn what_sprout_would_compute_differently_is_named() {
        let cases = [
            (
                with(qwen3(), json!({"attention_bias": true})),
                "attention_bias is true",
            ),
            (
                with(qwen3(), json!({"use_sliding_window": true})),
                "use_sliding_window is true",
            ),
            (
                with(
                    qwen3(),
                    json!({"layer_types": ["full_attention", "sliding_attention"]}),
                ),
                "layer_types[1] is `sliding_attention`",
            ),
            (
                with(
                    qwen3(),
                    json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                    "original_max_position_embeddings": 32768}}),
                ),
                "rope scaling `yarn`",
            ),
            (
                with(
                    llama32(),
                    json!({"rope_scaling": {"type": "linear", "factor": 2.0}}),
                ),
                "rope scaling `linear`",
            ),
            (
                with(
                    llama32(),
                    json!({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
                ),
                "rope scaling `dynamic`",
            ),
            (
                with(
                    llama32(),
                    json!({"rope_scaling": {"rope_type": "longrope"}}),
                ),
                "rope scaling `longrope`",
            ),
            (
                with(llama32(), json!({"partial_rotary_factor": 0.5})),
                "partial_rotary_factor is 0.5",
            ),
            (
                with(
                    llama32(),
                    json!({"rope_scaling": {"rope_type": "llama3", "factor": 32.0}}),
                ),
                "rope_scaling.low_freq_factor is missing",
            ),
            (
                with(llama32(), json!({"attention_bias": true})),
                "attention_bias is true",
            ),
            (with(llama32(), json!({"rope_theta": 0.0})), "rope_theta 0"),
        ];
        for (config, want) in cases {
            let e = parse(&config).unwrap_err();
            assert!(
                e.starts_with("config.json: ") && e.contains(want),
                "{want}: {e}"
            );
        }
    }
}
