//! Causal attention with grouped-query heads over a contiguous KV cache
//! (shaders/attention.wgsl).
//!
//! Owns one dispatch, `out[i, h] = Σ_j softmax_j(scale · q[i, h] · k[j, g]) · v[j, g]` with
//! kv head `g = h / (n_heads / n_kv_heads)`, for the `t` query rows of one sequence at
//! absolute positions `pos0 .. pos0 + t`, where row `i` attends keys `0 ..= pos0 + i`.
//! `q` and `out` are `[t, n_heads, head_dim]`; `k` and `v` are `[s_cap, n_kv_heads,
//! head_dim]` with rows `0 .. pos0 + t` already written (the new tokens' keys and values
//! included). Rows past `pos0 + t` are never read.
//! `head_dim` is a multiple of 4 (the kernel reads vec4s) and at most `MAX_HEAD_DIM`;
//! `scale` is positive.
//!
//! Invariant: a row's output is bitwise the same whatever `t` and `pos0` split put it in a
//! dispatch (decoded alone or inside any prefill chunk). One workgroup per (head, row) takes
//! keys in fixed chunks of 64 from key 0 with an online softmax whose order of operations
//! depends only on `head_dim` and the row's own key count (DESIGN.md, principle 1; the
//! shader's header spells out the order).
//!
//! Paged KV (block tables) and varlen batches will change where a key's row lives and where
//! a query row's position comes from (`kv_base` and `n_keys` in the shader), not the
//! reduction.

use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/attention.wgsl");
/// Largest `head_dim` the kernel handles: one vec4 of output per invocation (`4 * WG`).
pub const MAX_HEAD_DIM: usize = 256;

/// The sizes of one attention dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Query rows (tokens of one sequence) in this dispatch.
    pub t: usize,
    /// Absolute position of the first query row; row `i` sees `pos0 + i + 1` keys.
    pub pos0: usize,
    pub n_heads: usize,
    /// Key/value heads; must divide `n_heads`.
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies `q · k`; positive, normally `1 / sqrt(head_dim)`.
    pub scale: f32,
}

impl AttentionShape {
    /// The usual shape, with `scale = 1 / sqrt(head_dim)`.
    pub fn new(t: usize, pos0: usize, n_heads: usize, n_kv_heads: usize, head_dim: usize) -> Self {
        AttentionShape {
            t,
            pos0,
            n_heads,
            n_kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
        }
    }

    /// Query heads per kv head.
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Values in `q` and in `out`: `t * n_heads * head_dim`.
    pub fn q_len(&self) -> usize {
        self.t * self.n_heads * self.head_dim
    }

    /// Values of `k` (and of `v`) that the dispatch reads: `(pos0 + t) * n_kv_heads * head_dim`.
    pub fn kv_len(&self) -> usize {
        (self.pos0 + self.t) * self.n_kv_heads * self.head_dim
    }

    /// Panics, naming the problem, when the shape is not one the kernel supports.
    pub fn validate(&self) {
        assert!(self.n_heads > 0, "attention: n_heads is 0");
        assert!(self.n_kv_heads > 0, "attention: n_kv_heads is 0");
        assert!(
            self.n_heads.is_multiple_of(self.n_kv_heads),
            "attention: n_heads {} is not a multiple of n_kv_heads {}",
            self.n_heads,
            self.n_kv_heads
        );
        assert!(
            (1..=MAX_HEAD_DIM).contains(&self.head_dim) && self.head_dim.is_multiple_of(4),
            "attention: head_dim {} is not a multiple of 4 in 4..={MAX_HEAD_DIM}",
            self.head_dim
        );
        assert!(
            self.scale.is_finite() && self.scale > 0.0,
            "attention: scale {} is not finite and positive",
            self.scale
        );
        assert!(
            u32::try_from(self.kv_len()).is_ok() && u32::try_from(self.q_len()).is_ok(),
            "attention: {self:?} indexes past u32"
        );
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    t: u32,
    pos0: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    group: u32,
    scale: f32,
    _pad: u32,
}

pub fn spec() -> KernelSpec {
    KernelSpec {
        key: "attention/causal_contiguous".into(),
        source: SOURCE.into(),
        entry: "attention",
        storage: &[Access::Read, Access::Read, Access::Read, Access::ReadWrite],
    }
}

/// Records causal attention for `shape.t` query rows of one sequence into `encoder`.
pub fn encode(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    shape: &AttentionShape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
) {
    shape.validate();
    let (q_len, kv_len) = (shape.q_len(), shape.kv_len());
    assert!(
        q.len >= q_len,
        "attention: q holds {} values, {shape:?} needs {q_len}",
        q.len
    );
    assert!(
        out.len >= q_len,
        "attention: out holds {} values, {shape:?} needs {q_len}",
        out.len
    );
    assert!(
        k.len >= kv_len,
        "attention: k holds {} values, {shape:?} reads {kv_len} (rows 0..{})",
        k.len,
        shape.pos0 + shape.t
    );
    assert!(
        v.len >= kv_len,
        "attention: v holds {} values, {shape:?} reads {kv_len} (rows 0..{})",
        v.len,
        shape.pos0 + shape.t
    );
    for (name, t) in [("q", q), ("k", k), ("v", v), ("out", out)] {
        assert!(
            t.buffer.size() <= gpu.caps.max_binding,
            "attention: {name} is {} bytes, past the adapter's {}-byte binding limit",
            t.buffer.size(),
            gpu.caps.max_binding
        );
    }
    let max = gpu.caps.max_workgroups_per_dim as usize;
    assert!(
        shape.t <= max && shape.n_heads <= max,
        "attention: {} rows x {} heads exceed the adapter's {max} workgroups per dimension",
        shape.t,
        shape.n_heads
    );
    if shape.t == 0 {
        return;
    }
    let params = Params {
        t: shape.t as u32,
        pos0: shape.pos0 as u32,
        n_heads: shape.n_heads as u32,
        n_kv_heads: shape.n_kv_heads as u32,
        head_dim: shape.head_dim as u32,
        group: shape.group() as u32,
        scale: shape.scale,
        _pad: 0,
    };
    let kernel = gpu.pipeline(&spec());
    gpu.dispatch(
        encoder,
        &kernel,
        bytemuck::bytes_of(&params),
        &[&q.buffer, &k.buffer, &v.buffer, &out.buffer],
        [shape.n_heads as u32, shape.t as u32, 1],
    );
}
