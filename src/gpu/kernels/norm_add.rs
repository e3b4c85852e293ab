//! The standalone RMSNorm (shaders/norm_add.wgsl): `out[r, :] += rmsnorm(x[r, :]) * g`
//! (or `=`) for `m` rows, the norm's weights `g` being `width` values of `vectors` from
//! `offset`. Added: what models that normalise a block's output before adding it to the
//! residual stream (Gemma's post-attention and post-feed-forward norms) run after the
//! block's last matmul. Stored: a LoRA site's normalised input, read plainly by its A
//! product and its base projection rather than normalised again by each
//! (`model::decoder`).
//!
//! Invariants: the norm is the matmul's RMSNorm prologue, operation for operation (the sum
//! of squares in blocks of 32, each a sequential fma chain, the blocks added in order;
//! `1 / sqrt(ss / width + eps)`; `(x * inv_rms) * g`), so a norm gives the same bits here
//! as in a fused matmul; and both shapes ([`NormAddShape`]) run those operations in that
//! order, so they give the same bits as each other, whatever shares the batch.
//! [`NormAddFixture`] sets one dispatch up for checking (the kernel suite, `sprout check`)
//! and timing.

use crate::error::SproutError;
use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const SOURCE: &str = include_str!("../../../shaders/norm_add.wgsl");
/// Invocations per workgroup (`WG` in the shader).
const WORKGROUP: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    width: u32,
    offset: u32,
    eps: f32,
}

/// Which invocations compute a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormAddShape {
    /// One invocation per row, walking it whole: CPU adapters, where an invocation is a
    /// lane of a core and workgroup memory and barriers cost more than they share.
    RowPerInvocation,
    /// One workgroup per row, its invocations splitting the row's blocks and columns, one
    /// adding the blocks' parts in order: GPUs, which need many invocations per row.
    RowPerWorkgroup,
}

impl NormAddShape {
    pub const ALL: [NormAddShape; 2] = [
        NormAddShape::RowPerInvocation,
        NormAddShape::RowPerWorkgroup,
    ];

    /// The untuned choice: rows per invocation on CPU adapters, per workgroup on GPUs.
    pub fn default_for(cpu_shaped: bool) -> NormAddShape {
        if cpu_shaped {
            NormAddShape::RowPerInvocation
        } else {
            NormAddShape::RowPerWorkgroup
        }
    }
}

/// What the normalised rows do to `out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormOutput {
    /// Added to it (the residual stream).
    Add,
    /// Stored in it.
    Store,
}

impl NormOutput {
    pub const ALL: [NormOutput; 2] = [NormOutput::Add, NormOutput::Store];
}

/// The kernel of one shape and output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NormAddKernel {
    pub shape: NormAddShape,
    pub output: NormOutput,
}

impl KernelSpec for NormAddKernel {
    fn name(&self) -> String {
        match self.output {
            NormOutput::Add => format!("norm_add/{:?}", self.shape),
            NormOutput::Store => format!("norm_store/{:?}", self.shape),
        }
    }

    fn source(&self) -> String {
        let per_workgroup = self.shape == NormAddShape::RowPerWorkgroup;
        let add = self.output == NormOutput::Add;
        format!(
            "const ADD: bool = {add};\nconst ROW_PER_WORKGROUP: bool = {per_workgroup};\n{SOURCE}"
        )
    }

    fn entry(&self) -> &'static str {
        "norm_add"
    }

    fn storage(&self) -> &'static [Access] {
        &[Access::Read, Access::Read, Access::ReadWrite]
    }
}

/// One dispatch's inputs and output.
pub struct NormAdd<'a> {
    /// `[m, width]`: the rows to normalise.
    pub x: &'a Tensor,
    pub m: usize,
    pub width: usize,
    /// Holds the norm's `width` weights from `offset`.
    pub vectors: &'a Tensor,
    pub offset: usize,
    pub eps: f32,
    /// `[m, width]`: the residual stream the normalised rows are added to, or where they
    /// are stored.
    pub out: &'a Tensor,
    pub output: NormOutput,
}

/// Records `op` with the adapter's default shape ([`NormAddShape::default_for`]).
pub fn encode(gpu: &Gpu, rec: &mut Recorder, op: &NormAdd) {
    let shape = NormAddShape::default_for(gpu.cpu_shaped_defaults());
    encode_with(gpu, rec, op, shape);
}

/// Records `op` with `shape`. Panics (naming the problem) when a buffer is too small for
/// the rows or an index passes u32.
pub fn encode_with(gpu: &Gpu, rec: &mut Recorder, op: &NormAdd, shape: NormAddShape) {
    let (m, width) = (op.m, op.width);
    assert!(width > 0, "norm_add: width is 0");
    let values = m.checked_mul(width).expect("norm_add: m x width overflows");
    assert!(
        u32::try_from(values).is_ok() && u32::try_from(op.offset + width).is_ok(),
        "norm_add: {m}x{width} rows or the weights at {} index past u32",
        op.offset
    );
    for (name, t) in [("x", op.x), ("out", op.out)] {
        assert!(
            t.len >= values,
            "norm_add: {name} holds {} values, needs {m}x{width}",
            t.len
        );
    }
    assert!(
        op.vectors.len >= op.offset + width,
        "norm_add: the norm's {width} weights from {} are past its buffer of {}",
        op.offset,
        op.vectors.len
    );
    if m == 0 {
        return;
    }
    let params = Params {
        m: m as u32,
        width: width as u32,
        offset: op.offset as u32,
        eps: op.eps,
    };
    let workgroups = match shape {
        NormAddShape::RowPerInvocation => m.div_ceil(WORKGROUP),
        NormAddShape::RowPerWorkgroup => m,
    };
    rec.dispatch(
        &gpu.pipeline(&NormAddKernel {
            shape,
            output: op.output,
        }),
        bytemuck::bytes_of(&params),
        &[&op.x.buffer, &op.vectors.buffer, &op.out.buffer],
        grid(gpu, workgroups),
    );
}

/// One dispatch on the GPU, set up to be checked or timed: `x`, the norm's weights (after
/// `LEAD` values of 9.0 in their buffer, so that the offset is honoured) and the residual
/// stream as it is before the add (or the store), which every run starts from.
pub struct NormAddFixture {
    m: usize,
    width: usize,
    eps: f32,
    x: Tensor,
    vectors: Tensor,
    residual: Vec<f32>,
    out: Tensor,
    output: NormOutput,
}

/// Values before the norm's weights in a fixture's vectors buffer.
const LEAD: usize = 3;

impl NormAddFixture {
    /// `x` and `residual` are `[m, width]`, `weights` is `[width]`.
    pub fn new(
        gpu: &Gpu,
        (x, width): (&[f32], usize),
        (weights, eps): (&[f32], f32),
        residual: &[f32],
    ) -> NormAddFixture {
        assert!(
            width > 0 && x.len().is_multiple_of(width),
            "norm_add fixture: x is not whole rows of {width}"
        );
        assert_eq!(weights.len(), width, "norm_add fixture: weights");
        assert_eq!(residual.len(), x.len(), "norm_add fixture: residual");
        let mut vectors = vec![9.0f32; LEAD];
        vectors.extend(weights);
        NormAddFixture {
            m: x.len() / width,
            width,
            eps,
            x: gpu.upload(x),
            vectors: gpu.upload(&vectors),
            residual: residual.to_vec(),
            out: gpu.upload(residual),
            output: NormOutput::Add,
        }
    }

    /// The same dispatch storing the normalised rows over the residual stream instead.
    pub fn storing(self) -> NormAddFixture {
        NormAddFixture {
            output: NormOutput::Store,
            ..self
        }
    }

    /// Records the dispatch with `shape` (adding to the residual stream as it stands, or
    /// storing over it).
    pub fn encode(&self, gpu: &Gpu, rec: &mut Recorder, shape: NormAddShape) {
        let op = NormAdd {
            x: &self.x,
            m: self.m,
            width: self.width,
            vectors: &self.vectors,
            offset: LEAD,
            eps: self.eps,
            out: &self.out,
            output: self.output,
        };
        encode_with(gpu, rec, &op, shape);
    }

    /// Resets the residual stream, runs `shape` and returns the stream after the add (or
    /// the store).
    pub async fn run(&self, gpu: &Gpu, shape: NormAddShape) -> Result<Vec<f32>, SproutError> {
        gpu.write(&self.out, &self.residual);
        let mut rec = gpu.recorder();
        self.encode(gpu, &mut rec, shape);
        rec.submit();
        gpu.read_f32(&self.out).await
    }
}
