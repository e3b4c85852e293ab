//! RMSNorm: row lengths below, at and above the workgroup size (and not multiples of it),
//! inputs large and tiny (where eps matters), and batch invariance (a row is bitwise the
//! same alone and among 64).

use sprout::gpu::Gpu;
use sprout::gpu::kernels::rmsnorm::encode;
use sprout::reference::rmsnorm::rmsnorm;

use crate::common::{Case, Outcome, Rng, check_bitwise, check_close, read_f32};

/// The f32 sum of squares is off by ~1e-7 relative per value added in the worst order; the
/// result's relative error stays below ~1e-6, an NMSE below ~1e-12. 1e-10 leaves room and
/// still catches a wrong formula (a missing eps on tiny inputs, the sum instead of the
/// mean, a missing weight: all give an NMSE far above 1e-6).
const TOLERANCE: f64 = 1e-10;
const EPS: f32 = 1e-5;

/// (m, d): SmolLM2's 576, rows shorter than the workgroup, and lengths around 256.
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 7),
    (3, 64),
    (5, 255),
    (2, 256),
    (4, 257),
    (17, 576),
    (3, 2048),
    (2, 4099),
];

fn run(gpu: &Gpu, x: &[f32], weight: &[f32], m: usize, d: usize) -> Vec<f32> {
    let (xt, wt, out) = (gpu.upload(x), gpu.upload(weight), gpu.zeros(m * d));
    let mut rec = gpu.recorder();
    encode(gpu, &mut rec, &xt, &wt, EPS, &out, m, d);
    rec.submit();
    read_f32(gpu, &out)
}

fn check(gpu: &Gpu, m: usize, d: usize, scale: f32, seed: u64) -> Result<Outcome, String> {
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * d, scale);
    let weight: Vec<f32> = rng.vec(d, 0.5).iter().map(|w| 1.0 + w).collect();
    check_close(
        &run(gpu, &x, &weight, m, d),
        &rmsnorm(&x, &weight, EPS, d),
        TOLERANCE,
    )
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &(m, d) in SHAPES {
        cases.push(Case::new("rmsnorm", format!("m{m}_d{d}"), move |gpu| {
            check(gpu, m, d, 1.0, (m * 7919 + d) as u64)
        }));
    }
    // Large activations (residual streams grow) and tiny ones, where eps dominates.
    for (name, scale) in [("large", 300.0), ("tiny", 1e-3)] {
        cases.push(Case::new(
            "rmsnorm",
            format!("{name}/m3_d576"),
            move |gpu| check(gpu, 3, 576, scale, 17),
        ));
    }
    cases.push(Case::new("rmsnorm", "batch-invariance/m64_d576", |gpu| {
        let (m, d) = (64, 576);
        let mut rng = Rng::new(23);
        let x = rng.vec(m * d, 2.0);
        let weight = rng.vec(d, 1.0);
        let batch = run(gpu, &x, &weight, m, d);
        for (i, rows) in [(0usize, 1usize), (37, 1), (63, 1), (5, 3), (20, 13)] {
            let alone = run(gpu, &x[i * d..(i + rows) * d], &weight, rows, d);
            check_bitwise(
                &format!("rows {i}..{} vs in a batch of {m}", i + rows),
                &alone,
                &batch[i * d..(i + rows) * d],
            )?;
        }
        check_close(&batch, &rmsnorm(&x, &weight, EPS, d), TOLERANCE)
    }));
    cases
}
