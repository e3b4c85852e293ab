//! Matmul for every weight format and every shape (the CPU-shaped tiles with both x loads,
//! the GPU-shaped matrix-vector and GEMM shapes, forced here whatever the adapter): each
//! against the reference; all shapes bitwise equal to one another on the same product; a
//! row bitwise the same alone and among 64 on every shape; and weights split into parts.

use sprout::formats::{WeightFormat, dequantize, quantize};
use sprout::gpu::kernels::matmul::{self, Matmul, MatmulShape, Output, XLoads};
use sprout::gpu::{Gpu, GpuWeight};
use sprout::reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32};

/// Dequantized weights are exact on both sides, so only f32 summation differs.
pub const TOLERANCE: f64 = 1e-9;

/// (m, k, n): decode and prefill shapes, weight rows that fill no workgroup or tile evenly
/// (odd ones too), k of one block and of several.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 64, 64),
    (1, 96, 70),
    (3, 128, 33),
    (8, 64, 130),
    (13, 96, 130),
    (64, 160, 67),
    (70, 32, 66),
];
/// For the float formats: k not a multiple of 32, or of 4.
const ODD_K: &[(usize, usize, usize)] = &[(1, 7, 6), (5, 37, 19), (9, 3, 66), (20, 45, 10)];

/// One product to compute: `x` is `[m, k]`, the weight `[n, k]` stored as `bytes` in
/// `format`, and `w` those bytes dequantized (the reference's view).
#[derive(Clone)]
pub struct Problem {
    pub format: WeightFormat,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub x: Vec<f32>,
    pub bytes: Vec<u8>,
    pub w: Vec<f32>,
}

impl Problem {
    pub fn new(format: WeightFormat, m: usize, k: usize, n: usize, seed: u64) -> Problem {
        let mut rng = SplitMix64::new(seed);
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

    pub fn upload(&self, gpu: &Gpu, limit: Option<u64>) -> GpuWeight {
        let (format, k, n) = (self.format, self.k, self.n);
        match limit {
            Some(l) => GpuWeight::upload_with_limit(gpu, format, &self.bytes, n, k, l),
            None => GpuWeight::upload(gpu, format, &self.bytes, n, k),
        }
        .unwrap()
    }

    /// Runs on `shape`; `limit` caps each weight part's bytes (to force splitting).
    fn run(&self, gpu: &Gpu, shape: MatmulShape, limit: Option<u64>) -> Vec<f32> {
        let weight = self.upload(gpu, limit);
        let x = gpu.upload(&self.x);
        let y = gpu.upload(&vec![f32::NAN; self.m * self.n]);
        let mut rec = gpu.recorder();
        let op = Matmul {
            x: &x,
            m: self.m,
            weight: &weight,
            norm: None,
            gather: None,
            output: Output::Store(&y),
        };
        matmul::encode(gpu, &mut rec, &op, shape);
        rec.submit();
        read_f32(gpu, &y)
    }
}

/// Every shape there is, GPU-shaped ones included.
pub fn all_shapes() -> Vec<MatmulShape> {
    MatmulShape::candidates_all()
}

/// `case`, restricted to adapters that can run `shape`.
pub fn for_shape(case: Case, shape: MatmulShape) -> Case {
    if shape.needs_subgroups() {
        case.needing("subgroups of 8 or more", shuffles)
    } else {
        case
    }
}

fn shuffles(gpu: &Gpu) -> bool {
    XLoads::Shuffled.runs_on(&gpu.caps)
}

/// The shapes `gpu` can run.
pub fn shapes_on(gpu: &Gpu) -> Vec<MatmulShape> {
    all_shapes()
        .into_iter()
        .filter(|s| s.runs_on(&gpu.caps))
        .collect()
}

fn exact() -> Outcome {
    Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    }
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for format in WeightFormat::ALL {
        let mut problems = SHAPES.to_vec();
        if !format.is_quantized() {
            problems.extend_from_slice(ODD_K);
        }
        for shape in all_shapes() {
            for &(m, k, n) in &problems {
                let name = format!("{format}/{}/m{m}_k{k}_n{n}", shape.key());
                let case = Case::new("matmul", name, move |gpu| {
                    let p = Problem::new(format, m, k, n, (m * 1000 + k * 10 + n) as u64);
                    check_close(&p.run(gpu, shape, None), &p.reference(), TOLERANCE)
                });
                cases.push(for_shape(case, shape));
            }
        }
        // Every shape the adapter runs gives bitwise the same products.
        for &(m, k, n) in &problems {
            let name = format!("{format}/shapes-agree/m{m}_k{k}_n{n}");
            cases.push(Case::new("matmul", name, move |gpu| {
                let p = Problem::new(format, m, k, n, (m * 7 + k * 3 + n) as u64);
                let shapes = shapes_on(gpu);
                let first = p.run(gpu, shapes[0], None);
                let outcome = check_close(&first, &p.reference(), TOLERANCE)?;
                for &shape in &shapes[1..] {
                    check_bitwise(
                        &format!("{} vs {}", shape.key(), shapes[0].key()),
                        &p.run(gpu, shape, None),
                        &first,
                    )?;
                }
                Ok(outcome)
            }));
        }
        // A weight larger than the binding limit is split into parts by rows (each part
        // starting on an even row, for the pairwise epilogues).
        cases.push(Case::new(
            "matmul",
            format!("{format}/split/m5_k64_n37"),
            move |gpu| {
                let p = Problem::new(format, 5, 64, 37, 7);
                let limit = (format.row_bytes(p.k).unwrap() * 8) as u64 + 3;
                let shape = MatmulShape::Gemm { tm: 4 };
                let whole = p.run(gpu, shape, None);
                for shape in shapes_on(gpu) {
                    let split = p.run(gpu, shape, Some(limit));
                    check_bitwise(&format!("{} split vs whole", shape.key()), &split, &whole)?;
                }
                check_close(&whole, &p.reference(), TOLERANCE)
            },
        ));
        // Batch invariance: every row of a 64-row batch equals that row computed alone and
        // inside batches of other sizes, on every shape, whichever shape ran the batch.
        for batch_shape in all_shapes() {
            let name = format!("{format}/batch-invariance/{}", batch_shape.key());
            let case = Case::new("matmul", name, move |gpu| {
                let p = Problem::new(format, 64, 96, 70, 11);
                let batch = p.run(gpu, batch_shape, None);
                for (first, count) in [(0, 1), (37, 1), (63, 1), (5, 3), (20, 13), (30, 8)] {
                    for shape in shapes_on(gpu) {
                        check_bitwise(
                            &format!(
                                "rows {first}..{} on {} vs in a batch of 64 on {}",
                                first + count,
                                shape.key(),
                                batch_shape.key()
                            ),
                            &p.rows(first, count).run(gpu, shape, None),
                            &batch[first * p.n..(first + count) * p.n],
                        )?;
                    }
                }
                Ok(exact())
            });
            cases.push(for_shape(case, batch_shape));
        }
    }
    cases
}
