//! sprout's canonical tensor names (the table in [`crate::model::source`]) as data: parsing
//! a name, listing the tensors a config needs, and the shape each must have.
//!
//! Every weight source maps these names to its own (`blk.0.attn_q.weight`,
//! `model.layers.0.self_attn.q_proj.weight`) and checks each tensor's shape here, so a
//! file that does not match its config fails when it is opened, naming the tensor.

use std::fmt;

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::model::config::ModelConfig;

/// A tensor of one decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerTensor {
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    /// Qwen3's RMSNorm weights over each q head and each k head (`head_dim` values).
    QNorm,
    KNorm,
    O,
    MlpNorm,
    Gate,
    Up,
    Down,
    /// Gemma 3's RMSNorms of the attention output and of the MLP output, before each
    /// residual add.
    PostAttnNorm,
    PostMlpNorm,
}

impl LayerTensor {
    pub const ALL: [LayerTensor; 16] = [
        LayerTensor::AttnNorm,
        LayerTensor::Q,
        LayerTensor::K,
        LayerTensor::V,
        LayerTensor::QBias,
        LayerTensor::KBias,
        LayerTensor::VBias,
        LayerTensor::QNorm,
        LayerTensor::KNorm,
        LayerTensor::O,
        LayerTensor::MlpNorm,
        LayerTensor::Gate,
        LayerTensor::Up,
        LayerTensor::Down,
        LayerTensor::PostAttnNorm,
        LayerTensor::PostMlpNorm,
    ];

    /// The suffix after `layers.{i}.`.
    pub fn suffix(self) -> &'static str {
        match self {
            LayerTensor::AttnNorm => "attn_norm",
            LayerTensor::Q => "q",
            LayerTensor::K => "k",
            LayerTensor::V => "v",
            LayerTensor::QBias => "q_bias",
            LayerTensor::KBias => "k_bias",
            LayerTensor::VBias => "v_bias",
            LayerTensor::QNorm => "q_norm",
            LayerTensor::KNorm => "k_norm",
            LayerTensor::O => "o",
            LayerTensor::MlpNorm => "mlp_norm",
            LayerTensor::Gate => "gate",
            LayerTensor::Up => "up",
            LayerTensor::Down => "down",
            LayerTensor::PostAttnNorm => "post_attn_norm",
            LayerTensor::PostMlpNorm => "post_mlp_norm",
        }
    }

    pub fn is_bias(self) -> bool {
        matches!(
            self,
            LayerTensor::QBias | LayerTensor::KBias | LayerTensor::VBias
        )
    }

    pub fn is_qk_norm(self) -> bool {
        matches!(self, LayerTensor::QNorm | LayerTensor::KNorm)
    }

    pub fn is_post_norm(self) -> bool {
        matches!(self, LayerTensor::PostAttnNorm | LayerTensor::PostMlpNorm)
    }

    /// An RMSNorm's weights.
    pub fn is_norm(self) -> bool {
        matches!(self, LayerTensor::AttnNorm | LayerTensor::MlpNorm)
            || self.is_qk_norm()
            || self.is_post_norm()
    }
}

/// A canonical tensor name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorName {
    Embed,
    Layer(usize, LayerTensor),
    FinalNorm,
    LmHead,
}

impl TensorName {
    /// Parses a canonical name (`embed`, `layers.3.q`, ...); `None` for anything else.
    pub fn parse(name: &str) -> Option<TensorName> {
        match name {
            "embed" => return Some(TensorName::Embed),
            "final_norm" => return Some(TensorName::FinalNorm),
            "lm_head" => return Some(TensorName::LmHead),
            _ => {}
        }
        let (index, suffix) = name.strip_prefix("layers.")?.split_once('.')?;
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let layer = index.parse().ok()?;
        let tensor = LayerTensor::ALL
            .into_iter()
            .find(|t| t.suffix() == suffix)?;
        Some(TensorName::Layer(layer, tensor))
    }

    /// `(rows, cols)` that `config` requires of this tensor (vectors have one row).
    pub fn shape(self, config: &ModelConfig) -> (usize, usize) {
        let (hidden, q, kv) = (config.hidden_size, config.q_dim(), config.kv_dim());
        match self {
            TensorName::Embed | TensorName::LmHead => (config.vocab_size, hidden),
            TensorName::FinalNorm => (1, hidden),
            TensorName::Layer(_, t) => match t {
                LayerTensor::AttnNorm | LayerTensor::MlpNorm => (1, hidden),
                LayerTensor::PostAttnNorm | LayerTensor::PostMlpNorm => (1, hidden),
                LayerTensor::Q => (q, hidden),
                LayerTensor::K | LayerTensor::V => (kv, hidden),
                LayerTensor::QBias => (1, q),
                LayerTensor::KBias | LayerTensor::VBias => (1, kv),
                LayerTensor::QNorm | LayerTensor::KNorm => (1, config.head_dim),
                LayerTensor::O => (hidden, q),
                LayerTensor::Gate | LayerTensor::Up => (config.intermediate_size, hidden),
                LayerTensor::Down => (hidden, config.intermediate_size),
            },
        }
    }

    /// Whether a model with `config` has this tensor at all (`lm_head` only when untied,
    /// q/k/v biases only for Qwen2, q/k norms only for Qwen3 and Gemma 3, post norms only
    /// for Gemma 3, layers only below `n_layers`).
    pub fn exists_in(self, config: &ModelConfig) -> bool {
        match self {
            TensorName::Embed | TensorName::FinalNorm => true,
            TensorName::LmHead => !config.tied_embeddings,
            TensorName::Layer(i, t) => {
                i < config.n_layers
                    && (!t.is_bias() || config.has_qkv_bias())
                    && (!t.is_qk_norm() || config.has_qk_norm())
                    && (!t.is_post_norm() || config.has_post_norms())
            }
        }
    }

    /// Norms and biases: one row, which the kernels take in f32. Every other tensor (the
    /// embedding, the projections, the head) is a matrix, stored in a weight format.
    pub fn is_vector(self) -> bool {
        match self {
            TensorName::Embed | TensorName::LmHead => false,
            TensorName::FinalNorm => true,
            TensorName::Layer(_, t) => t.is_norm() || t.is_bias(),
        }
    }

    /// An RMSNorm's weights (the final norm's too).
    pub fn is_norm(self) -> bool {
        match self {
            TensorName::FinalNorm => true,
            TensorName::Layer(_, t) => t.is_norm(),
            TensorName::Embed | TensorName::LmHead => false,
        }
    }

    /// An error naming the first matrix of `config` whose rows `format` cannot store (a
    /// quantized format stores each row in blocks of 32 values, a K-quant in 256). Layer 0 stands for every
    /// layer; vectors are not checked (they stay in a float format).
    pub fn check_storable(config: &ModelConfig, format: WeightFormat) -> Result<(), SproutError> {
        for name in Self::one_of_each(config)
            .into_iter()
            .filter(|n| !n.is_vector())
        {
            let (rows, cols) = name.shape(config);
            if format.row_bytes(cols).is_err() {
                return Err(SproutError::Model(format!(
                    "tensor {name} is {rows} x {cols}, but {format} stores each row in blocks \
                     of {block} values and {cols} is not a multiple of {block}",
                    block = format.block_len()
                )));
            }
        }
        Ok(())
    }

    /// Every tensor `config` needs, in file order: embedding, layers, final norm, head.
    /// Its length grows with `n_layers`: a layer count read from a file is checked
    /// against the file's tensors ([`check_layer_count`]) before this is called.
    pub fn all(config: &ModelConfig) -> Vec<TensorName> {
        Self::first_layers(config, config.n_layers)
    }

    /// The tensors of every kind `config` needs, with layer 0 standing for every layer:
    /// what checks that depend on a tensor's kind but not on its layer go through.
    pub fn one_of_each(config: &ModelConfig) -> Vec<TensorName> {
        Self::first_layers(config, config.n_layers.min(1))
    }

    fn first_layers(config: &ModelConfig, layers: usize) -> Vec<TensorName> {
        let mut names = vec![TensorName::Embed];
        for i in 0..layers {
            names.extend(LayerTensor::ALL.map(|t| TensorName::Layer(i, t)));
        }
        names.extend([TensorName::FinalNorm, TensorName::LmHead]);
        names.retain(|n| n.exists_in(config));
        names
    }

    /// An error unless a tensor stored as `rows x cols` has the shape `config` requires.
    /// `stored_as` is the tensor's name in the file, for the message.
    pub fn check_shape(
        self,
        config: &ModelConfig,
        stored_as: &str,
        rows: usize,
        cols: usize,
    ) -> Result<(), SproutError> {
        let (want_rows, want_cols) = self.shape(config);
        if (rows, cols) == (want_rows, want_cols) {
            return Ok(());
        }
        Err(SproutError::Model(format!(
            "tensor {stored_as} ({self}) is {rows} x {cols}, but the model's config needs \
             {want_rows} x {want_cols}"
        )))
    }
}

impl fmt::Display for TensorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorName::Embed => f.write_str("embed"),
            TensorName::FinalNorm => f.write_str("final_norm"),
            TensorName::LmHead => f.write_str("lm_head"),
            TensorName::Layer(i, t) => write!(f, "layers.{i}.{}", t.suffix()),
        }
    }
}

/// An error unless layers `0..n_layers` each have their first tensor (the attention
/// norm) in a source: `field` is the file's name for the layer count, for the message.
/// Runs before anything is sized by the count; `has` answers from the source's own
/// tensor table, so the count of layers present is bounded by that table's size.
pub fn check_layer_count(
    field: &str,
    n_layers: usize,
    has: impl Fn(TensorName) -> bool,
) -> Result<(), SproutError> {
    let present = (0..n_layers)
        .take_while(|&i| has(TensorName::Layer(i, LayerTensor::AttnNorm)))
        .count();
    if present < n_layers {
        return Err(SproutError::Model(format!(
            "{field} {n_layers} exceeds the {present} layers whose tensors are present"
        )));
    }
    Ok(())
}

/// The error for a canonical name that a source does not have.
pub(crate) fn missing(name: &str, source: &str) -> SproutError {
    match TensorName::parse(name) {
        Some(_) => SproutError::Model(format!("{source} has no tensor `{name}`")),
        None => SproutError::Model(format!(
            "`{name}` is not a tensor name sprout knows (expected embed, layers.N.q, ..., \
             final_norm, lm_head)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::kernels::rope::RopeLayout;
    use crate::model::config::Architecture;

    fn tiny_config(architecture: Architecture, tied: bool) -> ModelConfig {
        ModelConfig {
            architecture,
            vocab_size: 10,
            hidden_size: 8,
            intermediate_size: 12,
            n_layers: 2,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 4,
            rms_norm_eps: 1e-5,
            rope_theta: 10000.0,
            rope_scaling: None,
            rope_layout: RopeLayout::HalfSplit,
            max_positions: 64,
            tied_embeddings: tied,
            bos_token_id: None,
            eos_token_ids: vec![],
            layers_without_rope: Vec::new(),
            sliding_window: None,
            query_pre_attn_scalar: None,
        }
    }

    #[test]
    fn names_round_trip() {
        for name in [
            "embed",
            "final_norm",
            "lm_head",
            "layers.0.q",
            "layers.17.v_bias",
            "layers.3.q_norm",
        ] {
            assert_eq!(TensorName::parse(name).unwrap().to_string(), name);
        }
        for bad in [
            "layers.x.q",
            "layers.1.qq",
            "layers..q",
            "layers.-1.q",
            "embedding",
        ] {
            assert_eq!(TensorName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_tensor_list_follows_the_config() {
        let llama = tiny_config(Architecture::Llama, true);
        assert_eq!(TensorName::all(&llama).len(), 1 + 2 * 9 + 1);
        let qwen = tiny_config(Architecture::Qwen2, false);
        let all = TensorName::all(&qwen);
        assert_eq!(all.len(), 1 + 2 * 12 + 2);
        assert_eq!(all.last(), Some(&TensorName::LmHead));
        assert_eq!(
            TensorName::parse("layers.1.k").unwrap().shape(&qwen),
            (4, 8)
        );
        assert_eq!(
            TensorName::parse("layers.1.down").unwrap().shape(&qwen),
            (8, 12)
        );
        assert_eq!(TensorName::one_of_each(&qwen).len(), 1 + 12 + 2);
        // Qwen3: no biases, a norm over each q and k head; q may be wider than hidden.
        let qwen3 = ModelConfig {
            head_dim: 8,
            ..tiny_config(Architecture::Qwen3, true)
        };
        let all = TensorName::all(&qwen3);
        assert_eq!(all.len(), 1 + 2 * 11 + 1);
        let shape = |n: &str| TensorName::parse(n).unwrap().shape(&qwen3);
        assert_eq!(shape("layers.1.q_norm"), (1, 8));
        assert_eq!(shape("layers.0.k_norm"), (1, 8));
        assert_eq!(shape("layers.0.q"), (16, 8));
        assert_eq!(shape("layers.0.o"), (8, 16));
        assert!(TensorName::parse("layers.0.k_norm").unwrap().is_vector());
        assert!(!all.contains(&TensorName::parse("layers.0.q_bias").unwrap()));
        assert!(!TensorName::all(&qwen).contains(&TensorName::parse("layers.0.q_norm").unwrap()));
    }

    #[test]
    fn a_layer_count_past_the_tensors_present_is_named() {
        let has = |n: TensorName| matches!(n, TensorName::Layer(i, _) if i < 3);
        assert!(check_layer_count("block_count", 3, has).is_ok());
        let err = check_layer_count("block_count", usize::MAX, has)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "block_count {} exceeds the 3 layers whose tensors are present",
                usize::MAX
            )
        );
    }

    #[test]
    fn a_wrong_shape_names_the_tensor() {
        let config = tiny_config(Architecture::Llama, true);
        let err = TensorName::Embed
            .check_shape(&config, "token_embd.weight", 11, 8)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("token_embd.weight") && err.contains("10 x 8"),
            "{err}"
        );
    }
}
