//! The shapes of the matmul kernel: which invocation computes which part of the product.
//!
//! Every shape runs the canonical order of `shaders/matmul/common.wgsl`, so the choice
//! between them is a matter of speed only: the defaults here are by adapter kind, and
//! `sprout tune` measures them on the adapter (`gpu::tuning`).

use serde::{Deserialize, Serialize};

use super::MATVEC;
use super::gemm;
use super::tile::{WORKGROUP as TILE_WORKGROUP, XLoads, entry_point};
use crate::gpu::context::Capabilities;

/// Most rows of x one `MatVec` workgroup serves (more rows take more workgroups).
pub const MATVEC_MAX_ROWS: u32 = 8;
/// `f32`s of workgroup memory the `MatVec` shape stages its parts in (8 KiB).
const MATVEC_SCRATCH: u32 = 2048;
/// Weight rows from which one row of x takes the 1 x 4 tile on CPU adapters: a vocabulary
/// projection (49152 rows for SmolLM2) still has 192 workgroups. For SmolLM2-135M's q8_0
/// vocabulary projection on llvmpipe the wider tile took 11.8-12.6 ms against the 1 x 2
/// tile's 14.4-16.6 ms (four runs of each interleaved in one process, twice).
pub const WIDE_MATVEC_MIN_ROWS: usize = 16384;

/// Weight rows up to which a weight counts as narrow (the default shapes spread it
/// differently): one CPU tile workgroup of 2 columns.
pub const NARROW_ROWS: usize = 2 * TILE_WORKGROUP as usize;

fn one_row_of_x() -> u32 {
    1
}

/// Which invocations compute which outputs, and how k is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum MatmulShape {
    /// CPU-shaped: each invocation computes `rows` rows of x by `cols` weight rows (`cols`
    /// even), walking all of k; 64 invocations a workgroup.
    Tile { rows: u32, cols: u32, loads: XLoads },
    /// GPU-shaped, for few rows: a workgroup of `wg` invocations owns `nr` weight rows (even,
    /// at most `wg / 8`, `8 * nr` dividing `wg`) and up to 8 rows of x; each invocation
    /// decodes one weight block at a time and computes its parts for `xr` of those rows of
    /// x (1, 2, 4 or 8; fewer when the workgroup has fewer rows), its subgroup sharing the
    /// loads; then the parts are folded in block order. A tune file written before `xr`
    /// existed reads as `xr = 1`, what those shapes ran.
    MatVec {
        wg: u32,
        nr: u32,
        #[serde(default = "one_row_of_x")]
        xr: u32,
    },
    /// GPU-shaped, for many rows: a 16 x 16 workgroup computes (16 * tm) rows of x by 64
    /// weight rows (`tm` 4 or 8), staging both in workgroup memory 16 values of k at a time.
    Gemm { tm: u32 },
}

impl MatmulShape {
    /// A short name for pipeline keys and reports.
    pub fn key(&self) -> String {
        match self {
            MatmulShape::Tile { rows, cols, loads } => format!("tile{rows}x{cols}-{loads:?}"),
            MatmulShape::MatVec { wg, nr, xr: 1 } => format!("matvec-wg{wg}-nr{nr}"),
            MatmulShape::MatVec { wg, nr, xr } => format!("matvec-wg{wg}-nr{nr}-xr{xr}"),
            MatmulShape::Gemm { tm } => format!("gemm-tm{tm}"),
        }
    }

    pub fn needs_subgroups(&self) -> bool {
        matches!(
            self,
            MatmulShape::Tile {
                loads: XLoads::Shuffled,
                ..
            }
        )
    }

    /// Whether the shape adds the LoRA term in its own body rather than through
    /// lora_emit.wgsl's wrapper of the epilogue.
    pub(super) fn inlines_lora(&self) -> bool {
        matches!(self, MatmulShape::Tile { .. })
    }

    /// Whether the shape's parameters are ones the kernels are written for.
    pub fn is_valid(&self) -> bool {
        match *self {
            MatmulShape::Tile { rows, cols, .. } => {
                (1..=4).contains(&rows) && (2..=4).contains(&cols) && cols.is_multiple_of(2)
            }
            MatmulShape::MatVec { wg, nr, xr } => {
                matches!(wg, 64 | 128 | 256)
                    && matches!(xr, 1 | 2 | 4 | 8)
                    && nr >= 2
                    && nr.is_multiple_of(2)
                    && wg.is_multiple_of(nr * MATVEC_MAX_ROWS)
            }
            MatmulShape::Gemm { tm } => tm == 4 || tm == 8,
        }
    }

    /// Whether the adapter can run this shape.
    pub fn runs_on(&self, caps: &Capabilities) -> bool {
        self.is_valid()
            && match self {
                MatmulShape::Tile { loads, .. } => loads.runs_on(caps),
                MatmulShape::MatVec { wg, .. } => *wg <= caps.max_workgroup_invocations,
                MatmulShape::Gemm { .. } => 256 <= caps.max_workgroup_invocations,
            }
    }

    /// Rows of x one workgroup serves for a dispatch of `m` rows (for `MatVec`, the
    /// smallest power of two up to 8 that holds them).
    pub fn rows_per_workgroup(&self, m: usize) -> u32 {
        match self {
            MatmulShape::Tile { rows, .. } => *rows,
            MatmulShape::MatVec { .. } => {
                (m.max(1) as u32).next_power_of_two().min(MATVEC_MAX_ROWS)
            }
            MatmulShape::Gemm { tm } => 16 * tm,
        }
    }

    /// The dispatch for `m` rows of x against `rows` weight rows.
    pub fn workgroups(&self, m: usize, rows: usize, mr: u32) -> [u32; 3] {
        let (m, rows) = (m as u32, rows as u32);
        match self {
            MatmulShape::Tile { rows: tr, cols, .. } => {
                [rows.div_ceil(TILE_WORKGROUP * cols), m.div_ceil(*tr), 1]
            }
            MatmulShape::MatVec { nr, .. } => [rows.div_ceil(*nr), m.div_ceil(mr), 1],
            MatmulShape::Gemm { tm } => [rows.div_ceil(64), m.div_ceil(16 * tm), 1],
        }
    }

    /// The WGSL constants the shape's body needs (`mr`: rows per `MatVec` workgroup).
    pub(super) fn constants(&self, mr: u32) -> String {
        match self {
            MatmulShape::Tile { .. } => String::new(),
            MatmulShape::MatVec { wg, nr, xr } => {
                // Both are powers of two: the smaller divides the larger.
                let xr = (*xr).min(mr);
                format!(
                    "const WG: u32 = {wg}u;\nconst MR: u32 = {mr}u;\nconst NR: u32 = {nr}u;\n\
                     const XR: u32 = {xr}u;\nconst PRO_ROWS: u32 = {mr}u;\n\
                     const SCRATCH: u32 = {MATVEC_SCRATCH}u;\n"
                )
            }
            MatmulShape::Gemm { .. } => String::new(),
        }
    }

    /// The shape's entry point and helpers (the tile's adds the LoRA term itself when
    /// `lora`; the others call lora_emit.wgsl's `emit_pair`).
    pub(super) fn body(&self, lora: bool) -> String {
        match self {
            MatmulShape::Tile { rows, cols, loads } => entry_point(*rows, *cols, *loads, lora),
            MatmulShape::MatVec { .. } => MATVEC.to_string(),
            MatmulShape::Gemm { tm } => gemm::entry_point(*tm),
        }
    }

    /// The shape a CPU adapter uses for `m` rows of x against `n` weight rows: today's
    /// tiles. A rollout's tail runs batches of two rows for many steps, where a 4-row tile
    /// computes twice the work and took 1.4x as long as a 2-row one on llvmpipe; a 3-row
    /// tile was no faster than the 4-row one for 3, 5 or 6 rows.
    ///
    /// A weight of at most [`NARROW_ROWS`] rows (a LoRA adapter's stacked A: 16 to 48 rows)
    /// takes 2 columns and direct loads of x: a workgroup of the 4-column tile covers 256
    /// weight rows, and with shuffled loads its invocations past the last row still walk
    /// all of k on clamped rows; with direct loads they leave at once. For SmolLM2-135M's
    /// rank-16 A products at 8 rows on lavapipe, the 4 x 2 direct tile took 0.34 ms (o,
    /// down) and 0.58 ms (q|k|v, gate|up with RMSNorm) a dispatch against 0.97 and 0.73 ms
    /// for the 4 x 2 shuffled one and 1.72 and 1.17 ms for the 4 x 4; MatVec (64, 2) took
    /// 1.45 and 3.66 ms.
    pub fn for_cpu(caps: &Capabilities, m: usize, n: usize) -> MatmulShape {
        let loads = match n <= NARROW_ROWS {
            true => XLoads::Direct,
            false => XLoads::best(caps),
        };
        let (rows, cols) = match m {
            0 | 1 if n >= WIDE_MATVEC_MIN_ROWS => (1, 4),
            0 | 1 => (1, 2),
            2 if n <= NARROW_ROWS => (2, 2),
            2 => (2, 4),
            _ if n <= NARROW_ROWS => (4, 2),
            _ => (4, 4),
        };
        MatmulShape::Tile { rows, cols, loads }
    }

    /// The shape a GPU uses for `m` rows of x against `n` weight rows before it is tuned:
    /// `MatVec` up to 8 rows (32 weight rows a workgroup for wide weights, 8 otherwise, so
    /// that narrow ones still spread over many workgroups); `Gemm` beyond.
    ///
    /// A weight of at most [`NARROW_ROWS`] rows (a LoRA adapter's A) takes MatVec at every
    /// row count, 2 weight rows a 64-invocation workgroup: its 16 to 48 rows then still
    /// make 8 to 24 workgroups per 8 rows of x, where 8 a workgroup made 2 to 6 and the
    /// Gemm tile's 64 columns would leave most of each workgroup idle.
    pub fn for_gpu(m: usize, n: usize, _k: usize) -> MatmulShape {
        if n <= NARROW_ROWS {
            MatmulShape::MatVec {
                wg: 64,
                nr: 2,
                xr: 1,
            }
        } else if m <= MATVEC_MAX_ROWS as usize {
            let nr = if n >= 4096 { 32 } else { 8 };
            MatmulShape::MatVec { wg: 256, nr, xr: 1 }
        } else if m < 128 {
            MatmulShape::Gemm { tm: 4 }
        } else {
            MatmulShape::Gemm { tm: 8 }
        }
    }

    /// The shapes `sprout tune` times for `m` rows of `k` values on an adapter.
    pub fn candidates(caps: &Capabilities, m: usize, n: usize, k: usize) -> Vec<MatmulShape> {
        let mut out = vec![MatmulShape::for_cpu(caps, m, n)];
        for (rows, cols) in [(1, 2), (1, 4), (2, 4), (4, 4)] {
            let tile = MatmulShape::Tile {
                rows,
                cols,
                loads: XLoads::best(caps),
            };
            if !out.contains(&tile) && rows as usize <= m.max(1) {
                out.push(tile);
            }
        }
        let _ = k;
        for (wg, nr) in [
            (64, 16),
            (128, 16),
            (128, 32),
            (256, 32),
            (256, 64),
            (128, 8),
        ] {
            let shape = MatmulShape::MatVec { wg, nr, xr: 1 };
            if !out.contains(&shape) {
                out.push(shape);
            }
        }
        // Each weight block decoded once for all the workgroup's rows of x.
        let mr = out
            .iter()
            .find(|s| matches!(s, MatmulShape::MatVec { .. }))
            .map_or(1, |s| s.rows_per_workgroup(m));
        if mr > 1 {
            for nr in [8, 32] {
                let shape = MatmulShape::MatVec {
                    wg: 256,
                    nr,
                    xr: mr,
                };
                if !out.contains(&shape) {
                    out.push(shape);
                }
            }
        }
        if m > 4 {
            out.push(MatmulShape::Gemm { tm: 4 });
        }
        if m > 32 {
            out.push(MatmulShape::Gemm { tm: 8 });
        }
        out.retain(|s| s.runs_on(caps));
        out
    }

    /// The whole space `sprout tune --budget-s` explores for `m` rows of `k` values against
    /// `n` weight rows: [`candidates`](Self::candidates) first (the likeliest winners), then
    /// every other `MatVec` (workgroup size, weight rows per workgroup, rows of x per
    /// invocation up to the rows a workgroup serves) and both GEMM tiles, each once.
    pub fn space(caps: &Capabilities, m: usize, n: usize, k: usize) -> Vec<MatmulShape> {
        let mut out = MatmulShape::candidates(caps, m, n, k);
        let mr = MatmulShape::MatVec {
            wg: 64,
            nr: 2,
            xr: 1,
        }
        .rows_per_workgroup(m);
        let mut more = Vec::new();
        for wg in [64, 128, 256] {
            for nr in [2, 4, 8, 16, 32] {
                for xr in [1, 2, 4, 8].into_iter().filter(|&xr| xr <= mr) {
                    more.push(MatmulShape::MatVec { wg, nr, xr });
                }
            }
        }
        more.extend([MatmulShape::Gemm { tm: 4 }, MatmulShape::Gemm { tm: 8 }]);
        for shape in more {
            if shape.runs_on(caps) && !out.contains(&shape) {
                out.push(shape);
            }
        }
        out
    }

    /// One of each kind of shape and tile, for validating every module.
    pub fn candidates_all() -> Vec<MatmulShape> {
        let mut out = Vec::new();
        for loads in XLoads::ALL {
            for (rows, cols) in [(1, 2), (1, 4), (2, 4), (4, 4)] {
                out.push(MatmulShape::Tile { rows, cols, loads });
            }
        }
        out.extend([
            // Every xr, over the workgroup sizes (sampled, not multiplied).
            MatmulShape::MatVec {
                wg: 64,
                nr: 2,
                xr: 1,
            },
            MatmulShape::MatVec {
                wg: 128,
                nr: 16,
                xr: 8,
            },
            MatmulShape::MatVec {
                wg: 256,
                nr: 8,
                xr: 2,
            },
            MatmulShape::MatVec {
                wg: 64,
                nr: 4,
                xr: 4,
            },
            MatmulShape::Gemm { tm: 4 },
            MatmulShape::Gemm { tm: 8 },
        ]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_candidate_and_default_is_a_valid_shape() {
        let caps = crate::gpu::tuning::tests_caps();
        for m in [1, 2, 3, 8, 9, 64, 512] {
            for (n, k) in [(64, 64), (576, 1536), (49152, 576)] {
                assert!(MatmulShape::for_gpu(m, n, k).is_valid(), "{m} {n}");
                assert!(MatmulShape::for_cpu(&caps, m, n).is_valid(), "{m} {n}");
                for s in MatmulShape::candidates(&caps, m, n, k) {
                    assert!(s.is_valid(), "{s:?}");
                }
            }
        }
        for s in MatmulShape::candidates_all() {
            assert!(s.is_valid(), "{s:?}");
        }
        for m in [1, 2, 8, 64] {
            let space = MatmulShape::space(&caps, m, 576, 1536);
            let candidates = MatmulShape::candidates(&caps, m, 576, 1536);
            assert_eq!(
                space[..candidates.len()],
                candidates[..],
                "candidates first"
            );
            for (i, s) in space.iter().enumerate() {
                assert!(s.runs_on(&caps), "{s:?}");
                assert!(!space[..i].contains(s), "{s:?} twice");
            }
            // Rows of x per invocation never exceed the rows of a workgroup.
            let xr_max = space
                .iter()
                .filter_map(|s| match s {
                    MatmulShape::MatVec { xr, .. } => Some(*xr),
                    _ => None,
                })
                .max();
            assert_eq!(xr_max, Some((m as u32).min(MATVEC_MAX_ROWS)), "m = {m}");
        }
        let matvec = |wg, nr, xr| MatmulShape::MatVec { wg, nr, xr };
        assert!(!matvec(64, 16, 1).is_valid());
        assert!(!matvec(128, 12, 1).is_valid());
        assert!(!matvec(128, 8, 3).is_valid());
        assert!(!matvec(128, 8, 16).is_valid());
    }

    #[test]
    fn narrow_weights_take_their_own_defaults() {
        let mut caps = crate::gpu::tuning::tests_caps();
        caps.subgroups = true;
        caps.subgroup_min_size = 8;
        for n in [16, 48, NARROW_ROWS] {
            for (m, rows) in [(1, 1), (2, 2), (8, 4), (512, 4)] {
                let direct = MatmulShape::Tile {
                    rows,
                    cols: 2,
                    loads: XLoads::Direct,
                };
                assert_eq!(MatmulShape::for_cpu(&caps, m, n), direct, "{m} {n}");
                let matvec = MatmulShape::MatVec {
                    wg: 64,
                    nr: 2,
                    xr: 1,
                };
                assert_eq!(MatmulShape::for_gpu(m, n, 1536), matvec, "{m} {n}");
            }
        }
        // Wider weights keep the shuffled 4-column tile.
        let wide = MatmulShape::for_cpu(&caps, 8, NARROW_ROWS + 2);
        assert!(matches!(
            wide,
            MatmulShape::Tile {
                cols: 4,
                loads: XLoads::Shuffled,
                ..
            }
        ));
    }

    #[test]
    fn matvec_serves_up_to_eight_rows_per_workgroup() {
        let shape = MatmulShape::MatVec {
            wg: 128,
            nr: 8,
            xr: 4,
        };
        assert!(shape.is_valid());
        for (m, mr) in [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 8), (64, 8)] {
            assert_eq!(shape.rows_per_workgroup(m), mr, "{m}");
        }
        assert_eq!(shape.workgroups(9, 576, 8), [72, 2, 1]);
        assert!(
            MatmulShape::MatVec {
                wg: 64,
                nr: 8,
                xr: 8
            }
            .is_valid()
        );
    }
}
