//! The seven linear projections of a decoder layer that a LoRA adapter may target, as PEFT
//! names them (Hugging Face's module names, the same for every family sprout runs), with
//! the shape each has in a model and the fused site it belongs to.

use crate::model::config::ModelConfig;

/// A projection of one decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Projection {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Projection {
    /// In the order of their sites and, within a site, of their stacked A rows.
    pub const ALL: [Projection; 7] = [
        Projection::Q,
        Projection::K,
        Projection::V,
        Projection::O,
        Projection::Gate,
        Projection::Up,
        Projection::Down,
    ];

    /// The module's name after `model.layers.{l}.`.
    pub fn suffix(self) -> &'static str {
        match self {
            Projection::Q => "self_attn.q_proj",
            Projection::K => "self_attn.k_proj",
            Projection::V => "self_attn.v_proj",
            Projection::O => "self_attn.o_proj",
            Projection::Gate => "mlp.gate_proj",
            Projection::Up => "mlp.up_proj",
            Projection::Down => "mlp.down_proj",
        }
    }

    /// The full module name in layer `layer` (`model.layers.3.self_attn.q_proj`): what
    /// PEFT matches `target_modules` and its patterns against.
    pub fn module_name(self, layer: usize) -> String {
        format!("model.layers.{layer}.{}", self.suffix())
    }

    /// `(out, in)`: the rows and columns of the base weight, so A is `[r, in]` and B
    /// `[out, r]`.
    pub fn shape(self, model: &ModelConfig) -> (usize, usize) {
        let (hidden, inter) = (model.hidden_size, model.intermediate_size);
        match self {
            Projection::Q => (model.q_dim(), hidden),
            Projection::K | Projection::V => (model.kv_dim(), hidden),
            Projection::O => (hidden, model.q_dim()),
            Projection::Gate | Projection::Up => (inter, hidden),
            Projection::Down => (hidden, inter),
        }
    }
}

/// Modules of a causal LM outside the decoder layers that PEFT can target but sprout runs
/// no adapter on: the token embedding and the output projection.
pub const UNSUPPORTED_MODULES: [&str; 2] = ["model.embed_tokens", "lm_head"];
