//! RMSNorm (shaders/rmsnorm.wgsl): `out = x / sqrt(mean(x²) + eps) * weight`, per row.
//!
//! `x` and `out` are `[m, d]` f32, `weight` is `[d]` f32. One workgroup per row reduces
//! in a fixed order (strided sequential partial sums, then a fixed tree), so a row's
//! result is bitwise independent of `m` and of the other rows.

use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/rmsnorm.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    d: u32,
    eps: f32,
    _pad: u32,
}

pub fn spec() -> KernelSpec {
    KernelSpec {
        key: "rmsnorm".to_string(),
        source: Box::new(|| SOURCE.into()),
        entry: "rmsnorm",
        storage: &[Access::Read, Access::Read, Access::ReadWrite],
    }
}

/// Records `out[m, d] = rmsnorm(x[m, d]) * weight[d]` (`out` must be its own buffer).
#[allow(clippy::too_many_arguments)]
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    x: &Tensor,
    weight: &Tensor,
    eps: f32,
    out: &Tensor,
    m: usize,
    d: usize,
) {
    assert!(d > 0, "rmsnorm: rows must hold at least one value");
    assert!(
        x.len >= m * d,
        "rmsnorm: x holds {} values, needs {m}x{d}",
        x.len
    );
    assert!(
        weight.len >= d,
        "rmsnorm: weight holds {} values, needs {d}",
        weight.len
    );
    assert!(
        out.len >= m * d,
        "rmsnorm: out holds {} values, needs {m}x{d}",
        out.len
    );
    let params = Params {
        m: m as u32,
        d: d as u32,
        eps,
        _pad: 0,
    };
    rec.dispatch(
        &gpu.pipeline(&spec()),
        bytemuck::bytes_of(&params),
        &[&x.buffer, &weight.buffer, &out.buffer],
        grid(gpu, m),
    );
}
