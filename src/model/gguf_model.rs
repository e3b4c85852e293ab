//! A GGUF file as a [`WeightSource`]: llama.cpp's tensor names mapped to sprout's canonical
//! names, and a [`ModelConfig`] built from the file's metadata.
//!
//! Config keys (`{arch}` is `general.architecture`, `llama`, `qwen2`, `qwen3` or
//! `gemma3`, whose sliding window and what llama.cpp assumes of it are `model::gemma3`'s):
//! `{arch}.embedding_length`, `.block_count`, `.feed_forward_length`,
//! `.attention.head_count`, `.attention.head_count_kv` (default: head_count),
//! `.attention.layer_norm_rms_epsilon`, `.context_length`, `.rope.freq_base` (default
//! 10000), `.attention.key_length` (head_dim; default embedding_length / head_count), and
//! `.rope.dimension_count`, which must equal head_dim (partial rotary is not supported).
//! The vocabulary size is the token embedding's row count. Embeddings are tied when the file
//! has no `output.weight`. RoPE pairs are interleaved for `llama` (llama.cpp's converter
//! permutes q and k) and half-split for `qwen2`, `qwen3` and `gemma3`. Gemma's norm weights
//! are stored as the multiplier `1 + w` already, which is what the decoder reads. A `rope_freqs.weight` tensor
//! (Llama 3.x's rope scaling as llama.cpp's converter ships it: one f32 divisor per pair)
//! is used as the file gives it (`model::rope_scaling`); `rope.scaling.type` other than
//! `none`, and `rope.scale_linear` other than 1, are refused.
//!
//! End-of-sample ids: `tokenizer.ggml.eos_token_id`, `.eot_token_id` and `.eom_token_id`,
//! then the id of each end-of-turn token in [`END_OF_TURN_TOKENS`] that the vocabulary holds
//! as a control or user-defined token (as llama.cpp does): `<|im_end|>` and `<|endoftext|>`
//! (ChatML: SmolLM, Qwen2), `<|eot_id|>`, `<|eom_id|>` and `<|end_of_text|>` (Llama 3),
//! `<|end|>`, `<end_of_turn>`. The eos id comes first; the rest are in ascending order.
//!
//! Invariant: opening checks that every tensor the config needs is present, of a supported
//! type and of the right shape, so a `GgufModel` that opened can be read whole. The layer
//! count is checked against the `blk.N` tensors present before it sizes anything.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;

use crate::error::SproutError;
use crate::formats::gguf::{GgufFile, GgufMetadata};
use crate::formats::{TensorData, WeightFormat};
use crate::gpu::kernels::rope::RopeLayout;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::gemma3;
use crate::model::names::{self, LayerTensor, TensorName};
use crate::model::rope_scaling::RopeScaling;
use crate::model::source::WeightSource;
use crate::tokenizer::Tokenizer;
use crate::tokenizer::gguf_vocab::{TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED};

/// Tokens that end a turn or a document, added to the eos ids when the vocabulary has them.
pub const END_OF_TURN_TOKENS: [&str; 7] = [
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
];

/// The tensor of per-pair RoPE frequency divisors (Llama 3.x).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// A model read from one GGUF file.
pub struct GgufModel<R = File> {
    file: GgufFile<R>,
    config: ModelConfig,
}

impl GgufModel<File> {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SproutError> {
        let path = path.as_ref();
        Self::from_file(GgufFile::open(path)?).map_err(|e| match e {
            SproutError::Model(m) => SproutError::Model(format!("{}: {m}", path.display())),
            other => other,
        })
    }
}

impl<R: Read + Seek> GgufModel<R> {
    pub fn from_reader(reader: R) -> Result<Self, SproutError> {
        Self::from_file(GgufFile::from_reader(reader)?)
    }

    /// Builds the config (reading the RoPE divisors, if any) and checks every tensor it
    /// needs.
    pub fn from_file(mut file: GgufFile<R>) -> Result<Self, SproutError> {
        let mut config = config_from_gguf(&file)?;
        if let Some(info) = file.tensor(ROPE_FREQS) {
            // Its shape is checked before anything is read: a file's claims size no
            // allocation.
            let (rows, cols) = info.shape()?;
            let pairs = config.head_dim / 2;
            if (rows, cols) != (1, pairs) {
                return Err(SproutError::Model(format!(
                    "{ROPE_FREQS} is {rows} x {cols}, but a head of {} has {pairs} pairs \
                     (one divisor each)",
                    config.head_dim
                )));
            }
            let t = file.read_tensor(ROPE_FREQS)?;
            let divisors = RopeScaling::from_divisors(t.to_f32()?, config.head_dim)?;
            config.rope_scaling = Some(divisors);
        }
        for name in TensorName::all(&config) {
            let stored = gguf_name(name);
            let info = file.tensor(&stored).ok_or_else(|| {
                SproutError::Model(format!(
                    "the GGUF file has no tensor {stored} (sprout's {name})"
                ))
            })?;
            info.format()?;
            let (rows, cols) = info.shape()?;
            name.check_shape(&config, &stored, rows, cols)?;
        }
        Ok(GgufModel { file, config })
    }

    pub fn metadata(&self) -> &GgufMetadata {
        self.file.metadata()
    }

    /// The parsed file: tensor infos, alignment, data offset.
    pub fn gguf(&self) -> &GgufFile<R> {
        &self.file
    }

    /// The Jinja chat template (`tokenizer.chat_template`), if the file has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.metadata()
            .str("tokenizer.chat_template")
            .ok()
            .flatten()
    }

    /// The tokenizer built from the file's own vocabulary.
    pub fn tokenizer(&self) -> Result<Tokenizer, SproutError> {
        Tokenizer::from_gguf(self.metadata())
    }
}

impl<R: Read + Seek> WeightSource for GgufModel<R> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
        if !self.has(name) {
            return Err(names::missing(name, "the GGUF model"));
        }
        let parsed = TensorName::parse(name).expect("has() parsed it");
        self.file.read_tensor(&gguf_name(parsed))
    }

    fn has(&self, name: &str) -> bool {
        TensorName::parse(name)
            .is_some_and(|n| n.exists_in(&self.config) && self.file.tensor(&gguf_name(n)).is_some())
    }

    fn unused_tensor(&self, used: &[String]) -> Option<String> {
        let mut used: std::collections::HashSet<String> = used
            .iter()
            .filter_map(|n| TensorName::parse(n).map(gguf_name))
            .collect();
        // Read with the config, not as a weight.
        used.insert(ROPE_FREQS.to_string());
        let stored = self.file.tensors().iter().map(|t| &t.name);
        stored.filter(|n| !used.contains(*n)).min().cloned()
    }

    fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
        match TensorName::parse(name).filter(|_| self.has(name)) {
            Some(n) => self
                .file
                .tensor(&gguf_name(n))
                .expect("has() found it")
                .format(),
            None => Err(names::missing(name, "the GGUF model")),
        }
    }
}

/// llama.cpp's name for a canonical tensor.
pub fn gguf_name(name: TensorName) -> String {
    match name {
        TensorName::Embed => "token_embd.weight".into(),
        TensorName::FinalNorm => "output_norm.weight".into(),
        TensorName::LmHead => "output.weight".into(),
        TensorName::Layer(i, t) => {
            let suffix = match t {
                LayerTensor::AttnNorm => "attn_norm.weight",
                LayerTensor::Q => "attn_q.weight",
                LayerTensor::K => "attn_k.weight",
                LayerTensor::V => "attn_v.weight",
                LayerTensor::QBias => "attn_q.bias",
                LayerTensor::KBias => "attn_k.bias",
                LayerTensor::VBias => "attn_v.bias",
                LayerTensor::QNorm => "attn_q_norm.weight",
                LayerTensor::KNorm => "attn_k_norm.weight",
                LayerTensor::O => "attn_output.weight",
                LayerTensor::MlpNorm => "ffn_norm.weight",
                LayerTensor::Gate => "ffn_gate.weight",
                LayerTensor::Up => "ffn_up.weight",
                LayerTensor::Down => "ffn_down.weight",
                LayerTensor::PostAttnNorm => "post_attention_norm.weight",
                LayerTensor::PostMlpNorm => "post_ffw_norm.weight",
            };
            format!("blk.{i}.{suffix}")
        }
    }
}

/// The model's config from GGUF metadata (and the embedding's shape for the vocabulary),
/// but for the RoPE divisors of `rope_freqs.weight`, which [`GgufModel::from_file`] reads
/// (it holds the reader).
fn config_from_gguf<R>(file: &GgufFile<R>) -> Result<ModelConfig, SproutError> {
    let meta = file.metadata();
    let arch = meta
        .str("general.architecture")?
        .ok_or_else(|| SproutError::Model("GGUF metadata has no general.architecture".into()))?;
    let (architecture, rope_layout) = match arch {
        "llama" => (Architecture::Llama, RopeLayout::Interleaved),
        "qwen2" => (Architecture::Qwen2, RopeLayout::HalfSplit),
        "qwen3" => (Architecture::Qwen3, RopeLayout::HalfSplit),
        "gemma3" => (Architecture::Gemma3, RopeLayout::HalfSplit),
        other => {
            return Err(SproutError::Model(format!(
                "GGUF architecture `{other}` is not supported by sprout (supported: llama, \
                 qwen2, qwen3, gemma3)"
            )));
        }
    };
    let key = |k: &str| format!("{arch}.{k}");
    let usize_of = |k: &str| -> Result<usize, SproutError> {
        let v = meta.require_u64(&key(k))?;
        match usize::try_from(v) {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(SproutError::Model(format!(
                "GGUF metadata `{}` is {v}",
                key(k)
            ))),
        }
    };
    let n_layers = usize_of("block_count")?;
    names::check_layer_count(&key("block_count"), n_layers, |n| {
        file.tensor(&gguf_name(n)).is_some()
    })?;
    let hidden_size = usize_of("embedding_length")?;
    let n_heads = usize_of("attention.head_count")?;
    let n_kv_heads = match meta.u64(&key("attention.head_count_kv"))? {
        None => n_heads,
        Some(_) => usize_of("attention.head_count_kv")?,
    };
    if !n_heads.is_multiple_of(n_kv_heads) {
        return Err(SproutError::Model(format!(
            "{n_heads} attention heads cannot share {n_kv_heads} kv heads evenly"
        )));
    }
    let head_dim = match meta.u64(&key("attention.key_length"))? {
        Some(_) => usize_of("attention.key_length")?,
        None if hidden_size.is_multiple_of(n_heads) => hidden_size / n_heads,
        None => {
            return Err(SproutError::Model(format!(
                "embedding_length {hidden_size} is not a multiple of head_count {n_heads}"
            )));
        }
    };
    if let Some(v) = meta.u64(&key("attention.value_length"))?
        && v != head_dim as u64
    {
        return Err(SproutError::Model(format!(
            "value_length {v} differs from key_length {head_dim}: sprout needs them equal"
        )));
    }
    if let Some(rot) = meta.u64(&key("rope.dimension_count"))?
        && rot != head_dim as u64
    {
        return Err(SproutError::Model(format!(
            "rope.dimension_count {rot} differs from the head size {head_dim}: partial \
             rotary embeddings are not supported"
        )));
    }
    if let Some(scaling) = meta.str(&key("rope.scaling.type"))?
        && scaling != "none"
    {
        return Err(SproutError::Model(format!(
            "`{}` is `{scaling}`: rope scaling `{scaling}` is not supported",
            key("rope.scaling.type")
        )));
    }
    if let Some(scale) = meta.f64(&key("rope.scale_linear"))?
        && scale != 1.0
    {
        return Err(SproutError::Model(format!(
            "`{}` is {scale}: linear rope scaling is not supported",
            key("rope.scale_linear")
        )));
    }
    let embed = file.tensor("token_embd.weight").ok_or_else(|| {
        SproutError::Model("the GGUF file has no tensor token_embd.weight".into())
    })?;
    let vocab_size = embed.shape()?.0;
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    if let Some(tokens) = &tokens
        && tokens.len() > vocab_size
    {
        return Err(SproutError::Model(format!(
            "the vocabulary has {} tokens but token_embd.weight only {vocab_size} rows",
            tokens.len()
        )));
    }
    let token_id = |k: &str| -> Result<Option<u32>, SproutError> {
        match meta.u64(k)? {
            Some(id) if id < vocab_size as u64 => Ok(Some(id as u32)),
            Some(id) => Err(SproutError::Model(format!(
                "`{k}` is {id}, outside the vocabulary of {vocab_size}"
            ))),
            None => Ok(None),
        }
    };
    let eos = token_id("tokenizer.ggml.eos_token_id")?;
    let mut others: Vec<u32> = Vec::new();
    for k in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        others.extend(token_id(k)?);
    }
    if let Some(tokens) = &tokens {
        let types = meta.integers("tokenizer.ggml.token_type")?;
        for (id, tok) in tokens.iter().enumerate() {
            let special = types.as_ref().is_none_or(|t| {
                matches!(
                    t.get(id),
                    Some(&TOKEN_TYPE_CONTROL | &TOKEN_TYPE_USER_DEFINED)
                )
            });
            if special && END_OF_TURN_TOKENS.contains(tok) {
                others.push(id as u32);
            }
        }
    }
    others.sort_unstable();
    let mut eos_token_ids: Vec<u32> = eos.into_iter().collect();
    for id in others {
        if !eos_token_ids.contains(&id) {
            eos_token_ids.push(id);
        }
    }
    let mut config = ModelConfig {
        architecture,
        vocab_size,
        hidden_size,
        intermediate_size: usize_of("feed_forward_length")?,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        rms_norm_eps: meta
            .f64(&key("attention.layer_norm_rms_epsilon"))?
            .ok_or_else(|| {
                SproutError::Model(format!(
                    "GGUF metadata has no `{}`",
                    key("attention.layer_norm_rms_epsilon")
                ))
            })? as f32,
        rope_theta: meta.f64(&key("rope.freq_base"))?.unwrap_or(10000.0),
        rope_scaling: None,
        rope_layout,
        max_positions: usize_of("context_length")?,
        tied_embeddings: file.tensor("output.weight").is_none(),
        bos_token_id: token_id("tokenizer.ggml.bos_token_id")?,
        eos_token_ids,
        layers_without_rope: Vec::new(),
        sliding_window: None,
        query_pre_attn_scalar: None,
    };
    if architecture == Architecture::Gemma3 {
        let (window, scalar) = gemma3::from_gguf(meta, &config).map_err(SproutError::Model)?;
        config.sliding_window = Some(window);
        config.query_pre_attn_scalar = Some(scalar);
    }
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::formats::gguf::{GgmlType, GgufValue};

    fn open(w: &GgufWriter) -> Result<GgufModel<Cursor<Vec<u8>>>, SproutError> {
        GgufModel::from_reader(Cursor::new(w.to_bytes()))
    }

    fn open_err(w: &GgufWriter) -> String {
        match open(w) {
            Ok(_) => panic!("a bad model opened"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_tiny_llama_opens_with_its_config() {
        let mut m = open(&GgufWriter::tiny_model("llama")).unwrap();
        let c = m.config().clone();
        assert_eq!(c.architecture, Architecture::Llama);
        assert_eq!(c.rope_layout, RopeLayout::Interleaved);
        assert_eq!(
            (c.vocab_size, c.hidden_size, c.intermediate_size, c.n_layers),
            (8, 64, 96, 2)
        );
        assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (2, 1, 32));
        assert_eq!((c.rope_theta, c.max_positions), (1e6, 256));
        assert!(!c.tied_embeddings);
        assert_eq!(c.bos_token_id, Some(1));
        assert_eq!(c.eos_token_ids, vec![2, 0]);
        for name in TensorName::all(&c) {
            let t = m.read(&name.to_string()).unwrap();
            assert_eq!((t.rows, t.cols), name.shape(&c), "{name}");
            t.to_f32().unwrap();
        }
        assert_eq!(m.read("layers.1.down").unwrap().format, WeightFormat::Q4_1);
        assert!(!m.has("layers.0.q_bias") && !m.has("layers.2.q") && !m.has("bogus"));
        let err = m.read("layers.0.q_bias").err().unwrap().to_string();
        assert!(err.contains("layers.0.q_bias"), "{err}");
    }

    #[test]
    fn qwen2_has_biases_and_half_split_rope() {
        let m = open(&GgufWriter::tiny_model("qwen2")).unwrap();
        assert_eq!(m.config().rope_layout, RopeLayout::HalfSplit);
        assert!(m.has("layers.1.v_bias"));
        let err = open_err(&GgufWriter::tiny_model("qwen2").without_tensor("blk.1.attn_k.bias"));
        assert!(
            err.contains("blk.1.attn_k.bias") && err.contains("layers.1.k_bias"),
            "{err}"
        );
    }

    #[test]
    fn qwen3_has_head_norms_and_wide_q() {
        let mut m = open(&GgufWriter::tiny_model("qwen3")).unwrap();
        let c = m.config().clone();
        assert_eq!(c.architecture, Architecture::Qwen3);
        assert_eq!(c.rope_layout, RopeLayout::HalfSplit);
        assert_eq!((c.hidden_size, c.head_dim, c.q_dim()), (64, 64, 128));
        assert!(m.has("layers.1.q_norm") && m.has("layers.0.k_norm"));
        assert!(!m.has("layers.0.q_bias"));
        assert_eq!(m.read("layers.0.o").unwrap().cols, 128);
        assert_eq!(m.read("layers.1.k_norm").unwrap().cols, 64);
        let err =
            open_err(&GgufWriter::tiny_model("qwen3").without_tensor("blk.0.attn_q_norm.weight"));
        assert!(
            err.contains("blk.0.attn_q_norm.weight") && err.contains("layers.0.q_norm"),
            "{err}"
        );
    }

    #[test]
    fn rope_freqs_divide_the_frequencies_as_llama3_would() {
        let m = open(&GgufWriter::tiny_llama3()).unwrap();
        let c = m.config().clone();
        assert!(matches!(
            c.rope_scaling,
            Some(RopeScaling::GgufRopeFreqs { .. })
        ));
        // The divisors the writer made are the llama3 formula's, rounded to f32.
        let formula = ModelConfig {
            rope_scaling: Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64.0,
            }),
            ..c.clone()
        };
        let (got, want) = (c.rope_frequencies(), formula.rope_frequencies());
        let unscaled = ModelConfig {
            rope_scaling: None,
            ..c.clone()
        }
        .rope_frequencies();
        let mut bands = [0; 3];
        for i in 0..got.len() {
            assert!((got[i] - want[i]).abs() <= 1e-7 * want[i], "pair {i}");
            let ratio = unscaled[i] / got[i];
            bands[if ratio == 1.0 {
                0
            } else if ratio == 8.0 {
                1
            } else {
                2
            }] += 1;
        }
        assert!(bands.iter().all(|&n| n > 0), "{bands:?}");
        // Read with the config: not a tensor an update would have no place for.
        assert_eq!(
            m.unused_tensor(
                &TensorName::all(&c)
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
            ),
            None
        );
        let short =
            GgufWriter::tiny_llama3().tensor("rope_freqs.weight", &[3], GgmlType(0), vec![0; 12]);
        let err = open_err(&short);
        assert!(
            err.contains("rope_freqs.weight is 1 x 3") && err.contains("16 pairs"),
            "{err}"
        );
        let zero =
            GgufWriter::tiny_llama3().tensor("rope_freqs.weight", &[16], GgmlType(0), vec![0; 64]);
        let err = open_err(&zero);
        assert!(err.contains("rope_freqs.weight value 0 is 0"), "{err}");
    }

    #[test]
    fn no_output_weight_means_tied() {
        let m = open(&GgufWriter::tiny_model("llama").without_tensor("output.weight")).unwrap();
        assert!(m.config().tied_embeddings);
        assert!(!m.has("lm_head"));
    }

    #[test]
    fn bad_models_are_named() {
        let tiny = GgufWriter::tiny_model;
        let err = open_err(&tiny("gpt2"));
        assert!(
            err.contains("architecture `gpt2` is not supported"),
            "{err}"
        );
        let err = open_err(&tiny("llama").without_tensor("blk.0.ffn_up.weight"));
        assert!(err.contains("blk.0.ffn_up.weight"), "{err}");
        let err = open_err(&tiny("llama").without_metadata("llama.block_count"));
        assert!(err.contains("llama.block_count"), "{err}");
        let err =
            open_err(&tiny("llama").metadata("llama.feed_forward_length", GgufValue::U32(64)));
        assert!(
            err.contains("blk.0.ffn_gate.weight") && err.contains("64 x 64"),
            "{err}"
        );
        let err =
            open_err(&tiny("llama").metadata("llama.rope.dimension_count", GgufValue::U32(16)));
        assert!(err.contains("partial rotary"), "{err}");
        let yarn = GgufValue::String("yarn".into());
        let err = open_err(&tiny("llama").metadata("llama.rope.scaling.type", yarn));
        assert!(
            err.contains("llama.rope.scaling.type") && err.contains("`yarn`"),
            "{err}"
        );
        let err = open_err(&tiny("llama").metadata("llama.rope.scale_linear", GgufValue::F32(2.0)));
        assert!(
            err.contains("llama.rope.scale_linear") && err.contains("is 2"),
            "{err}"
        );
        let q3k = tiny("llama").tensor(
            "blk.1.ffn_down.weight",
            &[256, 64],
            GgmlType(11),
            vec![0; 64 * 110],
        );
        let err = open_err(&q3k);
        assert!(err.contains("blk.1.ffn_down.weight has type Q3_K"), "{err}");
    }
}
