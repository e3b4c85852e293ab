//! Matmul for every weight format: every path and both ways of loading x against the
//! reference, splitting of large weights, and batch invariance (a row is bitwise the same
//! alone and among 64, on every path, whichever way x was loaded).

use sprout::gpu::kernels::matmul::{MatmulPath, TILE_ROWS, XLoads, encode_path};
use sprout::gpu::{Gpu, GpuWeight};
use sprout::model::format::{WeightFormat, dequantize, quantize};
use sprout::reference;

use crate::common::{Case, Outcome, Rng, check_bitwise, check_close, read_f32};

/// Dequantized weights are exact on both sides, so only f32 summation differs.
const TOLERANCE: f64 = 1e-9;

/// (m, k, n): decode and prefill shapes, rows not multiples of 64 or of the tile, and
/// (for the float formats) columns not multiples of 4.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 64, 64),
    (1, 96, 70),
    (3, 128, 33),
    (13, 96, 130),
    (64, 160, 67),
];
const ODD_K: &[(usize, usize, usize)] = &[(1, 7, 5), (5, 37, 19), (9, 3, 66)];

/// One product to compute: `x` is `[m, k]`, the weight `[n, k]` stored as `bytes` in
/// `format`, and `w` those bytes dequantized (the reference's view).
#[derive(Clone)]
struct Problem {
    format: WeightFormat,
    m: usize,
    k: usize,
    n: usize,
    x: Vec<f32>,
    bytes: Vec<u8>,
    w: Vec<f32>,
}

impl Problem {
    fn new(format: WeightFormat, m: usize, k: usize, n: usize, seed: u64) -> Problem {
        let mut rng = Rng::new(seed);
        let x = rng.vec(m * k, 1.0);
        let raw = rng.vec(n * k, 0.5);
        let bytes = quantize(format, &raw, k).unwrap();
        let w = dequantize(format, &bytes, n, k).unwrap();
        Problem {
            format,
            m,
            k,
            n,
            x,
            bytes,
            w,
        }
    }

    /// The same weight with only rows `first..first + count` of `x`.
    fn rows(&self, first: usize, count: usize) -> Problem {
        Problem {
            m: count,
            x: self.x[first * self.k..(first + count) * self.k].to_vec(),
            ..self.clone()
        }
    }

    fn reference(&self) -> Vec<f32> {
        reference::matmul::matmul(&self.x, &self.w, self.m, self.k, self.n)
    }

    /// Runs on `path` with `loads`; `limit` caps each weight part's bytes (to force
    /// splitting).
    fn run(&self, gpu: &Gpu, path: MatmulPath, loads: XLoads, limit: Option<u64>) -> Vec<f32> {
        let (format, k, n) = (self.format, self.k, self.n);
        let weight = match limit {
            Some(l) => GpuWeight::upload_with_limit(gpu, format, &self.bytes, n, k, l),
            None => GpuWeight::upload(gpu, format, &self.bytes, n, k),
        }
        .unwrap();
        let x = gpu.upload(&self.x);
        let y = gpu.zeros(self.m * n);
        let mut rec = gpu.recorder();
        encode_path(gpu, &mut rec, path, loads, &x, self.m, &weight, &y);
        rec.submit();
        read_f32(gpu, &y)
    }
}

fn shuffles(gpu: &Gpu) -> bool {
    XLoads::Shuffled.runs_on(&gpu.caps)
}

/// `case`, restricted to adapters that can run `loads`.
fn for_loads(case: Case, loads: XLoads) -> Case {
    match loads {
        XLoads::Direct => case,
        XLoads::Shuffled => case.needing("subgroups of 8 or more", shuffles),
    }
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for format in WeightFormat::ALL {
        let mut shapes = SHAPES.to_vec();
        if !format.is_quantized() {
            shapes.extend_from_slice(ODD_K);
        }
        for loads in XLoads::ALL {
            for path in MatmulPath::ALL {
                for &(m, k, n) in &shapes {
                    let name = format!("{format}/{path:?}/{loads:?}/m{m}_k{k}_n{n}");
                    let case = Case::new("matmul", name, move |gpu| {
                        let p = Problem::new(format, m, k, n, (m * 1000 + k * 10 + n) as u64);
                        check_close(&p.run(gpu, path, loads, None), &p.reference(), TOLERANCE)
                    });
                    cases.push(for_loads(case, loads));
                }
            }
        }
        // A weight larger than the binding limit is split into parts by rows.
        cases.push(Case::new(
            "matmul",
            format!("{format}/split/m5_k64_n37"),
            move |gpu| {
                let p = Problem::new(format, 5, 64, 37, 7);
                let limit = (format.row_bytes(p.k).unwrap() * 8) as u64 + 3;
                let whole = p.run(gpu, MatmulPath::Tiled(TILE_ROWS), XLoads::Direct, None);
                let split = p.run(
                    gpu,
                    MatmulPath::Tiled(TILE_ROWS),
                    XLoads::Direct,
                    Some(limit),
                );
                check_bitwise("split vs whole", &split, &whole)?;
                check_close(&split, &p.reference(), TOLERANCE)
            },
        ));
        // Batch invariance: every row of a 64-row batch equals that row computed alone, on
        // the matrix-vector path, and inside batches of other sizes, with these loads; and
        // shuffled loads give bitwise the results of direct ones.
        for loads in XLoads::ALL {
            let case = Case::new(
                "matmul",
                format!("{format}/batch-invariance/{loads:?}"),
                move |gpu| {
                    let p = Problem::new(format, 64, 96, 70, 11);
                    let batch = p.run(gpu, MatmulPath::Tiled(TILE_ROWS), loads, None);
                    if loads == XLoads::Shuffled {
                        let direct = p.run(gpu, MatmulPath::Tiled(TILE_ROWS), XLoads::Direct, None);
                        check_bitwise("shuffled vs direct loads", &batch, &direct)?;
                    }
                    for (first, count) in [(0, 1), (37, 1), (63, 1), (5, 3), (20, 13)] {
                        for path in MatmulPath::ALL {
                            check_bitwise(
                                &format!(
                                    "rows {first}..{} on {path:?} vs in a batch of 64",
                                    first + count
                                ),
                                &p.rows(first, count).run(gpu, path, loads, None),
                                &batch[first * p.n..(first + count) * p.n],
                            )?;
                        }
                    }
                    Ok(Outcome {
                        nmse: 0.0,
                        tolerance: TOLERANCE,
                    })
                },
            );
            cases.push(for_loads(case, loads));
        }
    }
    cases
}
