//! Per-head RMSNorm and RoPE of a stored q|k|v projection, with the KV-cache write
//! (shaders/head_norm_rope.wgsl): what follows the q|k|v matmul for models that normalise
//! each q and k head before RoPE (Qwen3).
//!
//! The fused q|k|v epilogue (`matmul::Epilogue::QkvRope`) works on one pair of columns at
//! a time and cannot reduce over a head; for these models the matmul stores its plain
//! output (`[m, q_dim + 2 kv_dim]`) and this kernel normalises each q and k head (one
//! weight vector of `head_dim` shared by the q heads, another by the k heads), rotates it
//! with the same [`RopeTable`] and writes q to its buffer and k and v to their pool slots.
//!
//! Invariants: one invocation owns one head of one row and folds its sum of squares in
//! one fixed order (a sequential fma chain over the stored values), so a row's outputs
//! are bitwise independent of the batch. As in the epilogue, a position at or beyond the
//! table writes NaN to q and k, and a slot past the pool writes no k or v.
//! [`HeadNormRopeFixture`] sets one dispatch up for checking (the kernel suite, `sprout
//! check`) with NaN in q and a sentinel in the pools.

use crate::error::SproutError;
use crate::gpu::grid::grid;
use crate::gpu::kernels::RowInfo;
use crate::gpu::kernels::rope::RopeTable;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::NAN;
use crate::gpu::{Gpu, Recorder, Tensor};

const SOURCE: &str = include_str!("../../../shaders/head_norm_rope.wgsl");
/// Heads per workgroup (`WG` in the shader).
const WORKGROUP: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    q_dim: u32,
    kv_dim: u32,
    head_dim: u32,
    q_norm: u32,
    k_norm: u32,
    eps: f32,
    max_positions: u32,
}

/// The kernel (one variant: it reads each value once and reduces over at most
/// `MAX_HEAD_DIM` values, on any adapter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeadNormRopeKernel;

impl KernelSpec for HeadNormRopeKernel {
    fn name(&self) -> String {
        "head_norm_rope".into()
    }

    fn source(&self) -> String {
        format!("{SOURCE}\n{NAN}")
    }

    fn entry(&self) -> &'static str {
        "head_norm_rope"
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read as R, ReadWrite as W};
        // x, vectors, table, rowinfo, q, k pool, v pool
        &[R, R, R, R, W, W, W]
    }
}

/// One dispatch's inputs and outputs.
pub struct HeadNormRope<'a> {
    /// `[m, q_dim + 2 kv_dim]`: the q|k|v projection, q and k in RoPE's adjacent pairs.
    pub x: &'a Tensor,
    pub m: usize,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub head_dim: usize,
    /// Holds the q norm's `head_dim` weights at `q_norm` and the k norm's at `k_norm`.
    pub vectors: &'a Tensor,
    pub q_norm: usize,
    pub k_norm: usize,
    pub eps: f32,
    pub rope: &'a RopeTable,
    /// `[m]` [`RowInfo`]: each row's position and pool slot.
    pub rowinfo: &'a Tensor,
    /// `[m, q_dim]`.
    pub q: &'a Tensor,
    /// `[pool rows, kv_dim]` each.
    pub k_pool: &'a Tensor,
    pub v_pool: &'a Tensor,
}

/// Records `op`. Panics (naming the problem) when a buffer is too small for its shape.
pub fn encode(gpu: &Gpu, rec: &mut Recorder, op: &HeadNormRope) {
    let (m, hd) = (op.m, op.head_dim);
    let width = op.q_dim + 2 * op.kv_dim;
    assert!(
        hd > 0 && hd.is_multiple_of(2) && hd == op.rope.head_dim,
        "head_norm_rope: head_dim {hd} against a RoPE table for {}",
        op.rope.head_dim
    );
    assert!(
        op.q_dim.is_multiple_of(hd) && op.kv_dim.is_multiple_of(hd) && op.kv_dim > 0,
        "head_norm_rope: q_dim {} and kv_dim {} are not whole heads of {hd}",
        op.q_dim,
        op.kv_dim
    );
    assert!(
        op.x.len >= m * width,
        "head_norm_rope: x holds {} values, needs {m}x{width}",
        op.x.len
    );
    assert!(
        op.vectors.len >= op.q_norm.max(op.k_norm) + hd,
        "head_norm_rope: the norms at {} and {} are past their buffer of {}",
        op.q_norm,
        op.k_norm,
        op.vectors.len
    );
    assert!(
        op.rowinfo.len >= 4 * m,
        "head_norm_rope: rowinfo for {m} rows"
    );
    assert!(
        op.q.len >= m * op.q_dim,
        "head_norm_rope: q holds {} values",
        op.q.len
    );
    let units = m * (width / hd);
    u32::try_from(units).expect("head_norm_rope: more than 2^32 heads");
    if m == 0 {
        return;
    }
    let params = Params {
        m: m as u32,
        q_dim: op.q_dim as u32,
        kv_dim: op.kv_dim as u32,
        head_dim: hd as u32,
        q_norm: op.q_norm as u32,
        k_norm: op.k_norm as u32,
        eps: op.eps,
        max_positions: op.rope.max_positions as u32,
    };
    rec.dispatch(
        &gpu.pipeline(&HeadNormRopeKernel),
        bytemuck::bytes_of(&params),
        &[
            &op.x.buffer,
            &op.vectors.buffer,
            &op.rope.values.buffer,
            &op.rowinfo.buffer,
            &op.q.buffer,
            &op.k_pool.buffer,
            &op.v_pool.buffer,
        ],
        grid(gpu, units.div_ceil(WORKGROUP)),
    );
}

/// The heads of a [`HeadNormRopeFixture`]: `n_heads` q heads and `n_kv_heads` k and v
/// heads of `head_dim`.
pub struct HeadShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// One dispatch on the GPU, set up to be checked: `x`, the norms (after `lead` values of
/// 9.0 in their buffer, so that offsets are honoured), the rows, a table, and q (NaN
/// before each run) and pools of `pool_rows` (the sentinel 7.0 before each run).
pub struct HeadNormRopeFixture {
    shape: (usize, usize, usize),
    m: usize,
    lead: usize,
    eps: f32,
    x: Tensor,
    vectors: Tensor,
    rowinfo: Tensor,
    table: RopeTable,
    q: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
}

/// What a pool slot holds before a run (a value no head writes by chance).
pub const POOL_SENTINEL: f32 = 7.0;

impl HeadNormRopeFixture {
    /// `x` is `[rows.len(), q_dim + 2 kv_dim]`, `q_norm` and `k_norm` `head_dim` each;
    /// `frequencies` and `max_positions` make the table. Errors only where the table does.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: &Gpu,
        shape: &HeadShape,
        x: &[f32],
        (q_norm, k_norm, eps): (&[f32], &[f32], f32),
        rows: &[RowInfo],
        (frequencies, max_positions): (&[f64], usize),
        pool_rows: usize,
    ) -> Result<HeadNormRopeFixture, SproutError> {
        let (hd, q_dim, kv_dim) = (
            shape.head_dim,
            shape.n_heads * shape.head_dim,
            shape.n_kv_heads * shape.head_dim,
        );
        let m = rows.len();
        assert_eq!(
            x.len(),
            m * (q_dim + 2 * kv_dim),
            "head_norm_rope fixture: x"
        );
        assert!(
            q_norm.len() == hd && k_norm.len() == hd,
            "head_norm_rope fixture: norms"
        );
        let lead = 3;
        let mut vectors = vec![9.0f32; lead];
        vectors.extend(q_norm);
        vectors.extend(k_norm);
        Ok(HeadNormRopeFixture {
            shape: (q_dim, kv_dim, hd),
            m,
            lead,
            eps,
            x: gpu.upload(x),
            vectors: gpu.upload(&vectors),
            rowinfo: gpu.upload(rows),
            table: RopeTable::with_frequencies(gpu, frequencies, max_positions)?,
            q: gpu.zeros(m.max(1) * q_dim),
            k_pool: gpu.zeros(pool_rows * kv_dim),
            v_pool: gpu.zeros(pool_rows * kv_dim),
        })
    }

    /// Records the dispatch.
    pub fn encode(&self, gpu: &Gpu, rec: &mut Recorder) {
        let (q_dim, kv_dim, head_dim) = self.shape;
        let op = HeadNormRope {
            x: &self.x,
            m: self.m,
            q_dim,
            kv_dim,
            head_dim,
            vectors: &self.vectors,
            q_norm: self.lead,
            k_norm: self.lead + head_dim,
            eps: self.eps,
            rope: &self.table,
            rowinfo: &self.rowinfo,
            q: &self.q,
            k_pool: &self.k_pool,
            v_pool: &self.v_pool,
        };
        encode(gpu, rec, &op);
    }

    /// Runs the dispatch and returns q, the K pool and the V pool.
    pub async fn run(&self, gpu: &Gpu) -> Result<[Vec<f32>; 3], SproutError> {
        gpu.write(&self.q, &vec![f32::NAN; self.q.len]);
        for pool in [&self.k_pool, &self.v_pool] {
            gpu.write(pool, &vec![POOL_SENTINEL; pool.len]);
        }
        let mut rec = gpu.recorder();
        self.encode(gpu, &mut rec);
        rec.submit();
        Ok([
            gpu.read_f32(&self.q).await?,
            gpu.read_f32(&self.k_pool).await?,
            gpu.read_f32(&self.v_pool).await?,
        ])
    }
}
