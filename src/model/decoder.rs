//! The decoder forward pass on the GPU: a Llama-family transformer (Llama, SmolLM,
//! Mistral, Qwen2, Qwen3, SmolLM3, Gemma 3) recorded into one compute pass per step.
//!
//! The batch is varlen: prefill chunks and single-token decodes of many sequences share
//! one pass, each row at its own position, its K and V in the paged pool
//! ([`KvPools`], owned by the engine) where its block table says. Every kernel computes a row the same way
//! whatever else is in the batch, and whichever kernel variant the adapter's choices pick
//! (`gpu::tuning`), so a sequence's logits are bitwise independent of both.
//!
//! Five dispatches per layer (six where attention is split across workgroups):
//! 1. RMSNorm, the q|k|v projection (+ bias for Qwen2), RoPE on q and k, and the new k and
//!    v rows written to their pool slots: one fused matmul (Qwen3: the matmul stores the
//!    projection and `head_norm_rope` norms each q and k head, rotates and writes them;
//!    `model::qwen3`);
//! 2. causal GQA paged attention (and, when split, the fold of its pages), through the
//!    layer's sliding window if it has one (Gemma 3);
//! 3. the output projection with the residual add (Gemma 3: the projection stored, then
//!    `norm_add` adds its RMSNorm to the residual stream);
//! 4. RMSNorm, the gate and up projections and SiLU-gate (Gemma 3: GELU-gate): one fused
//!    matmul;
//! 5. the down projection with the residual add (Gemma 3: stored, then `norm_add`).
//!
//! Then the final RMSNorm of the rows whose logits are wanted and the output projection
//! (the embedding when tied): one fused matmul per chunk of logits rows (`Logits`: each
//! chunk fits one storage binding, so a vocabulary of 262,144 never caps how many rows a
//! step may have). A row's logits do not depend on the chunk that holds it.
//!
//! Weights stay in their stored formats, laid out at load for the fused kernels
//! (`model::fused_weights`): q, k and v stacked, with q and k rows in RoPE's adjacent-pair
//! order; gate and up interleaved. Norm and bias vectors are f32. RoPE's table holds the
//! model's frequencies, scaled as its config says (`model::rope_scaling`); a layer without
//! RoPE (SmolLM3's, `model::smollm3`) reads a table of angle 0, which rotates nothing, and
//! a sliding-window layer (Gemma 3's, `model::gemma3`) a table of its own base. The
//! embedding rows are scaled as the config says (Gemma 3: by sqrt(hidden)).

use std::sync::{Arc, RwLock};

use crate::error::SproutError;
use crate::gpu::kernels::attention::{
    self, AttentionBuffers, AttentionShape, AttentionVariant, AttentionWork, MAX_SLOTS_PER_ROW,
    scratch_per_slot,
};
use crate::gpu::kernels::embedding;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::kernels::matmul::{
    self, AttentionFold, Gather, LoraArgs, Matmul, NormArgs, Output, QkvArgs, QkvBias,
};
use crate::gpu::kernels::norm_add::{self, NormAdd, NormOutput};
use crate::gpu::kernels::rope::{RopeTable, frequencies};
use crate::gpu::tuning::{KernelChoices, MatmulKey, MatmulSite};
use crate::gpu::{Gpu, Recorder, Tensor};
use crate::model::config::{Activation, ModelConfig};
use crate::model::decoder_weights::{Checks, DecoderWeights};
use crate::model::lora::device::{DeviceLayer, DeviceLora, DeviceSite};
use crate::model::qwen3;
use crate::model::source::WeightSource;
use crate::model::weight_residency::{self, HeldWeights, Residency};

/// Where a layer's vectors start in its `vectors` buffer.
#[derive(Clone, Copy)]
struct VectorOffsets {
    attn_norm: usize,
    /// `None` without biases.
    qkv_bias: Option<usize>,
    mlp_norm: usize,
    /// The q norm's weights, then the k norm's; `None` without them.
    qk_norm: Option<usize>,
    /// The post-attention norm's weights, then the post-MLP norm's; `None` without them.
    post_norms: Option<usize>,
}

impl VectorOffsets {
    fn of(c: &ModelConfig) -> VectorOffsets {
        let bias_len = c.q_dim() + 2 * c.kv_dim();
        let qkv_bias = c.has_qkv_bias().then_some(c.hidden_size);
        let mlp_norm = c.hidden_size + qkv_bias.map_or(0, |_| bias_len);
        let qk_norm = c.has_qk_norm().then_some(mlp_norm + c.hidden_size);
        let after_qk = mlp_norm + c.hidden_size + qk_norm.map_or(0, |_| 2 * c.head_dim);
        VectorOffsets {
            attn_norm: 0,
            qkv_bias,
            mlp_norm,
            qk_norm,
            post_norms: c.has_post_norms().then_some(after_qk),
        }
    }
}

/// A model's weights on the GPU and the forward pass over them.
pub struct Decoder {
    pub gpu: Arc<Gpu>,
    pub config: ModelConfig,
    /// Replaced whole by an update; a step takes the ones in force when it is recorded.
    /// While the engine sleeps they may be in host memory, or gone (`weight_residency`).
    weights: RwLock<HeldWeights>,
    /// The stored formats of the weights in force ([`DecoderWeights::weight_format`]),
    /// kept for records while they sleep.
    weight_format: RwLock<String>,
    offsets: VectorOffsets,
    rope: RopeTable,
    /// For the layers without RoPE (`config.layers_without_rope`, SmolLM3): cos 1, sin 0.
    no_rope: Option<RopeTable>,
    /// For the sliding-window layers (Gemma 3): their own RoPE base, unscaled.
    local_rope: Option<RopeTable>,
    /// Which kernel variant serves each dispatch (`gpu::tuning`): the adapter's defaults
    /// until a tune file's are set.
    choices: RwLock<KernelChoices>,
    /// The LoRA adapter rows marked for it run with (`model::lora`), if one is set. It
    /// stays on the device while the weights sleep (it is small).
    adapter: RwLock<Option<Arc<DeviceLora>>>,
}

/// The paged K and V memory a forward pass writes and reads: one buffer of
/// `[blocks * block_size, kv_dim]` f32 rows per layer for each. The engine owns it
/// (`engine::paged_kv`); a pass only borrows it.
#[derive(Clone, Copy)]
pub struct KvPools<'a> {
    pub k: &'a [Tensor],
    pub v: &'a [Tensor],
    pub block_size: usize,
}

/// One step's batch on the GPU: `t` token rows from any number of sequences, each row at
/// its own position with its own block table (a varlen batch of prefill chunks and
/// decodes), and the `r` rows whose logits are wanted.
pub struct BatchView<'a> {
    pub t: usize,
    /// `[t]` u32 token ids; `DRAWN | d` (`gpu::kernels::embedding::DRAWN`) is `drawn[d]`.
    pub ids: &'a Tensor,
    /// The tokens the step before drew, still on the GPU.
    pub drawn: &'a Tensor,
    /// `[t]` [`RowInfo`](crate::gpu::kernels::RowInfo): each row's block-table offset,
    /// position and pool slot.
    pub rowinfo: &'a Tensor,
    /// Every sequence's block table, concatenated.
    pub block_tables: &'a Tensor,
    pub attention: AttentionWork<'a>,
    pub r: usize,
    /// `[r]` u32: the rows whose logits the pass computes, in output order.
    pub logit_rows: &'a Tensor,
    /// Some row runs with the LoRA adapter (`RowInfo::adapter`): the pass adds the
    /// adapter's dispatches; without one it records exactly the base model's.
    pub lora: bool,
}

/// The buffers a forward pass writes, allocated once for up to `max_t` tokens and
/// `max_r` logit rows (and split attention rows) and reused by every step, so the step
/// loop allocates nothing.
pub struct ForwardBuffers {
    pub max_t: usize,
    pub max_r: usize,
    /// The residual stream `[max_t, hidden]`.
    h: Tensor,
    q: Tensor,
    /// `[max_t, q_dim + 2 kv_dim]`: the stored q|k|v projection, for models whose q and k
    /// heads are normalised before RoPE (`None` for the others).
    qkv: Option<Tensor>,
    /// `[max_t, hidden]`: the attention or MLP output before its post norm (Gemma 3;
    /// `None` for the others).
    branch: Option<Tensor>,
    attn: Tensor,
    act: Tensor,
    /// Split attention rows' states: `MAX_SLOTS_PER_ROW` per row for `max_r` rows.
    scratch: Tensor,
    /// `[max_r, vocab]` in chunks that each fit a binding; a pass writes its first `r` rows.
    pub logits: Logits,
    /// `[max_t, width]`: a LoRA site's `A x` for every row (`None` until an adapter needs
    /// it; [`ForwardBuffers::fit_lora`]).
    lora_t: Option<Tensor>,
    /// `[max_t, hidden]`: a normed LoRA site's input after its RMSNorm (allocated with
    /// `lora_t`).
    lora_normed: Option<Tensor>,
}

impl ForwardBuffers {
    pub fn new(decoder: &Decoder, max_t: usize, max_r: usize) -> ForwardBuffers {
        let (gpu, c) = (&*decoder.gpu, &decoder.config);
        ForwardBuffers {
            max_t,
            max_r,
            h: gpu.zeros(max_t * c.hidden_size),
            q: gpu.zeros(max_t * c.q_dim()),
            qkv: c
                .has_qk_norm()
                .then(|| gpu.zeros(max_t * (c.q_dim() + 2 * c.kv_dim()))),
            branch: c.has_post_norms().then(|| gpu.zeros(max_t * c.hidden_size)),
            attn: gpu.zeros(max_t * c.q_dim()),
            act: gpu.zeros(max_t * c.intermediate_size),
            scratch: gpu.zeros(Self::max_slots(max_r) * decoder.scratch_per_slot()),
            logits: Logits::zeros(gpu, max_r, c.vocab_size),
            lora_t: decoder
                .adapter()
                .map(|a| gpu.zeros(max_t * a.max_site_rank.max(1))),
            lora_normed: decoder.adapter().map(|_| gpu.zeros(max_t * c.hidden_size)),
        }
    }

    /// Makes the LoRA scratch wide enough for `decoder`'s adapter (nothing to do without
    /// one, or when it already is).
    pub fn fit_lora(&mut self, decoder: &Decoder) {
        let Some(adapter) = decoder.adapter() else {
            return;
        };
        let need = self.max_t * adapter.max_site_rank.max(1);
        if self.lora_t.as_ref().is_none_or(|t| t.len < need) {
            self.lora_t = Some(decoder.gpu.zeros(need));
        }
        if self.lora_normed.is_none() {
            let width = self.max_t * decoder.config.hidden_size;
            self.lora_normed = Some(decoder.gpu.zeros(width));
        }
    }

    /// Bytes these buffers take on the device.
    pub fn device_bytes(&self) -> u64 {
        let tensors = [&self.h, &self.q, &self.attn, &self.act, &self.scratch];
        let optional = [
            self.qkv.as_ref(),
            self.branch.as_ref(),
            self.lora_t.as_ref(),
            self.lora_normed.as_ref(),
        ];
        let chunks = self.logits.chunks.iter();
        let all = tensors
            .into_iter()
            .chain(optional.into_iter().flatten())
            .chain(chunks);
        all.map(|t| t.buffer.size()).sum()
    }

    /// The most scratch slots a step may use (`max_r` split rows).
    pub fn max_slots(max_r: usize) -> usize {
        max_r * MAX_SLOTS_PER_ROW as usize
    }
}

/// What a pass whose rows run the adapter works with: the adapter and its scratch.
struct LoraPass<'a> {
    adapter: Arc<DeviceLora>,
    /// `[t, max_site_rank]`: a site's `A x`.
    t: &'a Tensor,
    /// `[t, hidden]`: a normed site's input after its RMSNorm.
    normed: &'a Tensor,
}

impl Decoder {
    /// Uploads every tensor of `source`, one layer at a time (never the whole model on the
    /// CPU). `progress(done, total)` is called after each tensor.
    // On the web, wgpu's handles are not Send: one thread owns the GPU there anyway.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub fn load(
        gpu: Arc<Gpu>,
        source: &mut dyn WeightSource,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Decoder, SproutError> {
        let config = source.config().clone();
        check_supported(&config)?;
        Logits::check_row_fits(&gpu, config.vocab_size)?;
        // Before any weight: a context too long for the adapter fails at once.
        let rope =
            RopeTable::with_frequencies(&gpu, &config.rope_frequencies(), config.max_positions)?;
        let no_rope = match config.layers_without_rope.is_empty() {
            true => None,
            false => Some(RopeTable::with_frequencies(
                &gpu,
                &vec![0.0; config.head_dim / 2],
                config.max_positions,
            )?),
        };
        let local_rope = match &config.sliding_window {
            None => None,
            Some(w) => Some(RopeTable::with_frequencies(
                &gpu,
                &frequencies(config.head_dim, w.rope_theta),
                config.max_positions,
            )?),
        };
        let weights = DecoderWeights::load(&gpu, source, &config, Checks::Shapes, progress)?;
        let choices = RwLock::new(KernelChoices::defaults(gpu.cpu_shaped_defaults()));
        Ok(Decoder {
            gpu,
            choices,
            offsets: VectorOffsets::of(&config),
            config,
            weight_format: RwLock::new(weights.weight_format()),
            weights: RwLock::new(HeldWeights::Device(Arc::new(weights))),
            rope,
            no_rope,
            local_rope,
            adapter: RwLock::new(None),
        })
    }

    /// Puts `adapter` in force from the next recorded step on (`None`: none). A step
    /// recorded before keeps the buffers it recorded. The adapter's rank must fit the
    /// step buffers' LoRA scratch ([`ForwardBuffers::fit_lora`]).
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub fn set_adapter(&self, adapter: Option<DeviceLora>) {
        *self.adapter.write().unwrap_or_else(|e| e.into_inner()) = adapter.map(Arc::new);
        // Bind groups over the old buffers would keep them alive.
        self.gpu.forget_bind_groups();
    }

    /// The LoRA adapter in force.
    pub fn adapter(&self) -> Option<Arc<DeviceLora>> {
        self.adapter
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether a LoRA adapter is in force.
    pub fn has_adapter(&self) -> bool {
        self.adapter
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The weights in force (an update may replace them between steps); an error while
    /// they sleep ([`Decoder::residency`]).
    pub fn weights(&self) -> Result<Arc<DecoderWeights>, SproutError> {
        match &*self.weights.read().unwrap_or_else(|e| e.into_inner()) {
            HeldWeights::Device(w) => Ok(w.clone()),
            HeldWeights::Host(_) => Err(SproutError::Asleep(
                "the model's weights are asleep in host memory: wake them first".into(),
            )),
            HeldWeights::Discarded => Err(SproutError::Asleep(
                "the model's weights were discarded (sleep level 2): load new ones first".into(),
            )),
        }
    }

    /// Where the weights are.
    pub fn residency(&self) -> Residency {
        self.weights
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .residency()
    }

    /// Copies the weights to host memory and frees their device buffers (sleep level 1);
    /// nothing to do unless they are on the device. No step may be in flight.
    pub async fn offload_weights(&self) -> Result<(), SproutError> {
        let weights = match &*self.weights.read().unwrap_or_else(|e| e.into_inner()) {
            HeldWeights::Device(w) => w.clone(),
            _ => return Ok(()),
        };
        let host = weight_residency::offload(&self.gpu, weights).await?;
        *self.weights.write().unwrap_or_else(|e| e.into_inner()) = HeldWeights::Host(host);
        Ok(())
    }

    /// Forgets the weights, wherever they are (sleep level 2): the model runs again once
    /// [`Decoder::replace_weights`] gives it new ones. No step may be in flight.
    pub fn discard_weights(&self) {
        let mut held = self.weights.write().unwrap_or_else(|e| e.into_inner());
        if let HeldWeights::Device(w) = &*held {
            self.gpu.forget_bind_groups();
            for buffer in w.buffers() {
                buffer.destroy();
            }
        }
        *held = HeldWeights::Discarded;
    }

    /// Puts weights kept in host memory back on the device; nothing to do when they are
    /// there, and an error when they were discarded.
    /// A device that cannot allocate them (a trainer still holding its memory) is an
    /// error, and they stay in host memory.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub async fn restore_weights(&self) -> Result<(), SproutError> {
        let residency = self.residency();
        match residency {
            Residency::Device => Ok(()),
            Residency::Host => {
                let restore = || match &*self.weights.read().unwrap_or_else(|e| e.into_inner()) {
                    HeldWeights::Host(host) => weight_residency::restore(&self.gpu, host),
                    _ => unreachable!("the weights were in host memory a moment ago"),
                };
                let weights = self.gpu.allocating("the weights", restore).await?;
                *self.weights.write().unwrap_or_else(|e| e.into_inner()) =
                    HeldWeights::Device(Arc::new(weights));
                Ok(())
            }
            Residency::Discarded => Err(SproutError::Asleep(
                "the model's weights were discarded (sleep level 2): load new ones with an \
                 update instead of waking them"
                    .into(),
            )),
        }
    }

    /// Bytes the decoder holds on the device: its weights (while there), its LoRA
    /// adapter and its RoPE tables.
    pub fn device_bytes(&self) -> u64 {
        let weights = match &*self.weights.read().unwrap_or_else(|e| e.into_inner()) {
            HeldWeights::Device(w) => w.device_bytes(),
            _ => 0,
        };
        let adapter = self.adapter().map_or(0, |a| a.device_bytes());
        let tables = [
            Some(&self.rope),
            self.no_rope.as_ref(),
            self.local_rope.as_ref(),
        ];
        let tables: u64 = tables
            .iter()
            .flatten()
            .map(|t| t.values.buffer.size())
            .sum();
        weights + adapter + tables
    }

    /// Bytes of weights kept in host memory while the device's are freed.
    pub fn host_bytes(&self) -> u64 {
        match &*self.weights.read().unwrap_or_else(|e| e.into_inner()) {
            HeldWeights::Host(host) => host.host_bytes(),
            _ => 0,
        }
    }

    /// Loads `source` as new weights for this decoder, on the GPU beside the ones in
    /// force (which keep serving meanwhile). Every tensor must be there, no other, each of
    /// this model's shape and with finite values; `source`'s config must match this one's.
    pub fn load_update(
        &self,
        source: &mut dyn WeightSource,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<DecoderWeights, SproutError> {
        DecoderWeights::load_update(&self.gpu, source, &self.config, progress)
    }

    /// Puts `weights` in force from the next recorded step on. A step recorded before
    /// keeps the buffers it recorded (wgpu holds them until it has run).
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub fn replace_weights(&self, weights: DecoderWeights) {
        *self
            .weight_format
            .write()
            .unwrap_or_else(|e| e.into_inner()) = weights.weight_format();
        *self.weights.write().unwrap_or_else(|e| e.into_inner()) =
            HeldWeights::Device(Arc::new(weights));
        // Bind groups over the old buffers would keep them alive.
        self.gpu.forget_bind_groups();
    }

    /// Puts `choices` in force (a tune file's, say). Every choice computes the same
    /// results, so this changes speed only.
    pub fn set_choices(&self, choices: KernelChoices) {
        *self.choices.write().unwrap_or_else(|p| p.into_inner()) = choices;
    }

    /// The tune file whose choices are in force, if any.
    pub fn tuned_from(&self) -> Option<String> {
        let choices = self.choices.read().unwrap_or_else(|p| p.into_inner());
        choices.source.clone()
    }

    /// The attention variant for a step of `rows` query rows.
    pub fn attention_variant(&self, rows: usize) -> AttentionVariant {
        let c = &self.config;
        let choices = self.choices.read().unwrap_or_else(|p| p.into_inner());
        choices.attention(c.head_dim, c.n_heads / c.n_kv_heads, rows)
    }

    /// The attention shape of a dispatch of `t` rows over blocks of `block_size`.
    pub fn attention_shape(&self, t: usize, block_size: usize) -> AttentionShape {
        let c = &self.config;
        AttentionShape {
            scale: c.attention_scale(),
            ..AttentionShape::new(t, c.n_heads, c.n_kv_heads, c.head_dim, block_size)
        }
    }

    /// Values of attention scratch per split slot.
    pub fn scratch_per_slot(&self) -> usize {
        scratch_per_slot(&self.attention_shape(1, 1))
    }

    /// Records one fused matmul with the shape chosen for its site and row count.
    fn matmul(&self, rec: &mut Recorder, site: MatmulSite, op: Matmul) {
        let key = MatmulKey {
            site,
            format: op.weight.format,
            n: op.weight.rows,
            k: op.weight.cols,
        };
        let shape = self
            .choices
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .matmul_shape(&self.gpu.caps, key, op.m);
        matmul::encode(&self.gpu, rec, &op, shape);
    }

    /// Records the forward pass of `batch`: every token's K and V are written to its slot
    /// in `kv`, and the logits of `batch.logit_rows` to `a.logits`. Positions must be below
    /// the model's context; the runner checks that.
    pub fn encode_forward(
        &self,
        rec: &mut Recorder,
        batch: &BatchView,
        kv: KvPools<'_>,
        a: &ForwardBuffers,
    ) -> Result<(), SproutError> {
        let (c, t, r) = (&self.config, batch.t, batch.r);
        let work = &batch.attention;
        if t == 0 || t > a.max_t || r > a.max_r || work.slots > ForwardBuffers::max_slots(a.max_r) {
            return Err(SproutError::Shape(format!(
                "a batch of {t} tokens, {r} logit rows and {} attention slots does not fit \
                 buffers for 1 to {} tokens, {} rows and {} slots",
                work.slots,
                a.max_t,
                a.max_r,
                ForwardBuffers::max_slots(a.max_r)
            )));
        }
        let gpu = &*self.gpu;
        let eps = c.rms_norm_eps;
        let shape = self.attention_shape(t, kv.block_size);
        let q_loads = self.attention_variant(t).q_loads_for(&shape);
        let offsets = self.offsets;
        let w = self.weights()?;
        let lora = self.lora_of(batch, a)?;
        let scale = c.embedding_scale();
        embedding::encode(gpu, rec, &w.embed, batch.ids, batch.drawn, t, &a.h, scale);
        for (l, layer) in w.layers.iter().enumerate() {
            let (k_pool, v_pool) = (&kv.k[l], &kv.v[l]);
            let norm = |offset| {
                Some(NormArgs {
                    vectors: &layer.vectors,
                    offset,
                    eps,
                })
            };
            // The layer's LoRA sites, when the batch runs the adapter: each site's `A x`
            // is recorded just before its base projection, which adds `B (A x)`.
            let sites = lora.as_ref().map(|pass| &pass.adapter.layers[l]);
            let site_term =
                |this: &Self,
                 rec: &mut Recorder,
                 site,
                 x,
                 norm,
                 pick: fn(&DeviceLayer) -> Option<&DeviceSite>| {
                    let (s, scratch) = (sites.and_then(pick)?, lora.as_ref()?.t);
                    this.lora_a(rec, site, s, x, t, norm, scratch, batch.rowinfo)
                };
            // What a site behind an RMSNorm (q|k|v, gate|up) reads: with the site's adapter,
            // the norm runs once into the pass's scratch and its A product and base
            // projection read that plainly (the values the fused prologue would compute:
            // norm_add's invariant), which costs less than each normalising x itself; the
            // base model's projections keep the fused norm.
            let site_input = |rec: &mut Recorder, offset, has_site: bool| match &lora {
                Some(pass) if has_site => {
                    let op = NormAdd {
                        x: &a.h,
                        m: t,
                        width: c.hidden_size,
                        vectors: &layer.vectors,
                        offset,
                        eps,
                        out: pass.normed,
                        output: NormOutput::Store,
                    };
                    norm_add::encode(gpu, rec, &op);
                    (pass.normed, None)
                }
                _ => (&a.h, norm(offset)),
            };
            let qkv = QkvArgs {
                bias: offsets.qkv_bias.map(|offset| QkvBias {
                    vectors: &layer.vectors,
                    offset,
                }),
                q_dim: c.q_dim(),
                kv_dim: c.kv_dim(),
                head_dim: c.head_dim,
                rope: self.rope_of(l),
                rowinfo: batch.rowinfo,
                q: &a.q,
                k_pool,
                v_pool,
            };
            let has_qkv = sites.is_some_and(|s| s.qkv.is_some());
            let (qkv_x, qkv_norm) = site_input(rec, offsets.attn_norm, has_qkv);
            let qkv_lora = site_term(self, rec, MatmulSite::Qkv, qkv_x, qkv_norm, |l| {
                l.qkv.as_ref()
            });
            let projection = |output| Matmul {
                x: qkv_x,
                m: t,
                weight: &layer.qkv,
                norm: qkv_norm,
                gather: None,
                fold: None,
                output,
                lora: qkv_lora,
            };
            match (&a.qkv, offsets.qk_norm) {
                (Some(stored), Some(norms)) => {
                    self.matmul(rec, MatmulSite::Qkv, projection(Output::Store(stored)));
                    let vectors = (&layer.vectors, norms, eps);
                    qwen3::encode_head_norms(gpu, rec, (stored, t), &qkv, vectors);
                }
                _ => self.matmul(rec, MatmulSite::Qkv, projection(Output::Qkv(qkv))),
            }
            let buffers = AttentionBuffers {
                q: &a.q,
                k_pool,
                v_pool,
                block_tables: batch.block_tables,
                rowinfo: batch.rowinfo,
                out: &a.attn,
                scratch: &a.scratch,
            };
            let layer_shape = AttentionShape {
                window: c.window_of(l).map(|w| u32::try_from(w).unwrap_or(u32::MAX)),
                ..shape
            };
            // The o-projection folds the split rows' states as it reads them, which saves
            // the combine dispatch; with an adapter at o its A product reads the output
            // too, so the combine step writes it whole first.
            let fold_in_o = work.n_combine > 0 && sites.is_none_or(|s| s.o.is_none());
            if fold_in_o {
                attention::encode_unfolded(gpu, rec, &layer_shape, q_loads, &buffers, work);
            } else {
                attention::encode(gpu, rec, &layer_shape, q_loads, &buffers, work);
            }
            let o_fold = fold_in_o.then_some(AttentionFold {
                states: &a.scratch,
                row_slots: work.row_slots,
                head_dim: c.head_dim,
            });
            let plain = |x, weight, output, lora, fold| Matmul {
                x,
                m: t,
                weight,
                norm: None,
                gather: None,
                fold,
                output,
                lora,
            };
            // Adds a branch's output (with its LoRA term) to the residual stream: directly,
            // or through the branch's post norm (the `which`-th after `post_norms`).
            let add =
                |this: &Self, rec: &mut Recorder, site, (x, fold), weight, which: usize, lora| {
                    match (&a.branch, offsets.post_norms) {
                        (Some(branch), Some(post)) => {
                            let output = Output::Store(branch);
                            this.matmul(rec, site, plain(x, weight, output, lora, fold));
                            let op = NormAdd {
                                x: branch,
                                m: t,
                                width: c.hidden_size,
                                vectors: &layer.vectors,
                                offset: post + which * c.hidden_size,
                                eps,
                                out: &a.h,
                                output: NormOutput::Add,
                            };
                            norm_add::encode(gpu, rec, &op);
                        }
                        _ => {
                            let output = Output::Residual(&a.h);
                            this.matmul(rec, site, plain(x, weight, output, lora, fold))
                        }
                    }
                };
            let o_lora = site_term(self, rec, MatmulSite::AttnOut, &a.attn, None, |l| {
                l.o.as_ref()
            });
            let o_x = (&a.attn, o_fold);
            add(self, rec, MatmulSite::AttnOut, o_x, &layer.o, 0, o_lora);
            let has_gate_up = sites.is_some_and(|s| s.gate_up.is_some());
            let (gate_up_x, gate_up_norm) = site_input(rec, offsets.mlp_norm, has_gate_up);
            let gate_up_lora = site_term(
                self,
                rec,
                MatmulSite::GateUp,
                gate_up_x,
                gate_up_norm,
                |l| l.gate_up.as_ref(),
            );
            self.matmul(
                rec,
                MatmulSite::GateUp,
                Matmul {
                    x: gate_up_x,
                    m: t,
                    weight: &layer.gate_up,
                    norm: gate_up_norm,
                    gather: None,
                    fold: None,
                    output: match c.activation() {
                        Activation::Silu => Output::SiluGate(&a.act),
                        Activation::GeluTanh => Output::GeluGate(&a.act),
                    },
                    lora: gate_up_lora,
                },
            );
            let down_lora = site_term(self, rec, MatmulSite::Down, &a.act, None, |l| {
                l.down.as_ref()
            });
            add(
                self,
                rec,
                MatmulSite::Down,
                (&a.act, None),
                &layer.down,
                1,
                down_lora,
            );
        }
        if r == 0 {
            return Ok(());
        }
        // Only the rows that draw (or are scored) need the final norm and the vocabulary
        // projection, the largest matmul of the pass: one dispatch per chunk of logits.
        for chunk in a.logits.chunks(r) {
            self.matmul(
                rec,
                MatmulSite::LmHead,
                Matmul {
                    x: &a.h,
                    m: chunk.rows,
                    weight: w.lm_head(),
                    norm: Some(NormArgs {
                        vectors: &w.final_norm,
                        offset: 0,
                        eps,
                    }),
                    gather: Some(Gather {
                        index: batch.logit_rows,
                        first: chunk.first_row,
                    }),
                    fold: None,
                    output: Output::Store(chunk.tensor),
                    lora: None,
                },
            );
        }
        Ok(())
    }

    /// The adapter and scratch a pass over `batch` runs with: `None` when no row runs with
    /// the adapter (the pass is then exactly the base model's), an error when one does and
    /// no adapter is set or the scratch is too narrow for it.
    fn lora_of<'a>(
        &self,
        batch: &BatchView,
        a: &'a ForwardBuffers,
    ) -> Result<Option<LoraPass<'a>>, SproutError> {
        if !batch.lora {
            return Ok(None);
        }
        let Some(adapter) = self.adapter() else {
            return Err(SproutError::Model(
                "a row runs with the LoRA adapter, and none is set".into(),
            ));
        };
        let need = batch.t * adapter.max_site_rank;
        match (&a.lora_t, &a.lora_normed) {
            (Some(t), Some(normed))
                if t.len >= need && normed.len >= batch.t * self.config.hidden_size =>
            {
                Ok(Some(LoraPass { adapter, t, normed }))
            }
            _ => Err(SproutError::Shape(format!(
                "the step buffers' LoRA scratch is narrower than {need} values                  (ForwardBuffers::fit_lora makes room for the adapter)"
            ))),
        }
    }

    /// Records a LoRA site's `A x` for every row into `scratch` (`x` read through `norm`
    /// as the site's base projection reads it) and returns the term the base projection
    /// adds: `B (A x)` for the rows run with the adapter.
    #[allow(clippy::too_many_arguments)]
    fn lora_a<'a>(
        &self,
        rec: &mut Recorder,
        site: MatmulSite,
        s: &'a DeviceSite,
        x: &Tensor,
        m: usize,
        norm: Option<NormArgs>,
        scratch: &'a Tensor,
        rowinfo: &'a Tensor,
    ) -> Option<LoraArgs<'a>> {
        let a_x = Matmul {
            x,
            m,
            weight: &s.a,
            norm,
            gather: None,
            fold: None,
            output: Output::Store(scratch),
            lora: None,
        };
        self.matmul(rec, site, a_x);
        Some(LoraArgs {
            t: scratch,
            b: &s.b,
            rank: s.rank,
            rowinfo,
        })
    }

    /// The stored formats of the weight matrices in force (see
    /// [`DecoderWeights::weight_format`]).
    pub fn weight_format(&self) -> String {
        self.weight_format
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The RoPE table layer `l` rotates q and k by.
    fn rope_of(&self, l: usize) -> &RopeTable {
        match (&self.no_rope, &self.local_rope) {
            (Some(none), _) if self.config.layers_without_rope.contains(&l) => none,
            (_, Some(local)) if self.config.window_of(l).is_some() => local,
            _ => &self.rope,
        }
    }

    /// The model's context length (positions `0 .. max_positions`).
    pub fn max_positions(&self) -> usize {
        self.rope.max_positions
    }
}

/// Whether `Decoder::load` can run a model of this shape, checked before anything is
/// uploaded: a caller replacing a loaded model can keep the old one when this fails.
pub fn check_supported(c: &ModelConfig) -> Result<(), SproutError> {
    c.validate()?;
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
