//! A model's tensors as a Hugging Face directory stores them: Hugging Face's names and
//! shapes, q and k rows in the half-split RoPE order, every value in one float format; and
//! `model.safetensors` written from them one tensor at a time.
//!
//! Invariants: the values are the ones sprout computes with. Each tensor is decoded by
//! [`crate::formats::dequantize`], the reference of the GPU's own dequantizers, so an f32
//! export holds exactly the values a quantized model's kernels multiply by; bf16 rounds
//! each to nearest even (a tensor already in the chosen format is copied as it is).
//! A source whose q and k rows are in RoPE's adjacent-pair order (a llama.cpp GGUF of a
//! Llama, `RopeLayout::Interleaved`) gets them, and any q and k biases, put back in
//! Hugging Face's half-split order by the exact inverse of that converter's permutation
//! (`fused_weights::adjacent_to_half_split`): loading the export gives the decoder the
//! same rows in the same order as loading the source. `lm_head` is written only when the
//! embeddings are untied, as transformers saves a tied model. Gemma's norms are written as
//! its files hold them, `w` = multiplier - 1 (`model::gemma3`: exact for the multiplier,
//! within 6e-8 of the `w` it was read from).

use std::collections::HashMap;
use std::io::Write;

use crate::error::SproutError;
use crate::formats::safetensors_writer::{SafetensorsWriter, TensorEntry};
use crate::formats::{TensorData, WeightFormat, quantize};
use crate::gpu::kernels::rope::RopeLayout;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::fused_weights::{adjacent_to_half_split, permute_head_rows, permute_head_values};
use crate::model::gemma3;
use crate::model::names::{LayerTensor, TensorName};
use crate::model::safetensors_dir::hf_name;
use crate::model::source::WeightSource;

/// The float formats an export can be written in: f32 holds every value of every format
/// sprout reads exactly; bf16 halves the size.
pub const EXPORT_FORMATS: [WeightFormat; 2] = [WeightFormat::F32, WeightFormat::Bf16];

/// One tensor of the export: its canonical name, Hugging Face's name, and shape (vectors
/// one-dimensional, matrices `[rows, cols]`, as PyTorch's parameters are).
pub struct HfTensor {
    pub name: TensorName,
    pub hf_name: String,
    pub shape: Vec<usize>,
}

/// Every tensor of a model with `config`, in sprout's file order (embedding, layers, final
/// norm, then `lm_head` when untied).
pub fn hf_tensors(config: &ModelConfig) -> Vec<HfTensor> {
    TensorName::all(config)
        .into_iter()
        .map(|name| {
            let (rows, cols) = name.shape(config);
            HfTensor {
                name,
                hf_name: hf_name(name, config.architecture),
                shape: match name.is_vector() {
                    true => vec![cols],
                    false => vec![rows, cols],
                },
            }
        })
        .collect()
}

/// An error unless `format` is one an export can be written in.
pub fn check_export_format(format: WeightFormat) -> Result<(), SproutError> {
    match EXPORT_FORMATS.contains(&format) {
        true => Ok(()),
        false => Err(SproutError::Model(format!(
            "cannot export weights as {format}: an export holds f32 or bf16"
        ))),
    }
}

/// Whether `name` is a q or k tensor, whose rows (or values, biases and Qwen3's per-head
/// norm weights) RoPE pairs.
fn is_rope_paired(name: TensorName) -> bool {
    matches!(
        name,
        TensorName::Layer(
            _,
            LayerTensor::Q
                | LayerTensor::K
                | LayerTensor::QBias
                | LayerTensor::KBias
                | LayerTensor::QNorm
                | LayerTensor::KNorm
        )
    )
}

/// The bytes of tensor `name` of `source` as the export stores it, in `format`.
pub fn hf_tensor_bytes(
    source: &mut dyn WeightSource,
    name: TensorName,
    format: WeightFormat,
) -> Result<Vec<u8>, SproutError> {
    check_export_format(format)?;
    let config = source.config();
    let head_dim = config.head_dim;
    let unpermute = config.rope_layout == RopeLayout::Interleaved && is_rope_paired(name);
    // Gemma's norm weights are read as the multiplier 1 + w; its files store w.
    let gemma_norm = config.architecture == Architecture::Gemma3 && name.is_norm();
    let mut t: TensorData = source.read(&name.to_string())?;
    let order = adjacent_to_half_split(head_dim);
    if unpermute && !name.is_vector() {
        // Whole rows move, in their stored format: nothing is rounded.
        permute_head_rows(&mut t, head_dim, &order);
    }
    if t.format == format && !(unpermute && name.is_vector()) && !gemma_norm {
        return Ok(t.bytes);
    }
    let mut values = t.to_f32()?;
    if unpermute && name.is_vector() {
        permute_head_values(&mut values, head_dim, &order);
    }
    if gemma_norm {
        for v in &mut values {
            *v -= gemma3::HF_NORM_OFFSET;
        }
    }
    Ok(quantize(format, &values, t.cols)?)
}

/// Writes `model.safetensors` of every tensor of `source` in `format` to `out`, one tensor
/// at a time; `progress(done, total)` is called after each. Hands `out` back, flushed.
pub fn write_safetensors<W: Write>(
    source: &mut dyn WeightSource,
    format: WeightFormat,
    out: W,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<W, SproutError> {
    check_export_format(format)?;
    let tensors = hf_tensors(source.config());
    let entries: Vec<TensorEntry> = tensors
        .iter()
        .map(|t| TensorEntry {
            name: t.hf_name.clone(),
            format,
            shape: t.shape.clone(),
        })
        .collect();
    // transformers loads only files that say they hold PyTorch tensors.
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let mut writer = SafetensorsWriter::new(out, &entries, metadata)?;
    for (done, t) in tensors.iter().enumerate() {
        let bytes = hf_tensor_bytes(source, t.name, format)?;
        writer.write(&t.hf_name, &bytes)?;
        progress(done + 1, tensors.len());
    }
    writer.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::model::export::json_files::{config_json, generation_config_json};
    use crate::model::fused_weights::half_split_to_adjacent;
    use crate::model::gguf_model::GgufModel;
    use crate::model::safetensors_dir::SafetensorsDir;

    type InMemory = Cursor<Vec<u8>>;

    /// The tiny GGUF of `architecture` (every format sprout reads), and its export in
    /// `format` read back as a Hugging Face directory.
    fn round_trip(
        architecture: &str,
        format: WeightFormat,
    ) -> (GgufModel<InMemory>, SafetensorsDir<InMemory>) {
        let gguf = || {
            let bytes = GgufWriter::tiny_model(architecture).to_bytes();
            GgufModel::from_reader(Cursor::new(bytes)).unwrap()
        };
        let mut source = gguf();
        let file = write_safetensors(&mut source, format, Vec::new(), &mut |_, _| {}).unwrap();
        let config = config_json(source.config(), format).unwrap().to_string();
        let generation = generation_config_json(source.config()).to_string();
        let shards = vec![("model.safetensors".to_string(), Cursor::new(file))];
        let export = SafetensorsDir::from_readers(&config, Some(&generation), shards).unwrap();
        (gguf(), export)
    }

    #[test]
    fn the_decoder_gets_the_sources_rows_back_exactly() {
        for architecture in ["llama", "qwen2", "qwen3"] {
            let (mut gguf, mut export) = round_trip(architecture, WeightFormat::F32);
            let config = gguf.config().clone();
            assert_eq!(export.config().rope_layout, RopeLayout::HalfSplit);
            let order = half_split_to_adjacent(config.head_dim);
            for name in TensorName::all(&config) {
                let n = name.to_string();
                let want = gguf.read(&n).unwrap().to_f32().unwrap();
                let got = export.read(&n).unwrap();
                assert_eq!(got.format, WeightFormat::F32, "{n}");
                let mut got_values = got.to_f32().unwrap();
                // What the decoder does to a half-split model's q and k at load.
                if config.rope_layout == RopeLayout::Interleaved && is_rope_paired(name) {
                    let mut rows = got;
                    permute_head_rows(&mut rows, config.head_dim, &order);
                    got_values = rows.to_f32().unwrap();
                }
                let same = want
                    .iter()
                    .zip(&got_values)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same && want.len() == got_values.len(),
                    "{architecture}: {n}"
                );
            }
        }
    }

    #[test]
    fn interleaved_q_rows_go_back_to_half_split() {
        let (mut gguf, mut export) = round_trip("llama", WeightFormat::F32);
        let c = gguf.config().clone();
        let (hd, cols) = (c.head_dim, c.hidden_size);
        let stored = gguf.read("layers.1.q").unwrap().to_f32().unwrap();
        let exported = export.read("layers.1.q").unwrap().to_f32().unwrap();
        let row = |v: &[f32], r: usize| v[r * cols..(r + 1) * cols].to_vec();
        for head in 0..c.n_heads {
            for i in 0..hd / 2 {
                // llama.cpp's converter stored Hugging Face's rows i and i + hd/2 as 2i, 2i+1.
                let base = head * hd;
                assert_eq!(row(&exported, base + i), row(&stored, base + 2 * i));
                assert_eq!(
                    row(&exported, base + hd / 2 + i),
                    row(&stored, base + 2 * i + 1)
                );
            }
        }
    }

    #[test]
    fn k_quants_and_five_bit_formats_export_to_f32_exactly() {
        use crate::model::dummy::{DummyWeights, builtin_config};
        // tiny-llama widened to rows of whole 256-value super-blocks (4 heads of 64).
        let config = ModelConfig {
            hidden_size: 256,
            head_dim: 64,
            intermediate_size: 512,
            ..builtin_config("tiny-llama").unwrap()
        };
        for format in [
            WeightFormat::Q5_0,
            WeightFormat::Q5_1,
            WeightFormat::Q4_K,
            WeightFormat::Q5_K,
            WeightFormat::Q6_K,
        ] {
            let mut source = DummyWeights::new(config.clone(), format, 3).unwrap();
            let file =
                write_safetensors(&mut source, WeightFormat::F32, Vec::new(), &mut |_, _| {})
                    .unwrap();
            let shards = vec![("model.safetensors".to_string(), Cursor::new(file))];
            let json = config_json(&config, WeightFormat::F32).unwrap().to_string();
            let mut export = SafetensorsDir::from_readers(&json, None, shards).unwrap();
            for name in TensorName::all(&config) {
                let n = name.to_string();
                let stored = source.read(&n).unwrap();
                let want = stored.to_f32().unwrap();
                let got = export.read(&n).unwrap();
                assert_eq!(got.format, WeightFormat::F32, "{format} {n}");
                let got = got.to_f32().unwrap();
                assert!(
                    want.len() == got.len()
                        && want
                            .iter()
                            .zip(&got)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{format} {n} (stored as {})",
                    stored.format
                );
            }
        }
    }

    #[test]
    fn bf16_rounds_each_value_and_quantized_targets_are_refused() {
        let (mut gguf, mut export) = round_trip("qwen2", WeightFormat::Bf16);
        for name in ["embed", "layers.0.q_bias", "layers.1.down", "lm_head"] {
            let want: Vec<f32> = gguf.read(name).unwrap().to_f32().unwrap();
            let got = export.read(name).unwrap();
            assert_eq!(got.format, WeightFormat::Bf16);
            let rounded: Vec<f32> = want
                .iter()
                .map(|&v| half::bf16::from_f32(v).to_f32())
                .collect();
            assert_eq!(got.to_f32().unwrap(), rounded, "{name}");
        }
        let e = write_safetensors(&mut gguf, WeightFormat::Q8_0, Vec::new(), &mut |_, _| {})
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot export weights as q8_0"), "{e}");
    }
}
