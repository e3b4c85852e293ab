//! Causal attention with grouped-query heads over the paged KV pool, for a varlen batch
//! (shaders/attention.wgsl).
//!
//! Owns one dispatch, `out[i, h] = Σ_j softmax_j(scale · q[i, h] · k[j, g]) · v[j, g]` with
//! kv head `g = h / (n_heads / n_kv_heads)`, for `t` query rows that may come from any
//! number of sequences (prefill chunks and single-token decodes together). Each query row
//! carries, in `rows [t, 2]` (u32), the offset of its sequence's block table in
//! `block_tables` and its own absolute position `p`; it attends keys `0 ..= p` of its
//! sequence, key `j` living at pool row
//! `block_tables[offset + j / block_size] * block_size + j % block_size`.
//! `q` and `out` are `[t, n_heads, head_dim]`; `k_pool` and `v_pool` are
//! `[num_blocks * block_size, n_kv_heads, head_dim]`, with every key a row attends already
//! written (the batch's new keys and values included: record `kv_write` first).
//! `head_dim` is a multiple of 4 (the kernel reads vec4s) and at most `MAX_HEAD_DIM`;
//! `scale` is positive.
//!
//! Invariant: a row's output is bitwise the same whichever other rows and sequences share
//! the dispatch, whatever prefill chunking put it there, and whichever physical blocks hold
//! its keys. One workgroup per (query heads of one kv head, row) takes keys in fixed chunks
//! of 64 from key 0 with an online softmax per head whose order of operations depends only
//! on `head_dim` and the row's own key count `p + 1` (DESIGN.md, principle 1; the shader's
//! header spells out the order). How many heads share a workgroup and how the query is
//! loaded decide only which loads are shared, never the arithmetic.
//!
//! `rows` and `block_tables` live on the GPU, so the host cannot check them: a wrong offset
//! or block id reads the wrong keys (past the end of a buffer, whatever robust buffer access
//! gives). The caller (the runner, from a `StepPlan`) keeps them right.

use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const SOURCE: &str = include_str!("../../../shaders/attention.wgsl");
/// Largest `head_dim` the kernel handles: one vec4 of output per invocation (`4 * WG`).
pub const MAX_HEAD_DIM: usize = 256;

/// The sizes of one attention dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Query rows in this dispatch, from any number of sequences.
    pub t: usize,
    pub n_heads: usize,
    /// Key/value heads; must divide `n_heads`.
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Key rows per block of the KV pools.
    pub block_size: usize,
    /// Multiplies `q · k`; positive, normally `1 / sqrt(head_dim)`.
    pub scale: f32,
}

impl AttentionShape {
    /// The usual shape, with `scale = 1 / sqrt(head_dim)`.
    pub fn new(
        t: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
    ) -> Self {
        AttentionShape {
            t,
            n_heads,
            n_kv_heads,
            head_dim,
            block_size,
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

    /// Values in one key (or value) row of the pools: `n_kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
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
        assert!(self.block_size > 0, "attention: block_size is 0");
        assert!(
            self.scale.is_finite() && self.scale > 0.0,
            "attention: scale {} is not finite and positive",
            self.scale
        );
        assert!(
            u32::try_from(self.q_len()).is_ok() && u32::try_from(self.block_size).is_ok(),
            "attention: {self:?} indexes past u32"
        );
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    t: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    group: u32,
    block_size: u32,
    scale: f32,
    _pad: u32,
}

/// Most query heads one workgroup serves (they share each key and value row it loads).
pub const MAX_HEADS_PER_WORKGROUP: usize = 8;
/// Most vec4s of query a workgroup's invocations hold (`QLoads::Held`): 64, i.e. 256
/// floats, such as SmolLM2-135M's 3 heads of 64.
pub const MAX_HELD_Q: usize = 64;

/// The query heads one workgroup serves for a model with `group` query heads per kv head:
/// the largest divisor of `group` up to `MAX_HEADS_PER_WORKGROUP`, so that they share a kv
/// head.
pub fn heads_per_workgroup(group: usize) -> usize {
    (1..=group.min(MAX_HEADS_PER_WORKGROUP))
        .rev()
        .find(|h| group.is_multiple_of(*h))
        .unwrap_or(1)
}

/// How the invocations get the query vectors they score keys against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QLoads {
    /// Loaded for every key.
    Direct,
    /// Loaded once into a private array sized at compile time. On llvmpipe, where every
    /// load is a per-lane gather, this took decode attention from 19.5 to 16.7 ms in the
    /// kernel benchmark. A real GPU serves the repeated loads from its cache and would pay
    /// for the registers instead, so only CPU adapters hold them. The values, and so the
    /// results, are those of `Direct`.
    Held,
}

impl QLoads {
    pub const ALL: [QLoads; 2] = [QLoads::Direct, QLoads::Held];

    /// Whether the kernel can hold the query vectors of `shape` (`MAX_HELD_Q`).
    pub fn fits(self, shape: &AttentionShape) -> bool {
        self == QLoads::Direct
            || heads_per_workgroup(shape.group()) * shape.head_dim / 4 <= MAX_HELD_Q
    }

    /// The loads sprout uses for `shape` on `gpu`'s adapter.
    pub fn best(gpu: &Gpu, shape: &AttentionShape) -> QLoads {
        if gpu.adapter.is_cpu() && QLoads::Held.fits(shape) {
            QLoads::Held
        } else {
            QLoads::Direct
        }
    }
}

/// The kernel with `heads` query heads per workgroup, and query vectors of `head_dim`
/// values loaded as `q_loads` says.
pub fn spec(heads: usize, head_dim: usize, q_loads: QLoads) -> KernelSpec {
    use Access::{Read, ReadWrite};
    KernelSpec {
        key: format!("attention/causal_paged/{heads}/{head_dim}/{q_loads:?}"),
        source: Box::new(move || source(heads, head_dim, q_loads)),
        entry: "attention",
        storage: &[Read, Read, Read, Read, Read, ReadWrite],
    }
}

/// Records causal paged attention for the `shape.t` query rows of a varlen batch into
/// `encoder`.
///
/// `rows`: `[t, 2]` u32 per query row: (offset of its sequence's block table in
/// `block_tables`, the row's absolute position `p`); the row attends keys `0 ..= p` of its
/// sequence. Key `j`'s K/V row lives at pool row
/// `block_tables[offset + j / block_size] * block_size + j % block_size`.
/// `k_pool`/`v_pool`: `[num_blocks * block_size, n_kv_heads, head_dim]` f32.
/// `q` and `out`: `[t, n_heads, head_dim]` f32.
#[allow(clippy::too_many_arguments)]
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    shape: &AttentionShape,
    q: &Tensor,
    k_pool: &Tensor,
    v_pool: &Tensor,
    block_tables: &Tensor,
    rows: &Tensor,
    out: &Tensor,
) {
    let q_loads = QLoads::best(gpu, shape);
    encode_with(
        gpu,
        rec,
        shape,
        q_loads,
        [q, k_pool, v_pool, block_tables, rows, out],
    );
}

/// As `encode`, with explicit query loads (tests check both), and the buffers in the
/// order of `encode`'s arguments. Panics if `q_loads` does not fit `shape`.
pub fn encode_with(
    gpu: &Gpu,
    rec: &mut Recorder,
    shape: &AttentionShape,
    q_loads: QLoads,
    [q, k_pool, v_pool, block_tables, rows, out]: [&Tensor; 6],
) {
    shape.validate();
    assert!(
        q_loads.fits(shape),
        "attention: {shape:?} has more than {MAX_HELD_Q} vec4s of query per workgroup to hold"
    );
    let q_len = shape.q_len();
    let block_len = shape.block_size * shape.kv_dim();
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
        rows.len >= 2 * shape.t,
        "attention: rows hold {} values, {} query rows need {}",
        rows.len,
        shape.t,
        2 * shape.t
    );
    for (name, pool) in [("k_pool", k_pool), ("v_pool", v_pool)] {
        assert!(
            pool.len >= block_len && pool.len.is_multiple_of(block_len),
            "attention: {name} holds {} values, not a whole number of blocks of {block_len} \
             ({} rows of {})",
            pool.len,
            shape.block_size,
            shape.kv_dim()
        );
        assert!(
            u32::try_from(pool.len / 4).is_ok(),
            "attention: {name} holds {} values, past u32 vec4 indexing",
            pool.len
        );
    }
    assert!(
        k_pool.len == v_pool.len,
        "attention: k_pool holds {} values but v_pool {}",
        k_pool.len,
        v_pool.len
    );
    let buffers = [
        ("q", q),
        ("k_pool", k_pool),
        ("v_pool", v_pool),
        ("block_tables", block_tables),
        ("rows", rows),
        ("out", out),
    ];
    for (name, t) in buffers {
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
        n_heads: shape.n_heads as u32,
        n_kv_heads: shape.n_kv_heads as u32,
        head_dim: shape.head_dim as u32,
        group: shape.group() as u32,
        block_size: shape.block_size as u32,
        scale: shape.scale,
        _pad: 0,
    };
    let heads = heads_per_workgroup(shape.group());
    let kernel = gpu.pipeline(&spec(heads, shape.head_dim, q_loads));
    rec.dispatch(
        &kernel,
        bytemuck::bytes_of(&params),
        &buffers.map(|(_, t)| &t.buffer),
        [(shape.n_heads / heads) as u32, shape.t as u32, 1],
    );
}

/// The module with `heads` query heads per workgroup (`HG` in the shader), holding the
/// query vectors of `head_dim` values or not.
pub fn source(heads: usize, head_dim: usize, q_loads: QLoads) -> String {
    let held = q_loads == QLoads::Held;
    // Without holding, the held array is never used: one vec4 per head keeps it small.
    let hd4 = if held { head_dim / 4 } else { 1 };
    format!(
        "const HG: u32 = {heads}u;\nconst HOLD_Q: bool = {held};\nconst HD4: u32 = {hd4}u;\n{SOURCE}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workgroup_serves_heads_of_one_kv_head() {
        for (group, heads) in [
            (1, 1),
            (3, 3),
            (4, 4),
            (7, 7),
            (8, 8),
            (12, 6),
            (16, 8),
            (11, 1),
        ] {
            assert_eq!(heads_per_workgroup(group), heads, "group {group}");
        }
    }
}
