//! The decoder forward pass on the GPU: a Llama-family transformer (Llama, SmolLM,
//! Mistral, Qwen2) recorded into one command encoder per step.
//!
//! Per layer: RMSNorm, q/k/v projections (+ bias for Qwen2), RoPE on q and k, the new k/v
//! rows copied into the layer's KV cache, causal GQA attention, the output projection and
//! a residual add; then RMSNorm, gate and up projections, SiLU-gate, the down projection
//! and a residual add. A final RMSNorm and the output projection (the embedding when tied)
//! give logits.
//!
//! Weights stay in their stored formats; only norm and bias vectors are f32. The KV cache
//! here is contiguous per layer (one sequence); the paged pool replaces it later.

use std::sync::Arc;

use crate::error::SproutError;
use crate::gpu::kernels::attention::{self, AttentionShape};
use crate::gpu::kernels::elementwise::{encode_add_bias, encode_residual_add, encode_silu_gate};
use crate::gpu::kernels::rope::{self, RopeTable};
use crate::gpu::kernels::{embedding, matmul, rmsnorm};
use crate::gpu::{Gpu, GpuWeight, Tensor};
use crate::model::config::ModelConfig;
use crate::model::source::{TensorData, WeightSource};

struct Layer {
    attn_norm: Tensor,
    q: GpuWeight,
    k: GpuWeight,
    v: GpuWeight,
    /// Qwen2's q, k and v biases.
    qkv_bias: Option<[Tensor; 3]>,
    o: GpuWeight,
    mlp_norm: Tensor,
    gate: GpuWeight,
    up: GpuWeight,
    down: GpuWeight,
}

/// A model's weights on the GPU and the forward pass over them.
pub struct Decoder {
    pub gpu: Arc<Gpu>,
    pub config: ModelConfig,
    embed: GpuWeight,
    layers: Vec<Layer>,
    final_norm: Tensor,
    /// `None` when the output projection is the embedding (tied).
    lm_head: Option<GpuWeight>,
    rope: RopeTable,
}

/// The key/value cache of one sequence: per layer `[capacity, kv_dim]` for k and for v.
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    pub capacity: usize,
}

impl KvCache {
    pub fn new(decoder: &Decoder, capacity: usize) -> KvCache {
        let c = &decoder.config;
        let per_layer = capacity * c.kv_dim();
        KvCache {
            k: (0..c.n_layers)
                .map(|_| decoder.gpu.zeros(per_layer))
                .collect(),
            v: (0..c.n_layers)
                .map(|_| decoder.gpu.zeros(per_layer))
                .collect(),
            capacity,
        }
    }
}

/// Which rows of logits a forward pass produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's (scoring, tests).
    All,
}

/// The buffers one forward pass of `t` tokens writes, allocated once and reused by every
/// pass of that size (a decode loop makes one set for `t = 1`), so the step loop allocates
/// nothing on the GPU.
pub struct ForwardBuffers {
    pub t: usize,
    pub which: Logits,
    h: Tensor,
    xn: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn: Tensor,
    proj: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    /// The last row of `h` (only for `Logits::Last` with `t > 1`).
    last: Tensor,
    normed: Tensor,
    /// `[1 or t, vocab]`, as `which` asks.
    pub logits: Tensor,
}

impl ForwardBuffers {
    pub fn new(decoder: &Decoder, t: usize, which: Logits) -> ForwardBuffers {
        let (gpu, c) = (&*decoder.gpu, &decoder.config);
        let rows = match which {
            Logits::All => t,
            Logits::Last => 1,
        };
        ForwardBuffers {
            t,
            which,
            h: gpu.zeros(t * c.hidden_size),
            xn: gpu.zeros(t * c.hidden_size),
            q: gpu.zeros(t * c.q_dim()),
            k: gpu.zeros(t * c.kv_dim()),
            v: gpu.zeros(t * c.kv_dim()),
            attn: gpu.zeros(t * c.q_dim()),
            proj: gpu.zeros(t * c.hidden_size),
            gate: gpu.zeros(t * c.intermediate_size),
            up: gpu.zeros(t * c.intermediate_size),
            act: gpu.zeros(t * c.intermediate_size),
            last: gpu.zeros(if which == Logits::Last && t > 1 {
                c.hidden_size
            } else {
                0
            }),
            normed: gpu.zeros(rows * c.hidden_size),
            logits: gpu.zeros(rows * c.vocab_size),
        }
    }
}

impl Decoder {
    /// Uploads every tensor of `source`, one at a time (never two copies on the CPU).
    /// `progress(done, total)` is called after each tensor.
    pub fn load(
        gpu: Arc<Gpu>,
        source: &mut dyn WeightSource,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Decoder, SproutError> {
        let config = source.config().clone();
        check_supported(&config)?;
        let per_layer = if config.has_qkv_bias() { 12 } else { 9 };
        let total = 2 + usize::from(!config.tied_embeddings) + config.n_layers * per_layer;
        let mut l = Loader {
            gpu: &gpu,
            source,
            progress,
            done: 0,
            total,
        };
        let (hidden, inter, q_dim, kv_dim) = (
            config.hidden_size,
            config.intermediate_size,
            config.q_dim(),
            config.kv_dim(),
        );
        let embed = l.matrix("embed", config.vocab_size, hidden)?;
        let lm_head = match config.tied_embeddings {
            true => None,
            false => Some(l.matrix("lm_head", config.vocab_size, hidden)?),
        };
        let mut layers = Vec::with_capacity(config.n_layers);
        for i in 0..config.n_layers {
            let name = |s: &str| format!("layers.{i}.{s}");
            let qkv_bias = match config.has_qkv_bias() {
                true => Some([
                    l.vector(&name("q_bias"), q_dim)?,
                    l.vector(&name("k_bias"), kv_dim)?,
                    l.vector(&name("v_bias"), kv_dim)?,
                ]),
                false => None,
            };
            layers.push(Layer {
                attn_norm: l.vector(&name("attn_norm"), hidden)?,
                q: l.matrix(&name("q"), q_dim, hidden)?,
                k: l.matrix(&name("k"), kv_dim, hidden)?,
                v: l.matrix(&name("v"), kv_dim, hidden)?,
                qkv_bias,
                o: l.matrix(&name("o"), hidden, q_dim)?,
                mlp_norm: l.vector(&name("mlp_norm"), hidden)?,
                gate: l.matrix(&name("gate"), inter, hidden)?,
                up: l.matrix(&name("up"), inter, hidden)?,
                down: l.matrix(&name("down"), hidden, inter)?,
            });
        }
        let final_norm = l.vector("final_norm", hidden)?;
        let rope = RopeTable::new(
            &gpu,
            config.head_dim,
            config.rope_theta,
            config.max_positions,
        );
        Ok(Decoder {
            gpu,
            config,
            embed,
            layers,
            final_norm,
            lm_head,
            rope,
        })
    }

    fn lm_head(&self) -> &GpuWeight {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Records the forward pass of `a.t` tokens (`ids [t]` u32) at positions
    /// `pos0..pos0 + t` (`positions [t]` u32), writing their k/v into `cache` and the
    /// logits of the rows `a.which` asks for into `a.logits`.
    pub fn encode_forward(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        ids: &Tensor,
        positions: &Tensor,
        pos0: usize,
        cache: &KvCache,
        a: &ForwardBuffers,
    ) -> Result<(), SproutError> {
        let (c, t) = (&self.config, a.t);
        if pos0 + t > cache.capacity {
            return Err(SproutError::Shape(format!(
                "{} tokens do not fit a KV cache of {}",
                pos0 + t,
                cache.capacity
            )));
        }
        if pos0 + t > self.rope.max_positions {
            return Err(SproutError::Shape(format!(
                "position {} is past the model's context of {} tokens",
                pos0 + t - 1,
                self.rope.max_positions
            )));
        }
        let gpu = &*self.gpu;
        let (hidden, q_dim, kv_dim, inter) =
            (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size);
        let eps = c.rms_norm_eps;
        embedding::encode(gpu, encoder, &self.embed, ids, t, &a.h);
        for (l, layer) in self.layers.iter().enumerate() {
            rmsnorm::encode(gpu, encoder, &a.h, &layer.attn_norm, eps, &a.xn, t, hidden);
            matmul::encode(gpu, encoder, &a.xn, t, &layer.q, &a.q);
            matmul::encode(gpu, encoder, &a.xn, t, &layer.k, &a.k);
            matmul::encode(gpu, encoder, &a.xn, t, &layer.v, &a.v);
            if let Some([bq, bk, bv]) = &layer.qkv_bias {
                encode_add_bias(gpu, encoder, &a.q, bq, t, q_dim);
                encode_add_bias(gpu, encoder, &a.k, bk, t, kv_dim);
                encode_add_bias(gpu, encoder, &a.v, bv, t, kv_dim);
            }
            rope::encode(
                gpu,
                encoder,
                c.rope_layout,
                &a.q,
                positions,
                &self.rope,
                t,
                c.n_heads,
            );
            rope::encode(
                gpu,
                encoder,
                c.rope_layout,
                &a.k,
                positions,
                &self.rope,
                t,
                c.n_kv_heads,
            );
            let offset = (pos0 * kv_dim * 4) as u64;
            let bytes = (t * kv_dim * 4) as u64;
            encoder.copy_buffer_to_buffer(&a.k.buffer, 0, &cache.k[l].buffer, offset, bytes);
            encoder.copy_buffer_to_buffer(&a.v.buffer, 0, &cache.v[l].buffer, offset, bytes);
            let shape = AttentionShape::new(t, pos0, c.n_heads, c.n_kv_heads, c.head_dim);
            attention::encode(
                gpu,
                encoder,
                &shape,
                &a.q,
                &cache.k[l],
                &cache.v[l],
                &a.attn,
            );
            matmul::encode(gpu, encoder, &a.attn, t, &layer.o, &a.proj);
            encode_residual_add(gpu, encoder, &a.h, &a.proj, t * hidden);
            rmsnorm::encode(gpu, encoder, &a.h, &layer.mlp_norm, eps, &a.xn, t, hidden);
            matmul::encode(gpu, encoder, &a.xn, t, &layer.gate, &a.gate);
            matmul::encode(gpu, encoder, &a.xn, t, &layer.up, &a.up);
            encode_silu_gate(gpu, encoder, &a.gate, &a.up, &a.act, t * inter);
            matmul::encode(gpu, encoder, &a.act, t, &layer.down, &a.proj);
            encode_residual_add(gpu, encoder, &a.h, &a.proj, t * hidden);
        }
        // Generation needs only the last row's logits: norm and project just that row.
        let (rows, last) = match a.which {
            Logits::Last if t > 1 => {
                let row = (hidden * 4) as u64;
                let from = (t as u64 - 1) * row;
                encoder.copy_buffer_to_buffer(&a.h.buffer, from, &a.last.buffer, 0, row);
                (1, &a.last)
            }
            Logits::Last => (1, &a.h),
            Logits::All => (t, &a.h),
        };
        let norm = &self.final_norm;
        rmsnorm::encode(gpu, encoder, last, norm, eps, &a.normed, rows, hidden);
        matmul::encode(gpu, encoder, &a.normed, rows, self.lm_head(), &a.logits);
        Ok(())
    }
}

fn check_supported(c: &ModelConfig) -> Result<(), SproutError> {
    let max = attention::MAX_HEAD_DIM;
    if c.head_dim == 0 || !c.head_dim.is_multiple_of(4) || c.head_dim > max {
        return Err(SproutError::Model(format!(
            "head size {} is not supported (a multiple of 4 up to {max})",
            c.head_dim
        )));
    }
    if c.n_kv_heads == 0 || !c.n_heads.is_multiple_of(c.n_kv_heads) {
        return Err(SproutError::Model(format!(
            "{} attention heads cannot share {} key/value heads",
            c.n_heads, c.n_kv_heads
        )));
    }
    Ok(())
}
/// Reads tensors from a source, checks their shapes, uploads them and reports progress.
struct Loader<'a> {
    gpu: &'a Gpu,
    source: &'a mut dyn WeightSource,
    progress: &'a mut dyn FnMut(usize, usize),
    done: usize,
    total: usize,
}

impl Loader<'_> {
    fn read(&mut self, name: &str, rows: usize, cols: usize) -> Result<TensorData, SproutError> {
        let t = self.source.read(name)?;
        if t.rows * t.cols != rows * cols || (rows > 1 && (t.rows, t.cols) != (rows, cols)) {
            return Err(SproutError::Model(format!(
                "tensor {name} is {}x{}, but the model's config implies {rows}x{cols}",
                t.rows, t.cols
            )));
        }
        self.done += 1;
        (self.progress)(self.done, self.total);
        Ok(t)
    }

    /// A weight matrix, kept in its stored format.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<GpuWeight, SproutError> {
        let t = self.read(name, rows, cols)?;
        GpuWeight::upload(self.gpu, t.format, &t.bytes, rows, cols)
    }

    /// A norm or bias vector, as f32.
    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor, SproutError> {
        let t = self.read(name, 1, len)?;
        Ok(self.gpu.upload(&t.to_f32()?))
    }
}
