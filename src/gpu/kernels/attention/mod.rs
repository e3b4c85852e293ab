//! Causal attention with grouped-query heads over the paged KV pool, for a varlen batch
//! (shaders/attention.wgsl, shaders/attention_combine.wgsl).
//!
//! Computes `out[i, h] = Σ_j softmax_j(scale · q[i, h] · k[j, g]) · v[j, g]` with kv head
//! `g = h / (n_heads / n_kv_heads)`, for `t` query rows that may come from any number of
//! sequences (prefill chunks and single-token decodes together). Each query row carries,
//! in `rowinfo [t, 4]` (u32), the offset of its sequence's block table in `block_tables`
//! and its own absolute position `p` (then its pool slot, unused here); it attends keys
//! `lo ..= p` of its sequence (`lo = 0`, or `max(0, p + 1 - w)` under a sliding window of
//! `w` keys, [`AttentionShape::window`]), key `j` living at pool row
//! `block_tables[offset + j / block_size] * block_size + j % block_size`.
//! `q` and `out` are `[t, n_heads, head_dim]`; `k_pool` and `v_pool` are
//! `[num_blocks * block_size, n_kv_heads, head_dim]`, with every key a row attends already
//! written (the batch's new keys and values included). `head_dim` is a multiple of 4 (the
//! kernel reads vec4s) and at most `MAX_HEAD_DIM`; `scale` is positive.
//!
//! The rows are computed as the work items of an [`AttentionPlan`]: whole rows in one
//! dispatch, or (flash-decoding, [`AttentionSplit::DecodePages`]) rows split into pages
//! whose states are folded afterwards: [`encode`] records the items and a combine dispatch
//! that folds them; [`encode_unfolded`] only the items, for a reader that folds the states
//! itself as it reads the output (the o-projection's `matmul::Prologue::AttentionFold`,
//! with the combine's operations, so the same bits). [`AttentionFixture`]
//! sets a dispatch up for checking and timing (the kernel suite, `sprout check`, `sprout
//! tune`, the benchmarks).
//!
//! Invariant: a row's output is bitwise the same whichever other rows and sequences share
//! the dispatch, whatever prefill chunking put it there, whichever physical blocks hold
//! its keys, and whether it was split: keys are taken in fixed pages of 64 from key 0 and
//! the pages folded in order, with operations that depend only on `head_dim` and the row's
//! own key count `p + 1` (ARCHITECTURE.md, principle 1; the shader's header spells out the
//! order). Under a sliding window the pages wholly before `lo` are skipped and the fold
//! starts at `lo`'s page; a split item with no visible key writes an empty state that the
//! combine step skips, so the window changes which pages are folded, never their order. How many heads share a workgroup and how the query is loaded decide only which
//! loads are shared, never the arithmetic.
//!
//! `rowinfo`, the work items and `block_tables` live on the GPU, so the host cannot check
//! them: a wrong offset or block id reads the wrong keys (past the end of a buffer, whatever
//! robust buffer access gives). The caller (the runner, from a `StepPlan`) keeps them right.

mod fixture;
mod plan;

pub use fixture::{AttentionFixture, PlannedAttention, SplitRows};
pub use plan::{AttentionPlan, AttentionSplit, MAX_SLOTS_PER_ROW, NO_SLOT, PAGE};

use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::ATTENTION_FOLD;
use crate::gpu::{Gpu, Recorder, Tensor};

const SOURCE: &str = include_str!("../../../../shaders/attention.wgsl");
const COMBINE: &str = include_str!("../../../../shaders/attention_combine.wgsl");
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
    /// Sliding-window attention: with `Some(w)` the query row at position `i` sees the key
    /// at position `j` only when `j <= i && i - j < w` (the last `w` keys, itself
    /// included); `None` is full causal attention. `w > 0`.
    pub window: Option<u32>,
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
            window: None,
        }
    }

    /// The first key the query row at `position` sees: `position + 1 - w` under a window
    /// of `w` (0 when that is negative), else 0.
    pub fn first_key(&self, position: u32) -> u32 {
        match self.window {
            Some(w) => position.saturating_add(1).saturating_sub(w),
            None => 0,
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
            self.window != Some(0),
            "attention: window is Some(0), which leaves a row no key"
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
    n_items: u32,
    /// The sliding window, `u32::MAX` for none (no row has that many keys).
    window: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CombineParams {
    n_heads: u32,
    head_dim: u32,
    n_rows: u32,
    _pad: u32,
}

/// Most query heads one workgroup serves (they share each key and value row it loads).
pub const MAX_HEADS_PER_WORKGROUP: usize = 8;
/// Most vec4s of query a workgroup holds (`QLoads::Held`, `QLoads::Shared`): 64, i.e. 256
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QLoads {
    /// Loaded for every key.
    Direct,
    /// Loaded once into a private array sized at compile time. On llvmpipe, where every
    /// load is a per-lane gather, this took decode attention from 19.5 to 16.7 ms in the
    /// kernel benchmark. A real GPU serves the repeated loads from its cache and would pay
    /// for the registers instead, so only CPU adapters hold them.
    Held,
    /// Staged once per workgroup in workgroup memory, which every invocation then reads:
    /// the GPU form of holding them.
    Shared,
}

impl QLoads {
    pub const ALL: [QLoads; 3] = [QLoads::Direct, QLoads::Held, QLoads::Shared];

    /// Whether the kernel can hold the query vectors of `shape` (`MAX_HELD_Q`).
    pub fn fits(self, shape: &AttentionShape) -> bool {
        self == QLoads::Direct
            || heads_per_workgroup(shape.group()) * shape.head_dim / 4 <= MAX_HELD_Q
    }

    fn mode(self) -> u32 {
        match self {
            QLoads::Direct => 0,
            QLoads::Held => 1,
            QLoads::Shared => 2,
        }
    }
}

/// How attention runs on an adapter: which rows are split, and how queries are loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AttentionVariant {
    pub split: AttentionSplit,
    pub q_loads: QLoads,
}

impl AttentionVariant {
    /// Before tuning: whole rows with held queries on CPU adapters; split decodes with
    /// shared queries on GPUs.
    pub fn default_for(is_cpu: bool) -> AttentionVariant {
        if is_cpu {
            AttentionVariant {
                split: AttentionSplit::Whole,
                q_loads: QLoads::Held,
            }
        } else {
            AttentionVariant {
                split: AttentionSplit::DecodePages,
                q_loads: QLoads::Shared,
            }
        }
    }

    /// Every variant, for the tuner.
    pub fn all() -> Vec<AttentionVariant> {
        let mut out = Vec::new();
        for split in [AttentionSplit::Whole, AttentionSplit::DecodePages] {
            for q_loads in QLoads::ALL {
                out.push(AttentionVariant { split, q_loads });
            }
        }
        out
    }

    /// The query loads to use for `shape`: these, or direct ones when the query does not
    /// fit the held array.
    pub fn q_loads_for(&self, shape: &AttentionShape) -> QLoads {
        if self.q_loads.fits(shape) {
            self.q_loads
        } else {
            QLoads::Direct
        }
    }
}

/// The attention kernel with `heads` query heads per workgroup, and query vectors of
/// `head_dim` values loaded as `q_loads` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionKernel {
    pub heads: usize,
    pub head_dim: usize,
    pub q_loads: QLoads,
}

impl KernelSpec for AttentionKernel {
    fn name(&self) -> String {
        let AttentionKernel {
            heads,
            head_dim,
            q_loads,
        } = self;
        format!("attention/paged/{heads}/{head_dim}/{q_loads:?}")
    }

    /// The module with `HG` (heads per workgroup) and the query's loads set.
    fn source(&self) -> String {
        let hd4 = self.head_dim / 4;
        let held = if self.q_loads == QLoads::Held { hd4 } else { 1 };
        let shared = if self.q_loads == QLoads::Shared {
            hd4
        } else {
            1
        };
        format!(
            "const HG: u32 = {}u;\nconst Q_MODE: u32 = {}u;\nconst HD4: u32 = {hd4}u;\n\
             const HELD4: u32 = {held}u;\nconst SHARED4: u32 = {shared}u;\n{SOURCE}",
            self.heads,
            self.q_loads.mode()
        )
    }

    fn entry(&self) -> &'static str {
        "attention"
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        &[Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite]
    }
}

/// The kernel that folds split rows' page states into their outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionCombine;

impl KernelSpec for AttentionCombine {
    fn name(&self) -> String {
        "attention/combine".into()
    }

    fn source(&self) -> String {
        format!("{COMBINE}\n{ATTENTION_FOLD}")
    }

    fn entry(&self) -> &'static str {
        "attention_combine"
    }

    fn storage(&self) -> &'static [Access] {
        &[Access::Read, Access::Read, Access::ReadWrite]
    }
}

/// The tensors one step's attention reads and writes.
pub struct AttentionBuffers<'a> {
    /// `[t, n_heads, head_dim]` f32.
    pub q: &'a Tensor,
    /// `[num_blocks * block_size, n_kv_heads, head_dim]` f32 each.
    pub k_pool: &'a Tensor,
    pub v_pool: &'a Tensor,
    pub block_tables: &'a Tensor,
    /// `[t]` [`RowInfo`](crate::gpu::kernels::RowInfo): each row's table offset and position.
    pub rowinfo: &'a Tensor,
    /// `[t, n_heads, head_dim]` f32.
    pub out: &'a Tensor,
    /// `[slots, n_heads, 4 + head_dim]` f32: the split rows' states.
    pub scratch: &'a Tensor,
}

/// One step's attention work on the GPU: an [`AttentionPlan`]'s items and split rows.
#[derive(Clone, Copy)]
pub struct AttentionWork<'a> {
    /// `[n_items, 4]` u32 (`AttentionPlan::items`).
    pub items: &'a Tensor,
    pub n_items: usize,
    /// `[n_combine, 4]` u32 (`AttentionPlan::combine`).
    pub combine: &'a Tensor,
    pub n_combine: usize,
    /// `[t, 2]` u32 (`AttentionPlan::row_slots`).
    pub row_slots: &'a Tensor,
    /// Scratch slots the items use.
    pub slots: usize,
}

/// Values per scratch slot: per head a vec4 of (M, L, 0, 0) and the head's O.
pub fn scratch_per_slot(shape: &AttentionShape) -> usize {
    shape.n_heads * (4 + shape.head_dim)
}

/// Records a step's attention: the work items of its plan with `q_loads`, then the fold of
/// its split rows (when it has any). Panics if `q_loads` does not fit `shape` or a buffer
/// is too small.
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    shape: &AttentionShape,
    q_loads: QLoads,
    b: &AttentionBuffers,
    work: &AttentionWork,
) {
    encode_unfolded(gpu, rec, shape, q_loads, b, work);
    if work.n_combine > 0 {
        encode_combine(
            gpu,
            rec,
            shape,
            b.scratch,
            work.combine,
            work.n_combine,
            b.out,
        );
    }
}

/// Records the work items of a plan with `q_loads`, leaving its split rows' states in the
/// scratch for whoever reads the output to fold (a matmul with the attention-fold
/// prologue, `matmul::AttentionFold`, which gives the same bits as the combine step).
pub fn encode_unfolded(
    gpu: &Gpu,
    rec: &mut Recorder,
    shape: &AttentionShape,
    q_loads: QLoads,
    b: &AttentionBuffers,
    work: &AttentionWork,
) {
    let (n_items, slots) = (work.n_items, work.slots);
    shape.validate();
    assert!(
        q_loads.fits(shape),
        "attention: {shape:?} has more than {MAX_HELD_Q} vec4s of query per workgroup to hold"
    );
    let q_len = shape.q_len();
    let block_len = shape.block_size * shape.kv_dim();
    assert!(
        b.q.len >= q_len,
        "attention: q holds {} values, {shape:?} needs {q_len}",
        b.q.len
    );
    assert!(
        b.out.len >= q_len,
        "attention: out holds {} values, {shape:?} needs {q_len}",
        b.out.len
    );
    assert!(
        b.rowinfo.len >= 4 * shape.t,
        "attention: rowinfo holds {} values, {} query rows need {}",
        b.rowinfo.len,
        shape.t,
        4 * shape.t
    );
    assert!(
        work.items.len >= 4 * n_items,
        "attention: {n_items} work items need {} values, the buffer holds {}",
        4 * n_items,
        work.items.len
    );
    assert!(
        b.scratch.len >= slots * scratch_per_slot(shape),
        "attention: {slots} scratch slots need {} values, the buffer holds {}",
        slots * scratch_per_slot(shape),
        b.scratch.len
    );
    for (name, pool) in [("k_pool", b.k_pool), ("v_pool", b.v_pool)] {
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
        b.k_pool.len == b.v_pool.len,
        "attention: k_pool holds {} values but v_pool {}",
        b.k_pool.len,
        b.v_pool.len
    );
    let buffers = [
        ("q", b.q),
        ("k_pool", b.k_pool),
        ("v_pool", b.v_pool),
        ("block_tables", b.block_tables),
        ("rowinfo", b.rowinfo),
        ("items", work.items),
        ("out", b.out),
        ("scratch", b.scratch),
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
        n_items <= max && shape.n_heads <= max,
        "attention: {n_items} work items x {} heads exceed the adapter's {max} workgroups per \
         dimension",
        shape.n_heads
    );
    if shape.t == 0 || n_items == 0 {
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
        n_items: n_items as u32,
        window: shape.window.unwrap_or(u32::MAX),
        _pad: [0; 3],
    };
    let heads = heads_per_workgroup(shape.group());
    let kernel = gpu.pipeline(&AttentionKernel {
        heads,
        head_dim: shape.head_dim,
        q_loads,
    });
    rec.dispatch(
        &kernel,
        bytemuck::bytes_of(&params),
        &buffers.map(|(_, t)| &t.buffer),
        [(shape.n_heads / heads) as u32, n_items as u32, 1],
    );
}

/// Records folding the split rows' states (`n_rows` entries of `combine`, a plan's
/// `combine` list) into their outputs.
fn encode_combine(
    gpu: &Gpu,
    rec: &mut Recorder,
    shape: &AttentionShape,
    scratch: &Tensor,
    combine: &Tensor,
    n_rows: usize,
    out: &Tensor,
) {
    assert!(
        combine.len >= 4 * n_rows,
        "attention combine: {n_rows} rows need {} values, the buffer holds {}",
        4 * n_rows,
        combine.len
    );
    assert!(
        out.len >= shape.q_len(),
        "attention combine: out is too small"
    );
    let max = gpu.caps.max_workgroups_per_dim as usize;
    assert!(
        n_rows <= max,
        "attention combine: {n_rows} rows exceed {max} workgroups"
    );
    if n_rows == 0 {
        return;
    }
    let params = CombineParams {
        n_heads: shape.n_heads as u32,
        head_dim: shape.head_dim as u32,
        n_rows: n_rows as u32,
        _pad: 0,
    };
    let kernel = gpu.pipeline(&AttentionCombine);
    rec.dispatch(
        &kernel,
        bytemuck::bytes_of(&params),
        &[&scratch.buffer, &combine.buffer, &out.buffer],
        [n_rows as u32, 1, 1],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_shows_the_last_w_keys() {
        let mut shape = AttentionShape::new(1, 1, 1, 4, 16);
        assert_eq!(shape.first_key(100), 0);
        shape.window = Some(5);
        // Gemma 3's mask: key j is seen from row i when i - j < w.
        for (position, first) in [(0, 0), (3, 0), (4, 0), (5, 1), (100, 96)] {
            assert_eq!(shape.first_key(position), first, "position {position}");
        }
        shape.window = Some(1);
        assert_eq!(shape.first_key(7), 7);
        shape.window = Some(u32::MAX);
        assert_eq!(shape.first_key(u32::MAX - 1), 0);
    }

    #[test]
    #[should_panic(expected = "window is Some(0)")]
    fn an_empty_window_is_refused() {
        let mut shape = AttentionShape::new(1, 1, 1, 4, 16);
        shape.window = Some(0);
        shape.validate();
    }

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
