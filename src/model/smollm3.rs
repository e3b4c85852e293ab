//! SmolLM3, as its differences from the Llama decoder (`model::decoder`): some layers apply
//! no RoPE to q and k. `config.json`'s `no_rope_layers[i]` is 1 where layer `i` rotates
//! and 0 where it does not; without the list, every `no_rope_layer_interval`-th layer
//! (default 4: layers 3, 7, ...) goes without, as transformers' `SmolLM3Config` says.
//!
//! The decoder gives those layers a RoPE table of angle 0 at every position (cos 1, sin
//! 0): the fused epilogue's rotation `(fma(a, 1, -(b * 0)), fma(a, 0, b * 1))` is then
//! `(a, b)` exactly, so nothing on the GPU changes. Everything else is Llama's (the name
//! maps, the weights, the readers' `SmolLM3ForCausalLM` entry).

use serde_json::{Value, json};

use crate::model::config::ModelConfig;

/// transformers' `no_rope_layer_interval` when config.json gives none.
pub const DEFAULT_NO_ROPE_INTERVAL: usize = 4;

/// The layers without RoPE, from config.json's `no_rope_layers` (one 0 or 1 per layer) or,
/// without it, every `interval`-th layer; an error naming the field when the list does
/// not fit the model.
pub fn layers_without_rope(
    no_rope_layers: Option<&[u64]>,
    interval: Option<usize>,
    n_layers: usize,
) -> Result<Vec<usize>, String> {
    match no_rope_layers {
        Some(list) => {
            if list.len() != n_layers {
                return Err(format!(
                    "no_rope_layers has {} entries for {n_layers} layers",
                    list.len()
                ));
            }
            if let Some((i, v)) = list.iter().enumerate().find(|(_, v)| **v > 1) {
                return Err(format!("no_rope_layers[{i}] is {v}, not 0 or 1"));
            }
            Ok((0..n_layers).filter(|&i| list[i] == 0).collect())
        }
        None => {
            let interval = interval.unwrap_or(DEFAULT_NO_ROPE_INTERVAL);
            if interval == 0 {
                return Err("no_rope_layer_interval is 0".into());
            }
            Ok((0..n_layers).filter(|i| (i + 1) % interval == 0).collect())
        }
    }
}

/// The fields of an exported `config.json` that only SmolLM3 has, as transformers'
/// `SmolLM3Config` names them. `pad_token_id` is written as null: the config's default
/// (128004, SmolLM3's own) is outside a smaller vocabulary, and padding changes nothing
/// a forward pass computes.
pub(crate) fn hf_config_fields(c: &ModelConfig) -> Vec<(&'static str, Value)> {
    let list: Vec<u8> = (0..c.n_layers)
        .map(|i| u8::from(!c.layers_without_rope.contains(&i)))
        .collect();
    vec![
        ("no_rope_layers", json!(list)),
        ("attention_bias", json!(false)),
        ("mlp_bias", json!(false)),
        ("use_sliding_window", json!(false)),
        ("sliding_window", Value::Null),
        ("pad_token_id", Value::Null),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_or_every_interval_th_layer_goes_without_rope() {
        assert_eq!(
            layers_without_rope(Some(&[1, 0, 1, 0]), None, 4),
            Ok(vec![1, 3])
        );
        assert_eq!(layers_without_rope(None, None, 8), Ok(vec![3, 7]));
        assert_eq!(layers_without_rope(None, Some(2), 5), Ok(vec![1, 3]));
        let e = layers_without_rope(Some(&[1, 0]), None, 3).unwrap_err();
        assert!(e.contains("2 entries for 3 layers"), "{e}");
        let e = layers_without_rope(Some(&[1, 2]), None, 2).unwrap_err();
        assert!(e.contains("no_rope_layers[1] is 2"), "{e}");
        assert!(layers_without_rope(None, Some(0), 2).is_err());
    }
}
