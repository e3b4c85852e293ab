//! A model's weights on the GPU, laid out for the fused kernels: what the decoder's
//! forward pass reads, and what a weight update replaces whole.
//!
//! Layout (`model::fused_weights`): q, k and v stacked, with q and k rows in RoPE's
//! adjacent-pair order (half-split models' rows permuted at load); gate and up
//! interleaved; norm and bias vectors f32, one buffer per layer (Qwen3's q and k norms
//! permuted within the head as the q and k rows are).
//!
//! Loading reads one tensor at a time from a [`WeightSource`] (never the whole model on
//! the CPU), checks its shape against the config, and uploads it. An update is checked
//! harder ([`Checks::Update`]): no tensor missing or extra, every value finite, the same
//! model in every size.

use crate::error::SproutError;
use crate::formats::TensorData;
use crate::gpu::kernels::rope::RopeLayout;
use crate::gpu::tuning::MatmulSite;
use crate::gpu::{Gpu, GpuWeight, Tensor, WeightPart};
use crate::model::config::ModelConfig;
use crate::model::fused_weights::{
    half_split_to_adjacent, interleave_rows, permute_head_rows, permute_head_values, stack_rows,
};
use crate::model::names::TensorName;
use crate::model::qwen3;
use crate::model::source::WeightSource;

pub(crate) struct Layer {
    /// f32: the attention norm's weights, the q|k|v biases (Qwen2), the MLP norm's
    /// weights, the q and k norms' weights (Qwen3, Gemma 3), the post-attention and
    /// post-MLP norms' weights (Gemma 3).
    pub(crate) vectors: Tensor,
    /// q, k and v stacked by rows, q and k in RoPE's adjacent-pair order.
    pub(crate) qkv: GpuWeight,
    pub(crate) o: GpuWeight,
    /// gate and up rows alternating: row 2j is gate j, row 2j + 1 is up j.
    pub(crate) gate_up: GpuWeight,
    pub(crate) down: GpuWeight,
}

/// The weights of a model on the GPU.
pub struct DecoderWeights {
    pub(crate) embed: GpuWeight,
    pub(crate) layers: Vec<Layer>,
    pub(crate) final_norm: Tensor,
    /// `None` when the output projection is the embedding (tied).
    pub(crate) lm_head: Option<GpuWeight>,
}

/// How hard loading checks what it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// Each tensor's shape (a model being opened).
    Shapes,
    /// Also: no tensor the model does not use, and every value finite (new weights for a
    /// model already serving, from a trainer).
    Update,
}

impl DecoderWeights {
    /// Reads, checks and uploads every tensor of `source` for a model of `config`;
    /// `progress(done, total)` is called after each tensor.
    pub fn load(
        gpu: &Gpu,
        source: &mut dyn WeightSource,
        config: &ModelConfig,
        checks: Checks,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<DecoderWeights, SproutError> {
        let names = canonical_names(config);
        if checks == Checks::Update {
            check_names(source, &names)?;
        }
        let mut l = Loader {
            gpu,
            source,
            progress,
            checks,
            done: 0,
            total: names.len(),
        };
        let (hidden, inter, q_dim, kv_dim, hd) = (
            config.hidden_size,
            config.intermediate_size,
            config.q_dim(),
            config.kv_dim(),
            config.head_dim,
        );
        let embed = l.matrix("embed", config.vocab_size, hidden)?;
        let lm_head = match config.tied_embeddings {
            true => None,
            false => Some(l.matrix("lm_head", config.vocab_size, hidden)?),
        };
        // RoPE runs on adjacent pairs; half-split models get their q and k rows permuted.
        let order = match config.rope_layout {
            RopeLayout::Interleaved => None,
            RopeLayout::HalfSplit => Some(half_split_to_adjacent(hd)),
        };
        let mut layers = Vec::with_capacity(config.n_layers);
        for i in 0..config.n_layers {
            let name = |s: &str| format!("layers.{i}.{s}");
            let mut vectors = l.vector(&name("attn_norm"), hidden)?;
            if config.has_qkv_bias() {
                let mut q_bias = l.vector(&name("q_bias"), q_dim)?;
                let mut k_bias = l.vector(&name("k_bias"), kv_dim)?;
                if let Some(order) = &order {
                    permute_head_values(&mut q_bias, hd, order);
                    permute_head_values(&mut k_bias, hd, order);
                }
                vectors.extend(q_bias);
                vectors.extend(k_bias);
                vectors.extend(l.vector(&name("v_bias"), kv_dim)?);
            }
            vectors.extend(l.vector(&name("mlp_norm"), hidden)?);
            if config.has_qk_norm() {
                let (q_norm, k_norm) = (
                    l.vector(&name("q_norm"), hd)?,
                    l.vector(&name("k_norm"), hd)?,
                );
                vectors.extend(qwen3::norm_vectors(q_norm, k_norm, hd, order.as_deref()));
            }
            if config.has_post_norms() {
                vectors.extend(l.vector(&name("post_attn_norm"), hidden)?);
                vectors.extend(l.vector(&name("post_mlp_norm"), hidden)?);
            }
            let mut q = l.read(&name("q"), q_dim, hidden)?;
            let mut k = l.read(&name("k"), kv_dim, hidden)?;
            if let Some(order) = &order {
                permute_head_rows(&mut q, hd, order);
                permute_head_rows(&mut k, hd, order);
            }
            let v = l.read(&name("v"), kv_dim, hidden)?;
            let qkv = l.upload(stack_rows(&[&q, &k, &v])?)?;
            drop((q, k, v));
            let o = l.matrix(&name("o"), hidden, q_dim)?;
            let gate = l.read(&name("gate"), inter, hidden)?;
            let up = l.read(&name("up"), inter, hidden)?;
            let gate_up = l.upload(interleave_rows(&gate, &up)?)?;
            drop((gate, up));
            layers.push(Layer {
                vectors: gpu.upload(&vectors),
                qkv,
                o,
                gate_up,
                down: l.matrix(&name("down"), hidden, inter)?,
            });
        }
        let final_norm = gpu.upload(&l.vector("final_norm", hidden)?);
        gpu.flush_uploads()?;
        Ok(DecoderWeights {
            embed,
            layers,
            final_norm,
            lm_head,
        })
    }

    /// Loads `source` as new weights for a model of `serving`'s config, checked as an
    /// update: the same model in every size, no tensor missing or extra, every value
    /// finite. The weights in force keep serving meanwhile (this only adds buffers).
    pub fn load_update(
        gpu: &Gpu,
        source: &mut dyn WeightSource,
        serving: &ModelConfig,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<DecoderWeights, SproutError> {
        check_same_model(serving, source.config())?;
        // Rows are put in RoPE's adjacent-pair order from the layout the new source stores
        // (a GGUF's permuted Llama rows, a Hugging Face directory's half-split ones), so an
        // update may come in either.
        let as_stored = ModelConfig {
            rope_layout: source.config().rope_layout,
            ..serving.clone()
        };
        DecoderWeights::load(gpu, source, &as_stored, Checks::Update, progress)
    }

    /// The vocabulary projection's weight (the embedding when tied).
    pub fn lm_head(&self) -> &GpuWeight {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// The weights of each matmul site (the first layer's for the layer sites), with the
    /// keys the choices use: what `sprout tune` measures.
    pub fn matmul_sites(&self) -> Vec<(MatmulSite, &GpuWeight)> {
        let mut out = Vec::new();
        if let Some(l) = self.layers.first() {
            out.extend([
                (MatmulSite::Qkv, &l.qkv),
                (MatmulSite::AttnOut, &l.o),
                (MatmulSite::GateUp, &l.gate_up),
                (MatmulSite::Down, &l.down),
            ]);
        }
        out.push((MatmulSite::LmHead, self.lm_head()));
        out
    }

    /// Every buffer of these weights, in one fixed order: what offloading reads back and
    /// [`DecoderWeights::rebuilt`] takes new buffers in.
    pub(crate) fn buffers(&self) -> Vec<&wgpu::Buffer> {
        fn parts(w: &GpuWeight) -> impl Iterator<Item = &wgpu::Buffer> {
            w.parts.iter().map(|p| &p.buffer)
        }
        let mut out: Vec<&wgpu::Buffer> = parts(&self.embed).collect();
        for l in &self.layers {
            out.push(&l.vectors.buffer);
            for w in [&l.qkv, &l.o, &l.gate_up, &l.down] {
                out.extend(parts(w));
            }
        }
        out.push(&self.final_norm.buffer);
        if let Some(head) = &self.lm_head {
            out.extend(parts(head));
        }
        out
    }

    /// Bytes these weights take on the device.
    pub fn device_bytes(&self) -> u64 {
        self.buffers().iter().map(|b| b.size()).sum()
    }

    /// The same weights over `buffers`, one per buffer of [`DecoderWeights::buffers`], in
    /// that order (each of the same size); `None` if there are too few.
    pub(crate) fn rebuilt(
        &self,
        buffers: &mut dyn Iterator<Item = wgpu::Buffer>,
    ) -> Option<DecoderWeights> {
        let embed = rebuilt_weight(&self.embed, buffers)?;
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let vectors = Tensor {
                buffer: buffers.next()?,
                len: l.vectors.len,
            };
            layers.push(Layer {
                vectors,
                qkv: rebuilt_weight(&l.qkv, buffers)?,
                o: rebuilt_weight(&l.o, buffers)?,
                gate_up: rebuilt_weight(&l.gate_up, buffers)?,
                down: rebuilt_weight(&l.down, buffers)?,
            });
        }
        let final_norm = Tensor {
            buffer: buffers.next()?,
            len: self.final_norm.len,
        };
        let lm_head = match &self.lm_head {
            Some(head) => Some(rebuilt_weight(head, buffers)?),
            None => None,
        };
        Some(DecoderWeights {
            embed,
            layers,
            final_norm,
            lm_head,
        })
    }

    /// The stored formats of the weight matrices, most used first, joined by `+`
    /// (`q4_1+q8_0`): what a record names as the model's weight format.
    pub fn weight_format(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        let mut add = |w: &GpuWeight| {
            let name = w.format.to_string();
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        };
        add(&self.embed);
        if let Some(head) = &self.lm_head {
            add(head);
        }
        for l in &self.layers {
            for w in [&l.qkv, &l.o, &l.gate_up, &l.down] {
                add(w);
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        let names: Vec<String> = counts.into_iter().map(|(n, _)| n).collect();
        names.join("+")
    }
}

/// `w` over new buffers, one per part, in order.
fn rebuilt_weight(
    w: &GpuWeight,
    buffers: &mut dyn Iterator<Item = wgpu::Buffer>,
) -> Option<GpuWeight> {
    let mut parts = Vec::with_capacity(w.parts.len());
    for p in &w.parts {
        parts.push(WeightPart {
            buffer: buffers.next()?,
            first_row: p.first_row,
            rows: p.rows,
        });
    }
    Some(GpuWeight { parts, ..*w })
}

/// The canonical names of every tensor a model of `config` reads (see `model::source`).
fn canonical_names(config: &ModelConfig) -> Vec<String> {
    TensorName::all(config)
        .iter()
        .map(|n| n.to_string())
        .collect()
}

/// An update must hold exactly the tensors the model reads: a missing one is named, and
/// so is one the model has no place for (a checkpoint of another shape of model).
fn check_names(source: &dyn WeightSource, names: &[String]) -> Result<(), SproutError> {
    if let Some(missing) = names.iter().find(|n| !source.has(n)) {
        return Err(SproutError::Model(format!(
            "the new weights have no tensor {missing}"
        )));
    }
    if let Some(extra) = source.unused_tensor(names) {
        return Err(SproutError::Model(format!(
            "the new weights have a tensor this model does not use: {extra}"
        )));
    }
    Ok(())
}

/// New weights must be for the same model: every size, and the RoPE layout.
fn check_same_model(serving: &ModelConfig, new: &ModelConfig) -> Result<(), SproutError> {
    let sizes = |c: &ModelConfig| {
        [
            ("vocab_size", c.vocab_size),
            ("hidden_size", c.hidden_size),
            ("intermediate_size", c.intermediate_size),
            ("num_hidden_layers", c.n_layers),
            ("num_attention_heads", c.n_heads),
            ("num_key_value_heads", c.n_kv_heads),
            ("head_dim", c.head_dim),
        ]
    };
    for ((name, have), (_, got)) in sizes(serving).into_iter().zip(sizes(new)) {
        if have != got {
            return Err(SproutError::Model(format!(
                "the new weights' {name} is {got}, the serving model's {have}"
            )));
        }
    }
    if serving.tied_embeddings != new.tied_embeddings {
        return Err(SproutError::Model(format!(
            "the new weights {} the embedding and the output projection; the serving model {}",
            if new.tied_embeddings {
                "tie"
            } else {
                "do not tie"
            },
            if serving.tied_embeddings {
                "does"
            } else {
                "does not"
            },
        )));
    }
    if serving.has_qkv_bias() != new.has_qkv_bias() || serving.has_qk_norm() != new.has_qk_norm() {
        return Err(SproutError::Model(
            "the new weights are for another architecture (q/k/v biases or q/k norms differ)"
                .into(),
        ));
    }
    if serving.architecture != new.architecture {
        return Err(SproutError::Model(format!(
            "the new weights are for {:?}, the serving model is {:?}",
            new.architecture, serving.architecture
        )));
    }
    if serving.sliding_window != new.sliding_window
        || serving.attention_scale() != new.attention_scale()
    {
        return Err(SproutError::Model(format!(
            "the new weights' attention (sliding window {:?}, query_pre_attn_scalar {:?}) \
             differs from the serving model's ({:?}, {:?})",
            new.sliding_window,
            new.query_pre_attn_scalar,
            serving.sliding_window,
            serving.query_pre_attn_scalar
        )));
    }
    if serving.layers_without_rope != new.layers_without_rope {
        return Err(SproutError::Model(format!(
            "the new weights leave RoPE out of layers {:?}, the serving model out of {:?}",
            new.layers_without_rope, serving.layers_without_rope
        )));
    }
    // The serving model's RoPE table stays; the new weights must mean the same rotations
    // (a GGUF's f32 divisors and the llama3 formula in f64 agree to about 1e-7).
    let (have, got) = (serving.rope_frequencies(), new.rope_frequencies());
    if let Some(i) = (0..have.len()).find(|&i| (have[i] - got[i]).abs() > 1e-6 * have[i]) {
        return Err(SproutError::Model(format!(
            "the new weights' RoPE frequency {i} is {}, the serving model's {} (rope_theta or \
             rope scaling differ)",
            got[i], have[i]
        )));
    }
    Ok(())
}

/// Reads tensors from a source, checks their shapes, uploads them and reports progress.
struct Loader<'a> {
    gpu: &'a Gpu,
    source: &'a mut dyn WeightSource,
    progress: &'a mut dyn FnMut(usize, usize),
    checks: Checks,
    done: usize,
    total: usize,
}

impl Loader<'_> {
    fn read(&mut self, name: &str, rows: usize, cols: usize) -> Result<TensorData, SproutError> {
        let t = self.source.read(name)?;
        // A vector may come as one row or one column; a product that overflows matches
        // nothing (the config's own products were checked by `validate`).
        let same_len = t.rows.checked_mul(t.cols) == rows.checked_mul(cols);
        if !same_len || (rows > 1 && (t.rows, t.cols) != (rows, cols)) {
            return Err(SproutError::Model(format!(
                "tensor {name} is {}x{}, but the model's config implies {rows}x{cols}",
                t.rows, t.cols
            )));
        }
        if self.checks == Checks::Update
            && let Some(at) = t.to_f32()?.iter().position(|x| !x.is_finite())
        {
            return Err(SproutError::Model(format!(
                "tensor {name} holds a value that is not finite (element {at})"
            )));
        }
        self.done += 1;
        (self.progress)(self.done, self.total);
        Ok(t)
    }

    fn upload(&self, t: TensorData) -> Result<GpuWeight, SproutError> {
        GpuWeight::upload(self.gpu, t.format, &t.bytes, t.rows, t.cols)
    }

    /// A weight matrix, kept in its stored format.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<GpuWeight, SproutError> {
        let t = self.read(name, rows, cols)?;
        self.upload(t)
    }

    /// A norm or bias vector, as f32.
    fn vector(&mut self, name: &str, len: usize) -> Result<Vec<f32>, SproutError> {
        self.read(name, 1, len)?.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dummy::builtin_config;
    use crate::model::rope_scaling::RopeScaling;

    #[test]
    fn new_weights_must_mean_the_same_architecture_and_rotations() {
        let serving = builtin_config("tiny-llama").unwrap();
        assert!(check_same_model(&serving, &serving.clone()).is_ok());
        let llama3 = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64.0,
        };
        let scaled = ModelConfig {
            rope_scaling: Some(llama3.clone()),
            ..serving.clone()
        };
        let e = check_same_model(&serving, &scaled).unwrap_err().to_string();
        assert!(
            e.contains("RoPE frequency") && e.contains("rope scaling"),
            "{e}"
        );
        // The same scaling as a GGUF's f32 divisors: the same rotations.
        let mut freqs = scaled.rope_frequencies();
        let base = serving.rope_frequencies();
        let divisors = base
            .iter()
            .zip(&mut freqs)
            .map(|(b, f)| (b / *f) as f32)
            .collect();
        let gguf = ModelConfig {
            rope_scaling: Some(RopeScaling::from_divisors(divisors, serving.head_dim).unwrap()),
            ..serving.clone()
        };
        assert!(check_same_model(&scaled, &gguf).is_ok());
        let qwen3 = ModelConfig {
            architecture: crate::model::config::Architecture::Qwen3,
            ..serving.clone()
        };
        let e = check_same_model(&serving, &qwen3).unwrap_err().to_string();
        assert!(e.contains("q/k norms"), "{e}");
    }
}
