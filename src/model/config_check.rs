//! The checks every model config passes before anything is sized from it
//! ([`ModelConfig::validate`]). Apart from `config` because they list the config's tensors
//! (`names`), which themselves read the config.

use crate::error::SproutError;
use crate::model::config::ModelConfig;
use crate::model::names::{LayerTensor, TensorName};

impl ModelConfig {
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
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(SproutError::Model(format!(
                "rope_theta {} is not a positive number",
                self.rope_theta
            )));
        }
        if let Some(w) = &self.sliding_window {
            if w.size == 0 {
                return Err(SproutError::Model("sliding_window is 0".into()));
            }
            if let Some(l) = w.layers.iter().find(|&&l| l >= self.n_layers) {
                return Err(SproutError::Model(format!(
                    "sliding-window layer {l} is past the model's {} layers",
                    self.n_layers
                )));
            }
            if !(w.rope_theta.is_finite() && w.rope_theta > 0.0) {
                return Err(SproutError::Model(format!(
                    "the local RoPE base {} is not a positive number",
                    w.rope_theta
                )));
            }
        }
        if let Some(s) = self.query_pre_attn_scalar
            && !(s.is_finite() && s > 0.0 && (s.powf(-0.5) as f32).is_normal())
        {
            return Err(SproutError::Model(format!(
                "query_pre_attn_scalar {s} is not a positive number"
            )));
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
