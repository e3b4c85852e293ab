//! `y = x · Wᵀ` for a weight in any stored format (shaders/matmul.wgsl).
//!
//! `x` is `[m, k]` f32, `W` is `[n, k]` (a linear layer's `[out, in]`), `y` is `[m, n]`.
//! Each invocation computes a tile of rows of `x` by weight rows (`matmul_tile` writes the
//! entry point). One row of `x` takes the matrix-vector path (a 1 x 2 tile, or 1 x 4
//! against a weight as wide as a vocabulary), more take the tiled path (2 x 4 for two rows,
//! 4 x 4 for more); on adapters with subgroups of 8 or more, x values are loaded once per
//! subgroup and shuffled. Every tile and load reduces in the same order, so a row's output
//! does not depend on the path, the adapter's features or the batch.

pub use super::matmul_tile::XLoads;
use super::matmul_tile::{MIN_SHUFFLE_SUBGROUP, entry_point};
use crate::gpu::context::Capabilities;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::with_weights;
use crate::gpu::{Gpu, GpuWeight, Recorder, Tensor};
use crate::model::format::WeightFormat;

const SOURCE: &str = include_str!("../../../shaders/matmul.wgsl");
const X_VEC4: &str = include_str!("../../../shaders/activations/vec4.wgsl");
const X_SCALAR: &str = include_str!("../../../shaders/activations/scalar.wgsl");
const WORKGROUP: u32 = 64;
/// Rows of `x` per invocation in the tiled path.
pub const TILE_ROWS: u32 = 4;
/// Rows of `x` per invocation in the tiled path for a batch of two.
pub const PAIR_ROWS: u32 = 2;
/// Weight rows per invocation in the tiled path.
pub const TILE_COLS: u32 = 4;
/// Weight rows per invocation in the matrix-vector path: two halve the loads of x, more
/// leave too few workgroups for the narrow projections.
pub const MATVEC_COLS: u32 = 2;
/// Weight rows from which one row of x takes `WideMatVec`: a vocabulary projection (49152
/// rows for SmolLM2) still has 192 workgroups of 4 weight rows per invocation. The model's
/// other projections (up to 1536 rows) keep `MatVec`.
pub const WIDE_MATVEC_MIN_ROWS: usize = 16384;

/// Which kernel computes the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulPath {
    /// One row of x by `MATVEC_COLS` weight rows per invocation (decode).
    MatVec,
    /// One row of x by `TILE_COLS` weight rows per invocation, for wide weights: each x
    /// value is loaded once for twice the weight rows. For SmolLM2-135M's q8_0 vocabulary
    /// projection (576 x 49152) on llvmpipe it took 11.8-12.6 ms against `MatVec`'s
    /// 14.4-16.6 ms, four runs of each interleaved in one process, twice; f16 31-33 ms
    /// against 31-43 ms.
    WideMatVec,
    /// The given rows of x (`PAIR_ROWS` or `TILE_ROWS`) by `TILE_COLS` weight rows per
    /// invocation: each weight is decoded once for all the rows and each x value loaded
    /// once for all the weight rows.
    Tiled(u32),
}

impl MatmulPath {
    pub const ALL: [MatmulPath; 4] = [
        MatmulPath::MatVec,
        MatmulPath::WideMatVec,
        MatmulPath::Tiled(PAIR_ROWS),
        MatmulPath::Tiled(TILE_ROWS),
    ];

    /// The path sprout uses for `m` rows of x against a weight of `n` rows. A rollout's
    /// tail runs batches of two rows for many steps, where a 4-row tile computes twice the
    /// work and took 1.4x as long as a 2-row one on llvmpipe; a 3-row tile was no faster
    /// than the 4-row one for 3, 5 or 6 rows, so other batches take 4-row tiles.
    pub fn for_shape(m: usize, n: usize) -> Self {
        match m {
            0 | 1 if n >= WIDE_MATVEC_MIN_ROWS => MatmulPath::WideMatVec,
            0 | 1 => MatmulPath::MatVec,
            2 => MatmulPath::Tiled(PAIR_ROWS),
            _ => MatmulPath::Tiled(TILE_ROWS),
        }
    }

    /// (rows of x, weight rows) per invocation.
    fn tile(self) -> (u32, u32) {
        match self {
            MatmulPath::MatVec => (1, MATVEC_COLS),
            MatmulPath::WideMatVec => (1, TILE_COLS),
            MatmulPath::Tiled(rows) => (rows, TILE_COLS),
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

impl XLoads {
    pub const ALL: [XLoads; 2] = [XLoads::Direct, XLoads::Shuffled];

    /// Whether the adapter can run these loads.
    pub fn runs_on(self, caps: &Capabilities) -> bool {
        match self {
            XLoads::Direct => true,
            XLoads::Shuffled => caps.subgroups && caps.subgroup_min_size >= MIN_SHUFFLE_SUBGROUP,
        }
    }

    /// The loads sprout uses on an adapter: shuffled where it can.
    pub fn best(caps: &Capabilities) -> XLoads {
        if XLoads::Shuffled.runs_on(caps) {
            XLoads::Shuffled
        } else {
            XLoads::Direct
        }
    }
}

pub fn spec(format: WeightFormat, path: MatmulPath, loads: XLoads, x: XReader) -> KernelSpec {
    let (tm, tn) = path.tile();
    KernelSpec {
        key: format!("matmul/{tm}x{tn}/{loads:?}/{}/{x:?}", format.name()),
        source: Box::new(move || {
            let entry = entry_point(tm, tn, loads);
            with_weights(&format!("{SOURCE}\n{entry}\n{}", x.source()), format)
        }),
        entry: "matmul",
        storage: &[Access::Read, Access::Read, Access::ReadWrite],
    }
}

/// Records `y[m, n] = x[m, k] · W[n, k]ᵀ` with the path chosen for `m`.
pub fn encode(gpu: &Gpu, rec: &mut Recorder, x: &Tensor, m: usize, weight: &GpuWeight, y: &Tensor) {
    let loads = XLoads::best(&gpu.caps);
    encode_path(
        gpu,
        rec,
        MatmulPath::for_shape(m, weight.rows),
        loads,
        x,
        m,
        weight,
        y,
    )
}

/// As `encode`, on an explicit path and loads (tests check them all). Panics if the
/// adapter cannot run `loads`.
#[allow(clippy::too_many_arguments)]
pub fn encode_path(
    gpu: &Gpu,
    rec: &mut Recorder,
    path: MatmulPath,
    loads: XLoads,
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
    assert!(
        loads.runs_on(&gpu.caps),
        "matmul: {loads:?} x loads need subgroups of at least {MIN_SHUFFLE_SUBGROUP}"
    );
    if m == 0 {
        return;
    }
    let kernel = gpu.pipeline(&spec(weight.format, path, loads, XReader::for_cols(k)));
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
        let (tm, tn) = path.tile();
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &[&x.buffer, &part.buffer, &y.buffer],
            [
                (part.rows as u32).div_ceil(WORKGROUP * tn),
                (m as u32).div_ceil(tm),
                1,
            ],
        );
    }
}

/// Every WGSL module this kernel family builds without optional features (for validation).
pub fn modules() -> Vec<(String, String)> {
    modules_with(XLoads::Direct)
}

/// The modules that load x through subgroups (validated with subgroup capabilities).
pub fn subgroup_modules() -> Vec<(String, String)> {
    modules_with(XLoads::Shuffled)
}

fn modules_with(loads: XLoads) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for format in WeightFormat::ALL {
        for x in XReader::ALL {
            for path in MatmulPath::ALL {
                let s = spec(format, path, loads, x);
                out.push((
                    format!("matmul+{format}+{path:?}+{loads:?}+{x:?}"),
                    (s.source)(),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_is_a_matvec_two_a_pair_and_more_whole_tiles() {
        assert_eq!(MatmulPath::for_shape(1, 1536), MatmulPath::MatVec);
        assert_eq!(
            MatmulPath::for_shape(1, WIDE_MATVEC_MIN_ROWS - 1),
            MatmulPath::MatVec
        );
        assert_eq!(MatmulPath::for_shape(1, 49152), MatmulPath::WideMatVec);
        for n in [576, 49152] {
            assert_eq!(MatmulPath::for_shape(2, n), MatmulPath::Tiled(PAIR_ROWS));
            for m in [3, 4, 5, 64] {
                assert_eq!(
                    MatmulPath::for_shape(m, n),
                    MatmulPath::Tiled(TILE_ROWS),
                    "{m}"
                );
            }
        }
        for (m, n) in [(1, 64), (1, 49152), (2, 64), (8, 64)] {
            assert!(MatmulPath::ALL.contains(&MatmulPath::for_shape(m, n)));
        }
    }
}
