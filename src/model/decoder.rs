//! The decoder forward pass on the GPU: a Llama-family transformer (Llama, SmolLM,
//! Mistral, Qwen2) recorded into one command encoder per step.
//!
//! The batch is varlen: prefill chunks and single-token decodes of many sequences share
//! one pass, each row at its own position, its K and V in the paged pool
//! ([`PagedKv`]) where its block table says. Every kernel computes a row the same way
//! whatever else is in the batch, so a sequence's logits are bitwise independent of it.
//!
//! Per layer: RMSNorm, q/k/v projections (+ bias for Qwen2), RoPE on q and k, the new k/v
//! rows written to their pool slots, causal GQA paged attention, the output projection and
//! a residual add; then RMSNorm, gate and up projections, SiLU-gate, the down projection
//! and a residual add. A final RMSNorm and the output projection (the embedding when tied)
//! give logits.
//!
//! Weights stay in their stored formats; only norm and bias vectors are f32.

use std::sync::Arc;

use crate::error::SproutError;
use crate::gpu::kernels::attention::{self, AttentionShape};
use crate::gpu::kernels::elementwise::{
    encode_add_bias, encode_gather_rows, encode_residual_add, encode_silu_gate,
};
use crate::gpu::kernels::rope::{self, RopeTable};
use crate::gpu::kernels::{embedding, kv_write, matmul, rmsnorm};
use crate::gpu::{Gpu, GpuWeight, Recorder, Tensor};
use crate::model::config::ModelConfig;
use crate::model::paged_kv::PagedKv;
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

/// One step's batch on the GPU: `t` token rows from any number of sequences, each row at
/// its own position with its own block table (a varlen batch of prefill chunks and
/// decodes), and the `r` rows whose logits are wanted.
pub struct BatchView<'a> {
    pub t: usize,
    /// `[t]` u32 token ids.
    pub ids: &'a Tensor,
    /// `[t]` u32 absolute positions.
    pub positions: &'a Tensor,
    /// `[t]` u32: the pool row each token's K and V are written to.
    pub slots: &'a Tensor,
    /// `[t, 2]` u32: (offset of the row's block table in `block_tables`, its position).
    pub rows: &'a Tensor,
    /// Every sequence's block table, concatenated.
    pub block_tables: &'a Tensor,
    pub r: usize,
    /// `[r]` u32: the rows whose logits the pass computes, in output order.
    pub logit_rows: &'a Tensor,
}

/// The buffers a forward pass writes, allocated once for up to `max_t` tokens and
/// `max_r` logit rows and reused by every step, so the step loop allocates nothing.
pub struct ForwardBuffers {
    pub max_t: usize,
    pub max_r: usize,
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
    /// `[max_r, hidden]`: the rows of `h` that logits are wanted for.
    picked: Tensor,
    normed: Tensor,
    /// `[max_r, vocab]`; a pass writes its first `r` rows.
    pub logits: Tensor,
}

impl ForwardBuffers {
    pub fn new(decoder: &Decoder, max_t: usize, max_r: usize) -> ForwardBuffers {
        let (gpu, c) = (&*decoder.gpu, &decoder.config);
        ForwardBuffers {
            max_t,
            max_r,
            h: gpu.zeros(max_t * c.hidden_size),
            xn: gpu.zeros(max_t * c.hidden_size),
            q: gpu.zeros(max_t * c.q_dim()),
            k: gpu.zeros(max_t * c.kv_dim()),
            v: gpu.zeros(max_t * c.kv_dim()),
            attn: gpu.zeros(max_t * c.q_dim()),
            proj: gpu.zeros(max_t * c.hidden_size),
            gate: gpu.zeros(max_t * c.intermediate_size),
            up: gpu.zeros(max_t * c.intermediate_size),
            act: gpu.zeros(max_t * c.intermediate_size),
            picked: gpu.zeros(max_r * c.hidden_size),
            normed: gpu.zeros(max_r * c.hidden_size),
            logits: gpu.zeros(max_r * c.vocab_size),
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

    /// Records the forward pass of `batch` into `encoder`: every token's K and V are
    /// written to its slot in `kv`, and the logits of `batch.logit_rows` to `a.logits`.
    /// Positions must be below the model's context; the runner checks that.
    pub fn encode_forward(
        &self,
        rec: &mut Recorder,
        batch: &BatchView,
        kv: &PagedKv,
        a: &ForwardBuffers,
    ) -> Result<(), SproutError> {
        let (c, t, r) = (&self.config, batch.t, batch.r);
        if t == 0 || t > a.max_t || r > a.max_r {
            return Err(SproutError::Shape(format!(
                "a batch of {t} tokens and {r} logit rows does not fit buffers for 1 to {} \
                 tokens and {} rows",
                a.max_t, a.max_r
            )));
        }
        let gpu = &*self.gpu;
        let (hidden, q_dim, kv_dim, inter) =
            (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size);
        let eps = c.rms_norm_eps;
        let shape = AttentionShape::new(t, c.n_heads, c.n_kv_heads, c.head_dim, kv.block_size);
        embedding::encode(gpu, rec, &self.embed, batch.ids, t, &a.h);
        for (l, layer) in self.layers.iter().enumerate() {
            rmsnorm::encode(gpu, rec, &a.h, &layer.attn_norm, eps, &a.xn, t, hidden);
            matmul::encode(gpu, rec, &a.xn, t, &layer.q, &a.q);
            matmul::encode(gpu, rec, &a.xn, t, &layer.k, &a.k);
            matmul::encode(gpu, rec, &a.xn, t, &layer.v, &a.v);
            if let Some([bq, bk, bv]) = &layer.qkv_bias {
                encode_add_bias(gpu, rec, &a.q, bq, t, q_dim);
                encode_add_bias(gpu, rec, &a.k, bk, t, kv_dim);
                encode_add_bias(gpu, rec, &a.v, bv, t, kv_dim);
            }
            let positions = batch.positions;
            let layout = c.rope_layout;
            rope::encode(gpu, rec, layout, &a.q, positions, &self.rope, t, c.n_heads);
            rope::encode(
                gpu,
                rec,
                layout,
                &a.k,
                positions,
                &self.rope,
                t,
                c.n_kv_heads,
            );
            let (k_pool, v_pool) = (&kv.k[l], &kv.v[l]);
            kv_write::encode(gpu, rec, &a.k, &a.v, batch.slots, t, kv_dim, k_pool, v_pool);
            attention::encode(
                gpu,
                rec,
                &shape,
                &a.q,
                k_pool,
                v_pool,
                batch.block_tables,
                batch.rows,
                &a.attn,
            );
            matmul::encode(gpu, rec, &a.attn, t, &layer.o, &a.proj);
            encode_residual_add(gpu, rec, &a.h, &a.proj, t * hidden);
            rmsnorm::encode(gpu, rec, &a.h, &layer.mlp_norm, eps, &a.xn, t, hidden);
            matmul::encode(gpu, rec, &a.xn, t, &layer.gate, &a.gate);
            matmul::encode(gpu, rec, &a.xn, t, &layer.up, &a.up);
            encode_silu_gate(gpu, rec, &a.gate, &a.up, &a.act, t * inter);
            matmul::encode(gpu, rec, &a.act, t, &layer.down, &a.proj);
            encode_residual_add(gpu, rec, &a.h, &a.proj, t * hidden);
        }
        if r == 0 {
            return Ok(());
        }
        // Only the rows that draw (or are scored) need the final norm and the vocabulary
        // projection, the largest matmul of the pass.
        encode_gather_rows(gpu, rec, &a.h, batch.logit_rows, r, hidden, &a.picked);
        let norm = &self.final_norm;
        rmsnorm::encode(gpu, rec, &a.picked, norm, eps, &a.normed, r, hidden);
        matmul::encode(gpu, rec, &a.normed, r, self.lm_head(), &a.logits);
        Ok(())
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
            for w in [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down] {
                add(w);
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        let names: Vec<String> = counts.into_iter().map(|(n, _)| n).collect();
        names.join("+")
    }

    /// The model's context length (positions `0 .. max_positions`).
    pub fn max_positions(&self) -> usize {
        self.rope.max_positions
    }
}

/// Whether `Decoder::load` can run a model of this shape, checked before anything is
/// uploaded: a caller replacing a loaded model can keep the old one when this fails.
pub fn check_supported(c: &ModelConfig) -> Result<(), SproutError> {
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
