//! The JSON files of an exported Hugging Face directory, made from what sprout knows of a
//! model: `config.json` (every field transformers needs to build the same model),
//! `generation_config.json` (bos and every end-of-sample id) and `tokenizer_config.json`
//! (the chat template, and the bos and eos tokens as text).
//!
//! Invariant: reading `config.json` and `generation_config.json` back
//! ([`crate::model::hf_config::config_from_hf`]) gives the config they were made from, but
//! for the RoPE layout, which is always half-split in a Hugging Face directory (the
//! export's tensors put q and k rows in that order). The first eos id goes in
//! `config.json` and the full list, in order, in `generation_config.json`, which sprout
//! (and transformers' `generate`) read after it. A GGUF's `rope_freqs.weight` divisors are
//! written as the llama3 parameters that give them back
//! ([`crate::model::rope_scaling::llama3_from_divisors`]); divisors that no such
//! parameters give are refused, naming why, before anything is written.

use serde_json::{Value, json};

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::{gemma3, qwen3, smollm3};
use crate::tokenizer::Tokenizer;

/// PyTorch's name of a float format, as `torch_dtype` says it.
fn torch_dtype(format: WeightFormat) -> &'static str {
    match format {
        WeightFormat::F16 => "float16",
        WeightFormat::Bf16 => "bfloat16",
        _ => "float32",
    }
}

/// An f32 as the f64 whose shortest decimal is the f32's (1e-5, not 9.99999974e-6), so
/// that the JSON reads as the number the model file held.
fn shortest(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(x as f64)
}

/// One id as a number, several as a list, none as null (transformers takes all three).
fn ids(ids: &[u32]) -> Value {
    match ids {
        [] => Value::Null,
        [id] => json!(id),
        many => json!(many),
    }
}

/// `config.json` for a model with `config` whose weights are stored in `format`; an
/// error when config.json cannot say the model's RoPE scaling.
pub fn config_json(config: &ModelConfig, format: WeightFormat) -> Result<Value, SproutError> {
    let c = config;
    let (class, model_type) = match c.architecture {
        Architecture::Llama => ("LlamaForCausalLM", "llama"),
        Architecture::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
        Architecture::Qwen3 => ("Qwen3ForCausalLM", "qwen3"),
        Architecture::SmolLm3 => ("SmolLM3ForCausalLM", "smollm3"),
        Architecture::Gemma3 => ("Gemma3ForCausalLM", "gemma3_text"),
    };
    let rope_scaling = match &c.rope_scaling {
        None => Value::Null,
        Some(scaling) => scaling.to_hf_json(c.head_dim, c.rope_theta)?,
    };
    let mut out = json!({
        "architectures": [class],
        "model_type": model_type,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": shortest(c.rms_norm_eps),
        "rope_theta": c.rope_theta,
        "rope_scaling": rope_scaling,
        "max_position_embeddings": c.max_positions,
        "vocab_size": c.vocab_size,
        "tie_word_embeddings": c.tied_embeddings,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": ids(&c.eos_token_ids[..c.eos_token_ids.len().min(1)]),
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": true,
        // transformers before 4.56 reads torch_dtype, later ones dtype.
        "torch_dtype": torch_dtype(format),
        "dtype": torch_dtype(format),
    });
    let fields = out.as_object_mut().expect("a JSON object");
    match c.architecture {
        Architecture::Llama => {
            fields.insert("attention_bias".into(), json!(false));
            fields.insert("mlp_bias".into(), json!(false));
        }
        Architecture::Qwen2 => {
            fields.insert("use_sliding_window".into(), json!(false));
            fields.insert("sliding_window".into(), Value::Null);
            fields.insert("max_window_layers".into(), json!(c.n_layers));
        }
        Architecture::Qwen3 => {
            for (key, value) in qwen3::hf_config_fields(c) {
                fields.insert(key.into(), value);
            }
        }
        Architecture::SmolLm3 => {
            for (key, value) in smollm3::hf_config_fields(c) {
                fields.insert(key.into(), value);
            }
        }
        Architecture::Gemma3 => {
            // Gemma names its activation hidden_activation.
            fields.remove("hidden_act");
            for (key, value) in gemma3::hf_config_fields(c) {
                fields.insert(key.into(), value);
            }
        }
    }
    Ok(out)
}

/// `generation_config.json`: the bos id and every id that ends a sample.
pub fn generation_config_json(config: &ModelConfig) -> Value {
    json!({
        "bos_token_id": config.bos_token_id,
        "eos_token_id": ids(&config.eos_token_ids),
    })
}

/// `tokenizer_config.json` for `tokenizer` (saved beside it as `tokenizer.json`): the
/// generic fast tokenizer class, which encodes exactly as `tokenizer.json` says (its
/// post-processor adds bos where the model's tokenizer does), the bos and eos tokens by
/// their text, and the chat template when there is one.
pub fn tokenizer_config_json(
    config: &ModelConfig,
    tokenizer: &Tokenizer,
    chat_template: Option<&str>,
) -> Result<Value, SproutError> {
    let text = |id: u32| {
        tokenizer.id_to_token(id).ok_or_else(|| {
            SproutError::Tokenizer(format!("special token id {id} is outside the vocabulary"))
        })
    };
    let mut out = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": false,
        "model_max_length": config.max_positions,
    });
    let fields = out.as_object_mut().expect("a JSON object");
    if let Some(id) = config.bos_token_id {
        fields.insert("bos_token".into(), json!(text(id)?));
    }
    if let Some(&id) = config.eos_token_ids.first() {
        fields.insert("eos_token".into(), json!(text(id)?));
    }
    if let Some(template) = chat_template {
        fields.insert("chat_template".into(), json!(template));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::kernels::rope::RopeLayout;
    use crate::model::dummy::{BUILTIN_CONFIGS, builtin_config};
    use crate::model::hf_config::config_from_hf;
    use crate::model::rope_scaling::RopeScaling;

    #[test]
    fn the_config_reads_back_as_it_was_made() {
        for name in BUILTIN_CONFIGS {
            let mut config = builtin_config(name).unwrap();
            config.eos_token_ids = vec![2, 0, 7];
            config.rms_norm_eps = 1e-5;
            config.rope_layout = RopeLayout::Interleaved;
            for tied in [true, false] {
                config.tied_embeddings = tied;
                let file = config_json(&config, WeightFormat::Bf16)
                    .unwrap()
                    .to_string();
                let generation = generation_config_json(&config).to_string();
                let json: Value = serde_json::from_str(&file).unwrap();
                assert_eq!(json["rms_norm_eps"], json!(1e-5), "the shortest decimal");
                // The file says whether embeddings are tied; no tensors are looked at.
                let back = config_from_hf(&file, Some(&generation), |_| true).unwrap();
                assert_eq!(back.rope_layout, RopeLayout::HalfSplit);
                assert_eq!(
                    serde_json::to_value(&back).unwrap(),
                    serde_json::to_value(&config).unwrap(),
                    "{name}, tied {tied}"
                );
            }
        }
    }

    #[test]
    fn llama3_scaling_reads_back_and_gguf_divisors_become_its_parameters() {
        let mut config = builtin_config("tiny-llama").unwrap();
        config.rope_scaling = Some(RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        });
        let file = config_json(&config, WeightFormat::F32).unwrap();
        assert_eq!(file["rope_scaling"]["rope_type"], json!("llama3"));
        assert_eq!(
            file["rope_scaling"]["original_max_position_embeddings"],
            json!(8192)
        );
        let back = config_from_hf(&file.to_string(), None, |_| true).unwrap();
        assert_eq!(back.rope_scaling, config.rope_scaling);
        // A scaling as a GGUF's divisors: the same rope_scaling (two of the head's eight
        // pairs lie between its bands).
        config.rope_theta = 10000.0;
        config.rope_scaling = Some(RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 8.0,
            original_max_position_embeddings: 1000.0,
        });
        let llama3 = config.clone();
        let base = crate::gpu::kernels::rope::frequencies(config.head_dim, config.rope_theta);
        let divisors = base
            .iter()
            .zip(config.rope_frequencies())
            .map(|(b, s)| (b / s) as f32)
            .collect();
        config.rope_scaling = Some(RopeScaling::from_divisors(divisors, 16).unwrap());
        let from_divisors = config_json(&config, WeightFormat::F32).unwrap();
        assert_eq!(
            from_divisors["rope_scaling"],
            config_json(&llama3, WeightFormat::F32).unwrap()["rope_scaling"]
        );
        // Divisors no llama3 parameters give are refused.
        config.rope_scaling = Some(RopeScaling::from_divisors(vec![2.0; 8], 16).unwrap());
        let e = config_json(&config, WeightFormat::F32)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rope_freqs.weight") && e.contains("llama3"),
            "{e}"
        );
    }

    #[test]
    fn one_or_no_eos_id_is_a_number_or_null() {
        let mut config = builtin_config("tiny-llama").unwrap();
        config.eos_token_ids = vec![5];
        config.bos_token_id = None;
        let g = generation_config_json(&config);
        assert_eq!(g, json!({"bos_token_id": null, "eos_token_id": 5}));
        config.eos_token_ids.clear();
        let c = config_json(&config, WeightFormat::F32).unwrap();
        assert_eq!(
            (&c["eos_token_id"], &c["torch_dtype"]),
            (&Value::Null, &json!("float32"))
        );
    }
}
