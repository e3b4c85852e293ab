//! SiLU-gate, residual add, bias add and row gather: lengths that are not multiples of the
//! workgroup, a length whose workgroups need a 2D grid, extreme gate values (no inf or NaN),
//! invariance of a value to the length of the array it sits in, and gathers (repeated,
//! shuffled and out-of-range rows) that copy exactly.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::elementwise::{
    WORKGROUP, encode_add_bias, encode_gather_rows, encode_residual_add, encode_silu_gate,
};
use sprout::reference::elementwise as reference;

use crate::common::{Case, Outcome, Rng, check_bitwise, check_close, read_f32};

/// `exp` is a few ulp off on GPUs (WGSL allows more for large arguments); a relative error
/// of 1e-6 per value gives an NMSE near 1e-12, so 1e-10 leaves room yet catches any wrong
/// formula (a missing factor or a sign gives an NMSE near 1).
const SILU_TOLERANCE: f64 = 1e-10;
/// An f32 addition is correctly rounded on every adapter, as in the reference: exact.
const ADD_TOLERANCE: f64 = 0.0;

const LENGTHS: &[usize] = &[1, 7, 255, 256, 257, 1000, 65_537, 1_000_003];

fn silu_gate(gpu: &Gpu, gate: &[f32], up: &[f32]) -> Vec<f32> {
    let (g, u, out) = (gpu.upload(gate), gpu.upload(up), gpu.zeros(gate.len()));
    let mut rec = gpu.recorder();
    encode_silu_gate(gpu, &mut rec, &g, &u, &out, gate.len());
    rec.submit();
    read_f32(gpu, &out)
}

fn residual_add(gpu: &Gpu, a: &[f32], b: &[f32]) -> Vec<f32> {
    let (at, bt) = (gpu.upload(a), gpu.upload(b));
    let mut rec = gpu.recorder();
    encode_residual_add(gpu, &mut rec, &at, &bt, a.len());
    rec.submit();
    read_f32(gpu, &at)
}

/// A length whose workgroups exceed the adapter's per-dimension limit (so the grid is 2D),
/// or `None` when that would take more than 64M values. Only the cheapest kernel runs it
/// (the grid is common to all): on GL a long wait for the device blocks every other test.
fn grid_length(gpu: &Gpu) -> Option<usize> {
    let n = gpu.caps.max_workgroups_per_dim as usize * WORKGROUP as usize + 777;
    (n <= 64 << 20).then_some(n)
}

fn check_silu(gpu: &Gpu, n: usize, seed: u64) -> Result<Outcome, String> {
    let mut rng = Rng::new(seed);
    let gate = rng.vec(n, 12.0);
    let up = rng.vec(n, 2.0);
    check_close(
        &silu_gate(gpu, &gate, &up),
        &reference::silu_gate(&gate, &up),
        SILU_TOLERANCE,
    )
}

fn check_add(gpu: &Gpu, n: usize, seed: u64) -> Result<Outcome, String> {
    let mut rng = Rng::new(seed);
    let a = rng.vec(n, 3.0);
    let b = rng.vec(n, 1.0);
    let got = residual_add(gpu, &a, &b);
    let want = reference::residual_add(&a, &b);
    check_bitwise("a + b", &got, &want)?;
    check_close(&got, &want, ADD_TOLERANCE)
}

fn check_bias(gpu: &Gpu, m: usize, cols: usize) -> Result<Outcome, String> {
    let mut rng = Rng::new((m * 31 + cols) as u64);
    let x = rng.vec(m * cols, 3.0);
    let bias = rng.vec(cols, 1.0);
    let (xt, bt) = (gpu.upload(&x), gpu.upload(&bias));
    let mut rec = gpu.recorder();
    encode_add_bias(gpu, &mut rec, &xt, &bt, m, cols);
    rec.submit();
    let got = read_f32(gpu, &xt);
    let want = reference::add_bias(&x, &bias);
    check_bitwise("x + bias", &got, &want)?;
    check_close(&got, &want, ADD_TOLERANCE)
}

/// Gathers `m` rows of `width` from `n_src` rows: repeated and shuffled indices, and (when
/// `past_end`) one index past `src`, which gives zeros.
fn check_gather(
    gpu: &Gpu,
    n_src: usize,
    m: usize,
    width: usize,
    past_end: bool,
) -> Result<Outcome, String> {
    let mut rng = Rng::new((n_src * 7 + m * 31 + width) as u64);
    let src = rng.vec(n_src * width, 3.0);
    let mut rows: Vec<u32> = (0..m).map(|_| rng.below(n_src as u32)).collect();
    if past_end {
        rows[m / 2] = n_src as u32 + 1;
    }
    let (st, rt, dst) = (gpu.upload(&src), gpu.upload(&rows), gpu.zeros(m * width));
    let mut rec = gpu.recorder();
    encode_gather_rows(gpu, &mut rec, &st, &rt, m, width, &dst);
    rec.submit();
    check_bitwise(
        "gathered rows",
        &read_f32(gpu, &dst),
        &reference::gather_rows(&src, &rows, width),
    )?;
    Ok(Outcome {
        nmse: 0.0,
        tolerance: ADD_TOLERANCE,
    })
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // SmolLM2's hidden size picking the rows that need logits; widths off the workgroup;
    // one row; every row once.
    for (n_src, m, width, past_end) in [
        (64, 5, 576, false),
        (1, 1, 576, false),
        (300, 64, 257, false),
        (10, 10, 1, false),
        (17, 9, 192, true),
        (3, 200, 4096, false),
    ] {
        cases.push(Case::new(
            "elementwise",
            format!(
                "gather_rows/src{n_src}_m{m}_w{width}{}",
                if past_end { "_past-end" } else { "" }
            ),
            move |gpu| check_gather(gpu, n_src, m, width, past_end),
        ));
    }
    for (m, cols) in [(1, 576), (7, 192), (13, 257), (64, 64)] {
        cases.push(Case::new(
            "elementwise",
            format!("add_bias/m{m}_cols{cols}"),
            move |gpu| check_bias(gpu, m, cols),
        ));
    }
    for &n in LENGTHS {
        cases.push(Case::new(
            "elementwise",
            format!("silu_gate/n{n}"),
            move |gpu| check_silu(gpu, n, n as u64),
        ));
        cases.push(Case::new(
            "elementwise",
            format!("residual_add/n{n}"),
            move |gpu| check_add(gpu, n, n as u64 + 1),
        ));
    }
    cases.push(Case::new(
        "elementwise",
        "residual_add/2d-grid",
        |gpu| match grid_length(gpu) {
            Some(n) => check_add(gpu, n, 4),
            None => Ok(Outcome {
                nmse: 0.0,
                tolerance: ADD_TOLERANCE,
            }),
        },
    ));
    // Gates far beyond exp's range: finite results, x for x >> 0 and 0 for x << 0.
    cases.push(Case::new("elementwise", "silu_gate/extremes", |gpu| {
        let mut gate = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            20.0,
            -20.0,
            88.0,
            -88.0,
            89.0,
            -89.0,
            100.0,
            -100.0,
            1e4,
            -1e4,
            1e30,
            -1e30,
            f32::MAX,
            -f32::MAX,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
        ];
        let mut up = vec![1.0; gate.len()];
        up[16] = 0.5; // f32::MAX * 0.5 stays finite
        let mut rng = Rng::new(5);
        gate.extend(rng.vec(300, 200.0));
        up.extend(rng.vec(300, 1.0));
        let got = silu_gate(gpu, &gate, &up);
        let want = reference::silu_gate(&gate, &up);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Exact for x >> 0; for x << 0 within a subnormal that a GPU may flush.
            if gate[i].abs() > 100.0 && (g - w).abs() > 1e-30 {
                return Err(format!("silu({}) * {} = {g}, want {w}", gate[i], up[i]));
            }
        }
        check_close(&got, &want, SILU_TOLERANCE)
    }));
    // A value does not depend on the length of the array around it.
    cases.push(Case::new(
        "elementwise",
        "silu_gate/length-invariance",
        |gpu| {
            let mut rng = Rng::new(6);
            let (gate, up) = (rng.vec(70_001, 8.0), rng.vec(70_001, 1.0));
            let whole = silu_gate(gpu, &gate, &up);
            for (start, len) in [(0, 1), (300, 257), (69_000, 1001)] {
                let part = silu_gate(gpu, &gate[start..start + len], &up[start..start + len]);
                check_bitwise(
                    &format!("[{start}, +{len}) alone"),
                    &part,
                    &whole[start..start + len],
                )?;
            }
            Ok(Outcome {
                nmse: 0.0,
                tolerance: SILU_TOLERANCE,
            })
        },
    ));
    cases
}
