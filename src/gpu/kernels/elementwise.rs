//! Elementwise kernels (shaders/elementwise.wgsl): the SwiGLU gate `out = silu(gate) * up`
//! and the in-place residual add `a += b`.
//!
//! Any length works: the last workgroup is partial, and more workgroups than the adapter
//! allows per dimension are folded into a 2D grid ([`grid`], also used by the other
//! one-invocation-per-element and one-workgroup-per-row kernels). No reductions, so every
//! value is independent of the length and of its neighbours.

use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/elementwise.wgsl");
/// Invocations per workgroup (`WG` in the shader).
pub const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// The kernels of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elementwise {
    SiluGate,
    ResidualAdd,
}

impl Elementwise {
    pub const ALL: [Elementwise; 2] = [Elementwise::SiluGate, Elementwise::ResidualAdd];

    fn entry(self) -> &'static str {
        match self {
            Elementwise::SiluGate => "silu_gate",
            Elementwise::ResidualAdd => "residual_add",
        }
    }
}

pub fn spec(kernel: Elementwise) -> KernelSpec {
    KernelSpec {
        key: format!("elementwise/{}", kernel.entry()),
        source: SOURCE.to_string(),
        entry: kernel.entry(),
        storage: match kernel {
            Elementwise::SiluGate => &[Access::ReadWrite, Access::Read, Access::Read],
            Elementwise::ResidualAdd => &[Access::ReadWrite, Access::Read],
        },
    }
}

fn dispatch(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    kernel: Elementwise,
    n: usize,
    buffers: &[&wgpu::Buffer],
) {
    let n32 = u32::try_from(n).expect("elementwise: more than 2^32 elements");
    let params = Params {
        n: n32,
        _pad: [0; 3],
    };
    gpu.dispatch(
        encoder,
        &gpu.pipeline(&spec(kernel)),
        bytemuck::bytes_of(&params),
        buffers,
        grid(gpu, n.div_ceil(WORKGROUP as usize)),
    );
}

/// Records `out[i] = silu(gate[i]) * up[i]` for `i < n` (`out` must be its own buffer).
pub fn encode_silu_gate(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
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
        encoder,
        Elementwise::SiluGate,
        n,
        &[&out.buffer, &gate.buffer, &up.buffer],
    );
}

/// Records `a[i] += b[i]` for `i < n`, in place (`b` must be another buffer).
pub fn encode_residual_add(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    a: &Tensor,
    b: &Tensor,
    n: usize,
) {
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
        encoder,
        Elementwise::ResidualAdd,
        n,
        &[&a.buffer, &b.buffer],
    );
}
