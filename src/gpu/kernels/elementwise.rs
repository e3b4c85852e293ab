//! Elementwise kernels (shaders/elementwise.wgsl): the SwiGLU gate `out = silu(gate) * up`,
//! the in-place residual add `a += b`, the in-place bias add `x[m, cols] += bias[cols]`,
//! and the row gather `dst[r, :] = src[rows[r], :]` (which picks the rows of a varlen batch
//! that need logits).
//!
//! Any length works: the last workgroup is partial, and more workgroups than the adapter
//! allows per dimension are folded into a 2D grid ([`grid`], also used by the other
//! one-invocation-per-element and one-workgroup-per-row kernels). No reductions, so every
//! value is independent of the length and of its neighbours; the gather is a bitwise copy.

use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/elementwise.wgsl");
/// Invocations per workgroup (`WG` in the shader).
pub const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    cols: u32,
    _pad: [u32; 2],
}

/// The kernels of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elementwise {
    SiluGate,
    ResidualAdd,
    AddBias,
    GatherRows,
}

impl Elementwise {
    pub const ALL: [Elementwise; 4] = [
        Elementwise::SiluGate,
        Elementwise::ResidualAdd,
        Elementwise::AddBias,
        Elementwise::GatherRows,
    ];

    fn entry(self) -> &'static str {
        match self {
            Elementwise::SiluGate => "silu_gate",
            Elementwise::ResidualAdd => "residual_add",
            Elementwise::AddBias => "add_bias",
            Elementwise::GatherRows => "gather_rows",
        }
    }
}

pub fn spec(kernel: Elementwise) -> KernelSpec {
    KernelSpec {
        key: format!("elementwise/{}", kernel.entry()),
        source: Box::new(|| SOURCE.into()),
        entry: kernel.entry(),
        storage: match kernel {
            Elementwise::SiluGate | Elementwise::GatherRows => {
                &[Access::ReadWrite, Access::Read, Access::Read]
            }
            Elementwise::ResidualAdd | Elementwise::AddBias => &[Access::ReadWrite, Access::Read],
        },
    }
}

fn dispatch(
    gpu: &Gpu,
    rec: &mut Recorder,
    kernel: Elementwise,
    n: usize,
    cols: usize,
    buffers: &[&wgpu::Buffer],
) {
    let n32 = u32::try_from(n).expect("elementwise: more than 2^32 elements");
    let params = Params {
        n: n32,
        cols: cols as u32,
        _pad: [0; 2],
    };
    rec.dispatch(
        &gpu.pipeline(&spec(kernel)),
        bytemuck::bytes_of(&params),
        buffers,
        grid(gpu, n.div_ceil(WORKGROUP as usize)),
    );
}

/// Records `out[i] = silu(gate[i]) * up[i]` for `i < n` (`out` must be its own buffer).
pub fn encode_silu_gate(
    gpu: &Gpu,
    rec: &mut Recorder,
    gate: &Tensor,
    up: &Tensor,
    out: &Tensor,
    n: usize,
) {
    assert!(
        gate.len >= n,
        "silu_gate: gate holds {} values, needs {n}",
        gate.len
    );
    assert!(
        up.len >= n,
        "silu_gate: up holds {} values, needs {n}",
        up.len
    );
    assert!(
        out.len >= n,
        "silu_gate: out holds {} values, needs {n}",
        out.len
    );
    dispatch(
        gpu,
        rec,
        Elementwise::SiluGate,
        n,
        0,
        &[&out.buffer, &gate.buffer, &up.buffer],
    );
}

/// Records `a[i] += b[i]` for `i < n`, in place (`b` must be another buffer).
pub fn encode_residual_add(gpu: &Gpu, rec: &mut Recorder, a: &Tensor, b: &Tensor, n: usize) {
    assert!(
        a.len >= n,
        "residual_add: a holds {} values, needs {n}",
        a.len
    );
    assert!(
        b.len >= n,
        "residual_add: b holds {} values, needs {n}",
        b.len
    );
    dispatch(
        gpu,
        rec,
        Elementwise::ResidualAdd,
        n,
        0,
        &[&a.buffer, &b.buffer],
    );
}

/// Records `x[r, c] += bias[c]` for `m` rows of `cols` values, in place.
pub fn encode_add_bias(
    gpu: &Gpu,
    rec: &mut Recorder,
    x: &Tensor,
    bias: &Tensor,
    m: usize,
    cols: usize,
) {
    assert!(cols > 0, "add_bias: the bias is empty");
    assert!(
        x.len >= m * cols,
        "add_bias: x holds {} values, needs {m}x{cols}",
        x.len
    );
    assert!(
        bias.len >= cols,
        "add_bias: bias holds {} values, needs {cols}",
        bias.len
    );
    dispatch(
        gpu,
        rec,
        Elementwise::AddBias,
        m * cols,
        cols,
        &[&x.buffer, &bias.buffer],
    );
}

/// Records `dst[r, :] = src[rows[r], :]` for `r in 0..m`, rows of `width` f32 (a bitwise
/// copy). `rows` holds `m` u32 row indices into `src`; an index past `src` gives a row of
/// zeros. `dst` must be its own buffer.
pub fn encode_gather_rows(
    gpu: &Gpu,
    rec: &mut Recorder,
    src: &Tensor,
    rows: &Tensor,
    m: usize,
    width: usize,
    dst: &Tensor,
) {
    assert!(width > 0, "gather_rows: width is 0");
    assert!(
        src.len >= width,
        "gather_rows: src holds {} values, less than one row of {width}",
        src.len
    );
    assert!(
        u32::try_from(src.len).is_ok(),
        "gather_rows: src holds {} values, past u32 indexing",
        src.len
    );
    assert!(
        rows.len >= m,
        "gather_rows: rows hold {} indices, need {m}",
        rows.len
    );
    assert!(
        dst.len >= m * width,
        "gather_rows: dst holds {} values, needs {m}x{width}",
        dst.len
    );
    dispatch(
        gpu,
        rec,
        Elementwise::GatherRows,
        m * width,
        width,
        &[&dst.buffer, &src.buffer, &rows.buffer],
    );
}
