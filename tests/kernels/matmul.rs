//! Matmul for every weight format and every shape (the CPU-shaped tiles with both x loads,
//! the GPU-shaped matrix-vector and GEMM shapes, forced here whatever the adapter): each
//! against the reference; all shapes bitwise equal to one another on the same product; a
//! row bitwise the same alone and among 64 on every shape; and weights split into parts.

use sprout::formats::{QK, WeightFormat};
use sprout::gpu::Gpu;
use sprout::gpu::kernels::matmul::{MatmulFixture, MatmulInputs, MatmulShape, XLoads};
use sprout::reference;

use crate::common::{Case, Outcome, check_bitwise, check_close, whole_blocks};

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
/// For the K-quants, whose rows are whole super-blocks of 256: a sample of the shapes above
/// (a decode row, odd weight rows, a prefill batch) with k of one super-block and several.
/// Their decoders differ from the others' only inside a block, which every shape reads
/// the same way, so a sample keeps the suite's time down without losing a path.
const SUPER_BLOCK_SHAPES: &[(usize, usize, usize)] =
    &[(1, 256, 64), (3, 512, 33), (13, 256, 130), (64, 768, 67)];

/// The (m, k, n) a format's accuracy and agreement cases run.
fn problems(format: WeightFormat) -> Vec<(usize, usize, usize)> {
    match format.block_len() {
        1 => [SHAPES, ODD_K].concat(),
        QK => SHAPES.to_vec(),
        _ => SUPER_BLOCK_SHAPES.to_vec(),
    }
}

/// A product's inputs from a seed (see `MatmulInputs::random`).
pub fn problem(format: WeightFormat, m: usize, k: usize, n: usize, seed: u64) -> MatmulInputs {
    MatmulInputs::random(format, (m, k, n), seed).unwrap()
}

/// Runs `p` on `shape`; `limit` caps each weight part's bytes (to force splitting).
fn run(gpu: &Gpu, p: &MatmulInputs, shape: MatmulShape, limit: Option<u64>) -> Vec<f32> {
    let weight = p.upload_weight(gpu, limit).unwrap();
    let fixture = MatmulFixture::new(gpu, &weight, &p.x, p.m);
    pollster::block_on(fixture.run(gpu, shape)).expect("read-back")
}

fn reference(p: &MatmulInputs) -> Vec<f32> {
    reference::matmul::matmul(&p.x, &p.w, p.m, p.k, p.n)
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
        let problems = problems(format);
        for shape in all_shapes() {
            for &(m, k, n) in &problems {
                let name = format!("{format}/{}/m{m}_k{k}_n{n}", shape.key());
                let case = Case::new("matmul", name, move |gpu| {
                    let p = problem(format, m, k, n, (m * 1000 + k * 10 + n) as u64);
                    check_close(&run(gpu, &p, shape, None), &reference(&p), TOLERANCE)
                });
                cases.push(for_shape(case, shape));
            }
        }
        // Every shape the adapter runs gives bitwise the same products.
        for &(m, k, n) in &problems {
            let name = format!("{format}/shapes-agree/m{m}_k{k}_n{n}");
            cases.push(Case::new("matmul", name, move |gpu| {
                let p = problem(format, m, k, n, (m * 7 + k * 3 + n) as u64);
                let shapes = shapes_on(gpu);
                let first = run(gpu, &p, shapes[0], None);
                let outcome = check_close(&first, &reference(&p), TOLERANCE)?;
                for &shape in &shapes[1..] {
                    check_bitwise(
                        &format!("{} vs {}", shape.key(), shapes[0].key()),
                        &run(gpu, &p, shape, None),
                        &first,
                    )?;
                }
                Ok(outcome)
            }));
        }
        // A weight larger than the binding limit is split into parts by rows (each part
        // starting on an even row, for the pairwise epilogues).
        let k = whole_blocks(format, 64);
        cases.push(Case::new(
            "matmul",
            format!("{format}/split/m5_k{k}_n37"),
            move |gpu| {
                let p = problem(format, 5, k, 37, 7);
                let limit = (format.row_bytes(p.k).unwrap() * 8) as u64 + 3;
                let shape = MatmulShape::Gemm { tm: 4 };
                let whole = run(gpu, &p, shape, None);
                for shape in shapes_on(gpu) {
                    let split = run(gpu, &p, shape, Some(limit));
                    check_bitwise(&format!("{} split vs whole", shape.key()), &split, &whole)?;
                }
                check_close(&whole, &reference(&p), TOLERANCE)
            },
        ));
        // Weights small enough that the block scales are f16 subnormals (below 6.1e-5:
        // Q8_0's d is about 8e-6 here, Q6_K's 2e-7, common in real Q6_K files): decoded
        // exactly on every shape, never flushed to zero.
        let k = whole_blocks(format, 64);
        cases.push(Case::new(
            "matmul",
            format!("{format}/subnormal-scales/m3_k{k}_n10"),
            move |gpu| {
                let mut rng = sprout::rng::SplitMix64::new(5);
                let x = rng.vec(3 * k, 1.0);
                let raw = rng.vec(10 * k, 1e-3);
                let p = MatmulInputs::new(format, (3, k, 10), x, &raw).unwrap();
                let want = reference(&p);
                let mut worst = exact();
                for shape in shapes_on(gpu) {
                    let got = run(gpu, &p, shape, None);
                    let o = check_close(&got, &want, TOLERANCE)
                        .map_err(|e| format!("{}: {e}", shape.key()))?;
                    worst.nmse = worst.nmse.max(o.nmse);
                }
                Ok(worst)
            },
        ));
        // Batch invariance: every row of a 64-row batch equals that row computed alone and
        // inside batches of other sizes, on every shape, whichever shape ran the batch.
        for batch_shape in all_shapes() {
            let name = format!("{format}/batch-invariance/{}", batch_shape.key());
            let case = Case::new("matmul", name, move |gpu| {
                let p = problem(format, 64, whole_blocks(format, 96), 70, 11);
                let batch = run(gpu, &p, batch_shape, None);
                for (first, count) in [(0, 1), (37, 1), (63, 1), (5, 3), (20, 13), (30, 8)] {
                    for shape in shapes_on(gpu) {
                        check_bitwise(
                            &format!(
                                "rows {first}..{} on {} vs in a batch of 64 on {}",
                                first + count,
                                shape.key(),
                                batch_shape.key()
                            ),
                            &run(gpu, &p.rows(first, count), shape, None),
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
