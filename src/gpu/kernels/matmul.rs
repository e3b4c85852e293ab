//! `y = x · Wᵀ` for a weight in any stored format (shaders/matmul.wgsl).
//!
//! `x` is `[m, k]` f32, `W` is `[n, k]` (a linear layer's `[out, in]`), `y` is `[m, n]`.
//! One row of `x` takes the matrix-vector path, more take the tiled path; both reduce in
//! the same order, so a row's output does not depend on the path or the batch.

use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::with_weights;
use crate::gpu::{Gpu, GpuWeight, Tensor};
use crate::model::format::WeightFormat;

const SOURCE: &str = include_str!("../../../shaders/matmul.wgsl");
const X_VEC4: &str = include_str!("../../../shaders/activations/vec4.wgsl");
const X_SCALAR: &str = include_str!("../../../shaders/activations/scalar.wgsl");
const WORKGROUP: u32 = 64;
/// Rows of `x` per invocation in the tiled path (`TM` in the shader).
pub const TILE_ROWS: u32 = 8;

/// Which kernel computes the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulPath {
    /// One output per invocation (decode).
    MatVec,
    /// `TILE_ROWS` rows of x per invocation, each weight loaded once for all (prefill).
    Tiled,
}

impl MatmulPath {
    pub const ALL: [MatmulPath; 2] = [MatmulPath::MatVec, MatmulPath::Tiled];

    /// The path sprout uses for `m` rows.
    pub fn for_rows(m: usize) -> Self {
        if m == 1 {
            MatmulPath::MatVec
        } else {
            MatmulPath::Tiled
        }
    }

    fn entry(self) -> &'static str {
        match self {
            MatmulPath::MatVec => "matvec",
            MatmulPath::Tiled => "matmul_tiled",
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    k: u32,
    rows: u32,
    n_offset: u32,
    n_total: u32,
    row_bytes: u32,
    _pad: [u32; 2],
}

/// How the kernel reads `x`: four values per load when every row starts 16-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XReader {
    Vec4,
    Scalar,
}

impl XReader {
    pub const ALL: [XReader; 2] = [XReader::Vec4, XReader::Scalar];

    pub fn for_cols(k: usize) -> Self {
        if k.is_multiple_of(4) {
            XReader::Vec4
        } else {
            XReader::Scalar
        }
    }

    fn source(self) -> &'static str {
        match self {
            XReader::Vec4 => X_VEC4,
            XReader::Scalar => X_SCALAR,
        }
    }
}

pub fn spec(format: WeightFormat, path: MatmulPath, x: XReader) -> KernelSpec {
    KernelSpec {
        key: format!("matmul/{}/{}/{x:?}", path.entry(), format.name()),
        source: with_weights(&format!("{SOURCE}\n{}", x.source()), format),
        entry: path.entry(),
        storage: &[Access::Read, Access::Read, Access::ReadWrite],
    }
}

/// Records `y[m, n] = x[m, k] · W[n, k]ᵀ` with the path chosen for `m`.
pub fn encode(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    x: &Tensor,
    m: usize,
    weight: &GpuWeight,
    y: &Tensor,
) {
    encode_path(gpu, encoder, MatmulPath::for_rows(m), x, m, weight, y)
}

/// As `encode`, on an explicit path (tests check both).
pub fn encode_path(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    path: MatmulPath,
    x: &Tensor,
    m: usize,
    weight: &GpuWeight,
    y: &Tensor,
) {
    let k = weight.cols;
    assert!(
        x.len >= m * k,
        "matmul: x holds {} values, needs {m}x{k}",
        x.len
    );
    assert!(
        y.len >= m * weight.rows,
        "matmul: y holds {} values, needs {m}x{}",
        y.len,
        weight.rows
    );
    if m == 0 {
        return;
    }
    let kernel = gpu.pipeline(&spec(weight.format, path, XReader::for_cols(k)));
    for part in &weight.parts {
        let params = Params {
            m: m as u32,
            k: k as u32,
            rows: part.rows as u32,
            n_offset: part.first_row as u32,
            n_total: weight.rows as u32,
            row_bytes: weight.row_bytes as u32,
            _pad: [0; 2],
        };
        let groups_y = match path {
            MatmulPath::MatVec => m as u32,
            MatmulPath::Tiled => (m as u32).div_ceil(TILE_ROWS),
        };
        gpu.dispatch(
            encoder,
            &kernel,
            bytemuck::bytes_of(&params),
            &[&x.buffer, &part.buffer, &y.buffer],
            [(part.rows as u32).div_ceil(WORKGROUP), groups_y, 1],
        );
    }
}

/// Every WGSL module this kernel family builds (for validation).
pub fn modules() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for format in WeightFormat::ALL {
        for x in XReader::ALL {
            let s = spec(format, MatmulPath::MatVec, x);
            out.push((format!("matmul+{format}+{x:?}"), s.source));
        }
    }
    out
}
