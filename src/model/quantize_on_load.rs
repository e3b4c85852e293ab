//! Quantizing on load (`--quantize f16|bf16|q8_0|q4_0|q4_1`): a [`WeightSource`] that
//! hands out another source's float matrices (the embedding, every projection, the head)
//! in a 16-bit float or a GGUF block format, converted on the CPU as each is read, so that
//! the matmul kernels then run on the same layouts as for a file stored that way (every
//! matmul kernel reads f16, bf16 and the block formats; see `shaders/weight_formats`).
//! Norms and biases are handed out as they are stored (the kernels take them in f32).
//!
//! Rounding: f16 and bf16 round each value to nearest, ties to even (`half`'s
//! conversions, as PyTorch's `.to(torch.float16 / torch.bfloat16)` rounds), so an f16 or
//! bf16 copy of an f32 model holds what a trainer's half-precision copy would. The block
//! formats round as ggml's reference quantizers do ([`crate::formats::quantize`]): Q8_0
//! `d = amax / 127`, `q = round(x / d)`; Q4_0 `d = max / -8` with `max` the value of largest
//! magnitude, signed; Q4_1 `d = (max - min) / 15`, `m = min`. Dequantizing a block that
//! ggml's quantizer wrote and quantizing it again gives the same block bit for bit, with
//! the exceptions stated and tested in `tests/requantize.rs`.
//!
//! Invariants: [`QuantizeOnLoad::new`] refuses, before anything is read, a target that is
//! not one of [`QUANTIZE_FORMATS`] (f32 is the stored values, not a conversion), a
//! source any of whose matrices is already quantized (a
//! quantized GGUF: quantizing it again would round its values a second time), and a model
//! whose matrices' rows are not whole blocks of 32, each with an error naming the tensor;
//! so every `read` of a source that opened succeeds as the inner source's would.

use crate::error::SproutError;
use crate::formats::{TensorData, WeightFormat, quantize};
use crate::model::config::ModelConfig;
use crate::model::names::TensorName;
use crate::model::source::WeightSource;

/// The formats weights can be converted to on load: the 16-bit floats and the 32-value
/// block formats that round as ggml does. Q5_0, Q5_1 and the K-quants are read from files,
/// never made here (sprout's K-quant encoder is for test weights, not ggml's rounding).
pub const QUANTIZE_FORMATS: [WeightFormat; 5] = [
    WeightFormat::F16,
    WeightFormat::Bf16,
    WeightFormat::Q8_0,
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
];

/// The names of [`QUANTIZE_FORMATS`], comma-separated (for messages).
pub fn quantize_format_names() -> String {
    let names: Vec<&str> = QUANTIZE_FORMATS.iter().map(|f| f.name()).collect();
    names.join(", ")
}

/// A source whose float matrices are quantized to one format as they are read.
pub struct QuantizeOnLoad {
    inner: Box<dyn WeightSource>,
    format: WeightFormat,
}

impl QuantizeOnLoad {
    /// `inner`'s matrices, converted to `format` (one of [`QUANTIZE_FORMATS`]) on read.
    pub fn new(inner: Box<dyn WeightSource>, format: WeightFormat) -> Result<Self, SproutError> {
        let context = format!("quantizing to {format} on load");
        if !QUANTIZE_FORMATS.contains(&format) {
            return Err(SproutError::Model(format!(
                "{context}: {format} is not a format weights are converted to on load (use \
                 one of {})",
                quantize_format_names()
            )));
        }
        let config = inner.config();
        for name in TensorName::all(config)
            .into_iter()
            .filter(|n| !n.is_vector())
        {
            let stored = inner.format(&name.to_string())?;
            if stored.is_quantized() {
                return Err(SproutError::Model(format!(
                    "{context}: tensor {name} is already stored as {stored}. Only float \
                     weights (f32, f16, bf16: a Hugging Face directory, or a float GGUF) are \
                     quantized on load; quantizing {stored} blocks again would round their \
                     values a second time. Load this file without quantizing it"
                )));
            }
        }
        TensorName::check_storable(config, format)
            .map_err(|e| SproutError::Model(format!("{context}: {e}")))?;
        Ok(QuantizeOnLoad { inner, format })
    }
}

impl WeightSource for QuantizeOnLoad {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
        let t = self.inner.read(name)?;
        if TensorName::parse(name).is_none_or(|n| n.is_vector()) {
            return Ok(t);
        }
        let values = t.to_f32()?;
        Ok(TensorData {
            format: self.format,
            rows: t.rows,
            cols: t.cols,
            bytes: quantize(self.format, &values, t.cols)?,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.inner.has(name)
    }

    fn unused_tensor(&self, used: &[String]) -> Option<String> {
        self.inner.unused_tensor(used)
    }

    fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
        let stored = self.inner.format(name)?;
        Ok(
            match TensorName::parse(name).is_some_and(|n| !n.is_vector()) {
                true => self.format,
                false => stored,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::path::Path;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::model::dummy::{DummyWeights, builtin_config};
    use crate::model::gguf_model::GgufModel;
    use crate::model::safetensors_dir::SafetensorsDir;

    fn tiny(name: &str) -> Box<dyn WeightSource> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        Box::new(SafetensorsDir::open(dir).unwrap())
    }

    #[test]
    fn matrices_come_quantized_and_vectors_as_stored() {
        for format in QUANTIZE_FORMATS {
            let mut plain = tiny("tiny-qwen2");
            let mut q = QuantizeOnLoad::new(tiny("tiny-qwen2"), format).unwrap();
            for name in TensorName::all(&plain.config().clone()) {
                let n = name.to_string();
                let (want, got) = (plain.read(&n).unwrap(), q.read(&n).unwrap());
                assert_eq!((got.rows, got.cols), (want.rows, want.cols), "{n}");
                assert_eq!(got.format, q.format(&n).unwrap(), "{n}");
                match name.is_vector() {
                    true => assert_eq!((got.format, &got.bytes), (want.format, &want.bytes)),
                    false => {
                        let values = want.to_f32().unwrap();
                        let bytes = quantize(format, &values, want.cols).unwrap();
                        assert_eq!((got.format, &got.bytes), (format, &bytes), "{n}");
                    }
                }
            }
        }
    }

    fn error(inner: Box<dyn WeightSource>, format: WeightFormat) -> String {
        match QuantizeOnLoad::new(inner, format) {
            Ok(_) => panic!("quantizing on load was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn quantized_sources_float_targets_and_partial_blocks_are_refused() {
        // The tiny GGUF stores q, k, v and o as Q8_0 (and its embedding as F16).
        let gguf = || {
            let bytes = GgufWriter::tiny_model("llama").to_bytes();
            Box::new(GgufModel::from_reader(Cursor::new(bytes)).unwrap())
        };
        let e = error(gguf(), WeightFormat::Q4_1);
        assert!(
            e.contains("tensor layers.0.q is already stored as q8_0") && e.contains("q4_1"),
            "{e}"
        );
        // f32, and the formats sprout reads but does not make (Q5_0, Q5_1 and the
        // K-quants).
        for format in [
            WeightFormat::F32,
            WeightFormat::Q5_0,
            WeightFormat::Q5_1,
            WeightFormat::Q4_K,
            WeightFormat::Q5_K,
            WeightFormat::Q6_K,
        ] {
            let e = error(tiny("tiny-llama"), format);
            assert!(
                e.contains(&format!(
                    "{format} is not a format weights are converted to on load"
                )) && e.contains("(use one of f16, bf16, q8_0, q4_0, q4_1)"),
                "{e}"
            );
        }
        let mut config = builtin_config("tiny-llama").unwrap();
        config.intermediate_size = 40;
        let f32_weights = DummyWeights::new(config, WeightFormat::F32, 0).unwrap();
        let e = error(Box::new(f32_weights), WeightFormat::Q8_0);
        assert!(
            e.contains("tensor layers.0.down is 64 x 40") && e.contains("blocks of 32"),
            "{e}"
        );
    }
}
