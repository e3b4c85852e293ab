//! Random weights drawn from a model config (vLLM's `--load-format dummy`): a
//! [`WeightSource`] for measuring sprout on a machine that has no model file.
//!
//! Every canonical tensor has its config's shape. Matrices are stored in the chosen
//! [`WeightFormat`] (quantized as ggml does, from f32 values uniform in ±1/sqrt(cols), so
//! that activations keep their scale through every layer); norm vectors are f32 near 1.0
//! and biases small f32 values. A tensor's values depend only on (seed, its name, its
//! shape), drawn from a splitmix64 stream, so a (config, format, seed) gives the same bytes
//! on every machine and in any reading order. `read` makes one tensor at a time, a chunk
//! of rows at a time: the whole model is never in memory.
//!
//! The quantized formats store rows in blocks of 32 values (the K-quants in super-blocks of
//! 256), so every matrix's `cols` (hidden size, q dim, intermediate size) must be a
//! multiple of the block; [`DummyWeights::new`] names the first tensor that is not. (No
//! built-in config's hidden size is a multiple of 256: the K-quants take a config that
//! is, such as a `config.json`'s.)
//!
//! [`builtin_config`] gives the configs of a few published models by name (their real
//! shapes; RoPE half-split, as a Hugging Face directory stores them) and two tiny ones for
//! tests and smoke runs. A Hugging Face `config.json` is read in native code
//! (`model::open::dummy_config`).

use crate::error::SproutError;
use crate::formats::TensorData;
use crate::formats::{WeightFormat, quantize};
use crate::gpu::kernels::rope::RopeLayout;
use crate::model::config::{Architecture, ModelConfig, SlidingWindow};
use crate::model::gemma3;
use crate::model::names::{self, TensorName};
use crate::model::source::WeightSource;
use crate::rng::SplitMix64;

/// The names [`builtin_config`] knows.
pub const BUILTIN_CONFIGS: [&str; 10] = [
    "smollm2-135m",
    "smollm2-360m",
    "qwen2-0.5b",
    "qwen3-0.6b",
    "gemma3-270m",
    "gemma3-1b",
    "tiny-llama",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-gemma3",
];

/// The most layers dummy weights are drawn for: several times the deepest published
/// decoder. A file's layer count is bounded by the tensors it holds; a config alone is not.
pub const MAX_LAYERS: usize = 1024;

/// The most bytes one dummy tensor may take (a 128k x 8k f32 embedding is 4 GiB).
pub const MAX_TENSOR_BYTES: u64 = 1 << 34;

/// The config dummy weights are drawn for when none is named.
pub const DEFAULT_DUMMY_MODEL: &str = "smollm2-135m";

/// The config of a built-in model by name (see [`BUILTIN_CONFIGS`]):
/// - `smollm2-135m`, `smollm2-360m`: SmolLM2-135M/360M-Instruct (Llama, tied embeddings).
/// - `qwen2-0.5b`: Qwen2-0.5B (q, k and v biases, tied embeddings).
/// - `qwen3-0.6b`: Qwen3-0.6B (q and k head norms, heads of 128 wider than hidden, tied).
/// - `gemma3-270m`, `gemma3-1b`: Gemma 3 270M and 1B (sliding windows of 512 on five
///   layers in six, heads of 256, a vocabulary of 262,144, tied).
/// - `tiny-llama`, `tiny-qwen2`, `tiny-qwen3`, `tiny-gemma3`: 2 layers, hidden 64,
///   vocabulary 512 (fast anywhere; tiny-qwen3's 4 heads of 32 make q twice as wide as
///   hidden; tiny-gemma3's first layer slides over a window of 8).
pub fn builtin_config(name: &str) -> Result<ModelConfig, SproutError> {
    let llama = |hidden, inter, layers, heads, kv_heads, vocab, positions| ModelConfig {
        architecture: Architecture::Llama,
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: inter,
        n_layers: layers,
        n_heads: heads,
        n_kv_heads: kv_heads,
        head_dim: hidden / heads,
        rms_norm_eps: 1e-5,
        rope_theta: 100000.0,
        rope_scaling: None,
        rope_layout: RopeLayout::HalfSplit,
        max_positions: positions,
        tied_embeddings: true,
        bos_token_id: Some(1),
        eos_token_ids: vec![2],
        layers_without_rope: Vec::new(),
        sliding_window: None,
        query_pre_attn_scalar: None,
    };
    let qwen2 = |hidden, inter, layers, heads, kv_heads, vocab, positions, eos| ModelConfig {
        architecture: Architecture::Qwen2,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        bos_token_id: Some(eos),
        eos_token_ids: vec![eos],
        ..llama(hidden, inter, layers, heads, kv_heads, vocab, positions)
    };
    let qwen3 = |hidden, inter, layers, heads, kv_heads, head_dim, vocab, positions| ModelConfig {
        architecture: Architecture::Qwen3,
        head_dim,
        bos_token_id: Some(151643.min(vocab as u32 - 1)),
        eos_token_ids: vec![151645.min(vocab as u32 - 1)],
        ..qwen2(hidden, inter, layers, heads, kv_heads, vocab, positions, 0)
    };
    // Gemma 3: every layer but each 6th slides over a window, with RoPE base 1e4.
    let gemma3 = |hidden, inter, layers, heads, vocab, window: usize, positions| {
        let c = qwen3(hidden, inter, layers, heads, 1, 256, vocab, positions);
        ModelConfig {
            architecture: Architecture::Gemma3,
            bos_token_id: Some(2.min(vocab as u32 - 1)),
            eos_token_ids: vec![1, 106.min(vocab as u32 - 1)],
            sliding_window: Some(SlidingWindow {
                size: window,
                layers: gemma3::sliding_layers(None, None, layers).unwrap_or_default(),
                rope_theta: gemma3::DEFAULT_LOCAL_ROPE_THETA,
            }),
            query_pre_attn_scalar: Some(256.0),
            ..c
        }
    };
    Ok(match name {
        "smollm2-135m" => llama(576, 1536, 30, 9, 3, 49152, 8192),
        "smollm2-360m" => llama(960, 2560, 32, 15, 5, 49152, 8192),
        "qwen2-0.5b" => qwen2(896, 4864, 24, 14, 2, 151936, 131072, 151643),
        "qwen3-0.6b" => qwen3(1024, 3072, 28, 16, 8, 128, 151936, 40960),
        "gemma3-270m" => gemma3(640, 2048, 18, 4, 262144, 512, 32768),
        "gemma3-1b" => gemma3(1152, 6912, 26, 4, 262144, 512, 32768),
        "tiny-gemma3" => ModelConfig {
            head_dim: 32,
            n_kv_heads: 2,
            query_pre_attn_scalar: Some(24.0),
            sliding_window: Some(SlidingWindow {
                size: 8,
                layers: vec![0],
                rope_theta: gemma3::DEFAULT_LOCAL_ROPE_THETA,
            }),
            ..gemma3(64, 128, 2, 4, 512, 8, 512)
        },
        "tiny-llama" => llama(64, 160, 2, 4, 2, 512, 512),
        "tiny-qwen3" => ModelConfig {
            tied_embeddings: false,
            ..qwen3(64, 128, 2, 4, 2, 32, 512, 512)
        },
        "tiny-qwen2" => ModelConfig {
            tied_embeddings: false,
            ..qwen2(64, 128, 2, 4, 1, 512, 512, 511)
        },
        other => {
            return Err(SproutError::Model(format!(
                "`{other}` is not a built-in model config (built-in: {})",
                BUILTIN_CONFIGS.join(", ")
            )));
        }
    })
}

/// Random weights for a config, in one storage format.
pub struct DummyWeights {
    config: ModelConfig,
    format: WeightFormat,
    seed: u64,
}

impl DummyWeights {
    /// Weights for `config` with every matrix stored in `format`, drawn from `seed`; an
    /// error naming the tensor when `format` cannot store one of its matrices' rows or a
    /// tensor or the layer count exceeds what dummy weights are drawn for.
    pub fn new(config: ModelConfig, format: WeightFormat, seed: u64) -> Result<Self, SproutError> {
        config.validate()?;
        // No file bounds these: the config is all there is.
        if config.n_layers > MAX_LAYERS {
            return Err(SproutError::Model(format!(
                "dummy weights: n_layers {} exceeds the {MAX_LAYERS} layers dummy weights are \
                 drawn for",
                config.n_layers
            )));
        }
        TensorName::check_storable(&config, format).map_err(|e| {
            SproutError::Model(format!(
                "dummy weights: {e}; choose f32, f16 or bf16 for this model"
            ))
        })?;
        for name in TensorName::one_of_each(&config) {
            let (rows, cols) = name.shape(&config);
            let stored = match name.is_vector() {
                true => WeightFormat::F32,
                false => format,
            };
            let bytes = stored.matrix_bytes(rows, cols).ok();
            if bytes.is_none_or(|b| b as u64 > MAX_TENSOR_BYTES) {
                return Err(SproutError::Model(format!(
                    "dummy weights: tensor {name} of {rows} x {cols} {stored} values exceeds \
                     the {MAX_TENSOR_BYTES} bytes a dummy tensor may take"
                )));
            }
        }
        Ok(DummyWeights {
            config,
            format,
            seed,
        })
    }

    /// The storage format of the matrices.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }
}

/// Values per chunk of rows that `read` draws and quantizes at once.
const CHUNK_VALUES: usize = 1 << 16;

impl WeightSource for DummyWeights {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
        match TensorName::parse(name).filter(|n| n.exists_in(&self.config)) {
            Some(n) if n.is_vector() => Ok(WeightFormat::F32),
            Some(_) => Ok(self.format),
            None => Err(names::missing(name, "the dummy model")),
        }
    }

    fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
        let tensor = TensorName::parse(name)
            .filter(|n| n.exists_in(&self.config))
            .ok_or_else(|| names::missing(name, "the dummy model"))?;
        let (rows, cols) = tensor.shape(&self.config);
        let mut rng = tensor_stream(self.seed, name, rows, cols);
        if tensor.is_vector() {
            let (center, spread) = match tensor {
                TensorName::Layer(_, t) if t.is_bias() => (0.0, 0.02),
                _ => (1.0, 0.05),
            };
            let mut values = vec![0.0f32; cols];
            fill(&mut rng, &mut values, center, spread);
            return Ok(TensorData {
                format: WeightFormat::F32,
                rows,
                cols,
                bytes: quantize(WeightFormat::F32, &values, cols)?,
            });
        }
        let format = self.format;
        let mut bytes = Vec::with_capacity(format.matrix_bytes(rows, cols)?);
        let chunk_rows = (CHUNK_VALUES / cols.max(1)).max(1);
        let mut values = vec![0.0f32; chunk_rows * cols];
        let scale = 1.0 / (cols.max(1) as f32).sqrt();
        let mut row = 0;
        while row < rows {
            let n = chunk_rows.min(rows - row);
            let chunk = &mut values[..n * cols];
            fill(&mut rng, chunk, 0.0, scale);
            bytes.extend_from_slice(&quantize(format, chunk, cols)?);
            row += n;
        }
        Ok(TensorData {
            format,
            rows,
            cols,
            bytes,
        })
    }

    fn has(&self, name: &str) -> bool {
        TensorName::parse(name).is_some_and(|n| n.exists_in(&self.config))
    }

    /// Dummy weights hold exactly the tensors their config names.
    fn unused_tensor(&self, _used: &[String]) -> Option<String> {
        None
    }
}

/// The stream of one tensor: keyed by the seed, the name (FNV-1a) and the shape.
fn tensor_stream(seed: u64, name: &str, rows: usize, cols: usize) -> SplitMix64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut g = SplitMix64::new(seed ^ h);
    let key = g.next_u64() ^ (rows as u64).rotate_left(32) ^ cols as u64;
    SplitMix64::new(key)
}

/// Fills `out` with values uniform in `center ± spread`, two per draw (24 bits each).
fn fill(rng: &mut SplitMix64, out: &mut [f32], center: f32, spread: f32) {
    const UNIT: f32 = 1.0 / (1u32 << 23) as f32;
    let to_value = |bits: u64| center + spread * (((bits & 0xff_ffff) as f32) * UNIT - 1.0);
    let mut pairs = out.chunks_exact_mut(2);
    for pair in &mut pairs {
        let x = rng.next_u64();
        pair[0] = to_value(x >> 8);
        pair[1] = to_value(x >> 40);
    }
    if let [last] = pairs.into_remainder() {
        *last = to_value(rng.next_u64() >> 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::names::LayerTensor;

    /// `config`, widened where `format` cannot store its rows: hidden size, q dim and
    /// intermediate size rounded up to whole blocks (the tiny configs' 64 values are not
    /// whole K-quant super-blocks).
    fn storable(config: &ModelConfig, format: WeightFormat) -> ModelConfig {
        let block = format.block_len();
        let hidden = config.hidden_size.next_multiple_of(block);
        let head_dim = match config.q_dim().is_multiple_of(block) {
            true => config.head_dim,
            false => hidden / config.n_heads,
        };
        ModelConfig {
            hidden_size: hidden,
            head_dim,
            intermediate_size: config.intermediate_size.next_multiple_of(block),
            ..config.clone()
        }
    }

    #[test]
    fn every_tensor_has_its_shape_and_format() {
        for model in ["tiny-llama", "tiny-qwen2", "tiny-qwen3"] {
            for format in WeightFormat::ALL {
                let config = storable(&builtin_config(model).unwrap(), format);
                let mut w = DummyWeights::new(config.clone(), format, 7).unwrap();
                let all = TensorName::all(&config);
                assert_eq!(
                    all.len(),
                    2 + config.n_layers * (9 + 3 * usize::from(config.has_qkv_bias()))
                        + config.n_layers * 2 * usize::from(config.has_qk_norm())
                        + usize::from(!config.tied_embeddings)
                );
                for name in all {
                    let key = name.to_string();
                    assert!(w.has(&key), "{model} {key}");
                    let t = w.read(&key).unwrap();
                    assert_eq!((t.rows, t.cols), name.shape(&config), "{model} {key}");
                    let want = if name.is_vector() {
                        WeightFormat::F32
                    } else {
                        format
                    };
                    assert_eq!(t.format, want, "{model} {key}");
                    assert_eq!(t.bytes.len(), t.rows * want.row_bytes(t.cols).unwrap());
                    let values = t.to_f32().unwrap();
                    let bound = match name {
                        _ if name.is_vector() => 1.06,
                        // Rounding to the format can push a value a little past ±1/sqrt(cols).
                        _ => 1.1 / (t.cols as f32).sqrt(),
                    };
                    assert!(
                        values.iter().all(|v| v.is_finite() && v.abs() <= bound),
                        "{model} {key} {format}"
                    );
                    let mean = values.iter().sum::<f32>() / values.len() as f32;
                    match name {
                        TensorName::FinalNorm
                        | TensorName::Layer(
                            _,
                            LayerTensor::AttnNorm
                            | LayerTensor::MlpNorm
                            | LayerTensor::QNorm
                            | LayerTensor::KNorm,
                        ) => {
                            assert!((mean - 1.0).abs() < 0.02, "{key}: {mean}")
                        }
                        _ => assert!(mean.abs() < 0.02, "{key}: {mean}"),
                    }
                }
                let absent = if config.tied_embeddings {
                    "lm_head"
                } else {
                    "layers.9.q"
                };
                assert!(
                    !w.has(absent) && w.read(absent).is_err(),
                    "{model} {absent}"
                );
                let err = w.read("bogus").err().unwrap().to_string();
                assert!(err.contains("bogus"), "{err}");
            }
        }
        let llama = builtin_config("tiny-llama").unwrap();
        let w = DummyWeights::new(llama, WeightFormat::Q4_1, 0).unwrap();
        assert!(!w.has("layers.0.q_bias"));
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes_in_any_order() {
        for format in WeightFormat::ALL {
            let config = storable(&builtin_config("tiny-qwen2").unwrap(), format);
            let names: Vec<String> = TensorName::all(&config)
                .iter()
                .map(|n| n.to_string())
                .collect();
            let mut a = DummyWeights::new(config.clone(), format, 3).unwrap();
            let mut b = DummyWeights::new(config.clone(), format, 3).unwrap();
            let mut c = DummyWeights::new(config.clone(), format, 4).unwrap();
            let forward: Vec<Vec<u8>> = names.iter().map(|n| a.read(n).unwrap().bytes).collect();
            let mut backward: Vec<Vec<u8>> = names
                .iter()
                .rev()
                .map(|n| b.read(n).unwrap().bytes)
                .collect();
            backward.reverse();
            assert_eq!(forward, backward, "{format}");
            for (n, bytes) in names.iter().zip(&forward) {
                assert_ne!(
                    &c.read(n).unwrap().bytes,
                    bytes,
                    "{format} {n}: another seed"
                );
            }
            // Tensors of one shape still differ from each other.
            assert_ne!(
                a.read("layers.0.k").unwrap().bytes,
                a.read("layers.0.v").unwrap().bytes
            );
        }
    }

    #[test]
    fn quantized_formats_need_rows_of_whole_blocks() {
        let config = ModelConfig {
            intermediate_size: 100,
            ..builtin_config("tiny-llama").unwrap()
        };
        for format in [WeightFormat::Q8_0, WeightFormat::Q4_0, WeightFormat::Q4_1] {
            let err = DummyWeights::new(config.clone(), format, 0)
                .err()
                .unwrap()
                .to_string();
            assert!(
                err.contains("layers.0.down")
                    && err.contains(format.name())
                    && err.contains("100")
                    && err.contains("32"),
                "{err}"
            );
        }
        for format in [WeightFormat::F32, WeightFormat::F16, WeightFormat::Bf16] {
            DummyWeights::new(config.clone(), format, 0).unwrap();
        }
        // The K-quants' super-blocks: tiny-llama's hidden size of 64 is a quarter of one.
        let config = builtin_config("tiny-llama").unwrap();
        for format in [WeightFormat::Q4_K, WeightFormat::Q5_K, WeightFormat::Q6_K] {
            let err = DummyWeights::new(config.clone(), format, 0)
                .err()
                .unwrap()
                .to_string();
            assert!(
                err.contains("tensor embed is 512 x 64")
                    && err.contains(format.name())
                    && err.contains("256"),
                "{err}"
            );
            DummyWeights::new(storable(&config, format), format, 0).unwrap();
        }
    }

    #[test]
    fn built_in_configs_have_the_published_shapes() {
        let s = builtin_config("smollm2-135m").unwrap();
        assert_eq!(
            (
                s.hidden_size,
                s.intermediate_size,
                s.n_layers,
                s.n_heads,
                s.n_kv_heads,
                s.head_dim,
                s.vocab_size
            ),
            (576, 1536, 30, 9, 3, 64, 49152)
        );
        assert_eq!(
            (s.rms_norm_eps, s.rope_theta, s.max_positions),
            (1e-5, 100000.0, 8192)
        );
        assert!(s.tied_embeddings && s.architecture == Architecture::Llama);
        assert_eq!(
            (s.bos_token_id, s.eos_token_ids.as_slice(), s.rope_layout),
            (Some(1), &[2][..], RopeLayout::HalfSplit)
        );
        let m = builtin_config("smollm2-360m").unwrap();
        assert_eq!(
            (
                m.hidden_size,
                m.intermediate_size,
                m.n_layers,
                m.n_heads,
                m.n_kv_heads,
                m.head_dim
            ),
            (960, 2560, 32, 15, 5, 64)
        );
        let q = builtin_config("qwen2-0.5b").unwrap();
        assert_eq!(
            (
                q.hidden_size,
                q.intermediate_size,
                q.n_layers,
                q.n_heads,
                q.n_kv_heads,
                q.head_dim,
                q.vocab_size
            ),
            (896, 4864, 24, 14, 2, 64, 151936)
        );
        assert!(q.has_qkv_bias() && q.tied_embeddings);
        let q3 = builtin_config("qwen3-0.6b").unwrap();
        assert_eq!(
            (
                q3.hidden_size,
                q3.q_dim(),
                q3.n_kv_heads,
                q3.head_dim,
                q3.n_layers
            ),
            (1024, 2048, 8, 128, 28)
        );
        assert!(q3.has_qk_norm() && !q3.has_qkv_bias() && q3.tied_embeddings);
        for name in BUILTIN_CONFIGS {
            let c = builtin_config(name).unwrap();
            if !c.has_qk_norm() {
                assert_eq!(c.hidden_size, c.n_heads * c.head_dim, "{name}");
            }
            assert!(
                c.eos_token_ids.iter().all(|&e| (e as usize) < c.vocab_size),
                "{name}"
            );
            for format in WeightFormat::ALL {
                // Every format whose blocks fill the config's rows (the K-quants' 256 fill
                // none of the published configs' hidden sizes: refused, naming a tensor).
                match TensorName::check_storable(&c, format) {
                    Ok(()) => drop(DummyWeights::new(c.clone(), format, 0).unwrap()),
                    Err(_) => assert!(DummyWeights::new(c.clone(), format, 0).is_err()),
                }
            }
        }
    }

    #[test]
    fn an_unknown_name_lists_the_built_in_ones() {
        let err = builtin_config("gpt-5").unwrap_err().to_string();
        assert!(err.contains("gpt-5"), "{err}");
        for name in BUILTIN_CONFIGS {
            assert!(err.contains(name), "{err}");
        }
    }
}
