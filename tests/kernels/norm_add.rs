//! The standalone RMSNorm (`norm_add`), added to the residual stream or stored: both
//! shapes against the f64 reference, rows alone and in a batch, odd widths and widths of
//! many chunks of blocks; both shapes bitwise equal; and the norm bitwise the matmul's
//! RMSNorm prologue (a matmul of the same rows against the identity, adding to the same
//! residual stream or storing, on every matmul shape the adapter runs), so a norm means
//! the same bits wherever the decoder applies it.

use sprout::formats::WeightFormat;
use sprout::gpu::kernels::matmul::{self, Matmul, NormArgs, Output};
use sprout::gpu::kernels::norm_add::{NormAddFixture, NormAddShape, NormOutput};
use sprout::gpu::{Gpu, GpuWeight};
use sprout::reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32};
use crate::matmul::shapes_on;

/// The norm rounds twice and the add once in f32, against f64: an NMSE near 1e-14.
const TOLERANCE: f64 = 1e-10;
const EPS: f32 = 1e-6;

/// (m, width): Gemma 3 270M's and 1B's widths (640, 1152), a width of a partial block
/// and odd (37), rows past one workgroup of rows (70), and 130 blocks (three chunks of a
/// workgroup's 64 in the per-workgroup shape).
const SIZES: &[(usize, usize)] = &[(1, 640), (5, 1152), (3, 37), (70, 96), (2, 4160)];

/// x (values spread by a per-row scale, as activations are), the norm's weights near 1
/// (as Gemma's `1 + w`), and a residual stream, for `m` rows of `width`.
fn inputs(m: usize, width: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = SplitMix64::new(seed);
    let x: Vec<f32> = (0..m)
        .flat_map(|r| {
            let scale = 0.01 + 10.0 * (r % 4) as f32;
            rng.vec(width, scale)
        })
        .collect();
    let weights = (0..width).map(|_| 1.0 + rng.uniform(0.5)).collect();
    let residual = rng.vec(m * width, 3.0);
    (x, weights, residual)
}

/// A fixture adding to (or storing over) the residual stream.
fn fixture(
    gpu: &Gpu,
    (x, width): (&[f32], usize),
    weights: &[f32],
    residual: &[f32],
    output: NormOutput,
) -> NormAddFixture {
    let fixture = NormAddFixture::new(gpu, (x, width), (weights, EPS), residual);
    match output {
        NormOutput::Add => fixture,
        NormOutput::Store => fixture.storing(),
    }
}

fn run(gpu: &Gpu, m: usize, width: usize, seed: u64, shape: NormAddShape) -> Vec<f32> {
    let (x, weights, residual) = inputs(m, width, seed);
    let fixture = NormAddFixture::new(gpu, (&x, width), (&weights, EPS), &residual);
    pollster::block_on(fixture.run(gpu, shape)).expect("read-back")
}

/// What the reference gives: the normalised rows added to `residual`, or alone (added to
/// zeros: the f64 sum rounds once, to the normalised value itself).
fn want(
    x: &[f32],
    weights: &[f32],
    residual: &[f32],
    width: usize,
    output: NormOutput,
) -> Vec<f32> {
    let zeros = vec![0.0; residual.len()];
    let base = match output {
        NormOutput::Add => residual,
        NormOutput::Store => &zeros,
    };
    reference::norm_add::norm_add(base, x, weights, EPS, width)
}

fn accuracy(
    gpu: &Gpu,
    (m, width): (usize, usize),
    shape: NormAddShape,
    output: NormOutput,
) -> Result<Outcome, String> {
    let seed = (m * 10_000 + width) as u64;
    let (x, weights, residual) = inputs(m, width, seed);
    let fixture = fixture(gpu, (&x, width), &weights, &residual, output);
    let got = pollster::block_on(fixture.run(gpu, shape)).expect("read-back");
    check_close(
        &got,
        &want(&x, &weights, &residual, width, output),
        TOLERANCE,
    )
}

/// Both shapes on a batch of 67 rows of 2080 (65 blocks: a second chunk of one), and the
/// first rows again alone: all bitwise equal.
fn shapes_agree(gpu: &Gpu) -> Result<Outcome, String> {
    let (m, width, seed) = (67, 2080, 5);
    let [first, second] = NormAddShape::ALL;
    let a = run(gpu, m, width, seed, first);
    let (x, weights, residual) = inputs(m, width, seed);
    let want = reference::norm_add::norm_add(&residual, &x, &weights, EPS, width);
    let outcome = check_close(&a, &want, TOLERANCE)?;
    let b = run(gpu, m, width, seed, second);
    check_bitwise(&format!("{second:?} vs {first:?}"), &b, &a)?;
    for shape in NormAddShape::ALL {
        let rows = 3 * width;
        let fixture =
            NormAddFixture::new(gpu, (&x[..rows], width), (&weights, EPS), &residual[..rows]);
        let alone = pollster::block_on(fixture.run(gpu, shape)).expect("read-back");
        check_bitwise(
            &format!("rows 0..3 alone with {shape:?} vs in the batch"),
            &alone,
            &a[..rows],
        )?;
    }
    Ok(outcome)
}

/// `norm_add` against a matmul with the RMSNorm prologue and the residual (or store)
/// epilogue whose weight is the identity (in f32): each output is then
/// `0 + ... + fma(1, xin, 0) + ...`, exactly the prologue's normalised value added to the
/// stream (or stored).
fn same_bits_as_the_prologue(
    gpu: &Gpu,
    width: usize,
    output: NormOutput,
) -> Result<Outcome, String> {
    let (m, seed) = (5, 40 + width as u64);
    let (x, weights, residual) = inputs(m, width, seed);
    let want = want(&x, &weights, &residual, width, output);
    let mut outcome = Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    };
    let lead = 3; // the fixture's, so that both read the weights at an offset
    let mut vectors = vec![9.0f32; lead];
    vectors.extend(&weights);
    let identity: Vec<u8> = (0..width * width)
        .flat_map(|i| f32::to_le_bytes(if i / width == i % width { 1.0 } else { 0.0 }))
        .collect();
    let w = GpuWeight::upload(gpu, WeightFormat::F32, &identity, width, width).unwrap();
    let (xt, vt) = (gpu.upload(&x), gpu.upload(&vectors));
    for shape in NormAddShape::ALL {
        let fixture = fixture(gpu, (&x, width), &weights, &residual, output);
        let got = pollster::block_on(fixture.run(gpu, shape)).expect("read-back");
        outcome = check_close(&got, &want, TOLERANCE)?;
        for mm in shapes_on(gpu) {
            let out = gpu.upload(&residual);
            let op = Matmul {
                x: &xt,
                m,
                weight: &w,
                norm: Some(NormArgs {
                    vectors: &vt,
                    offset: lead,
                    eps: EPS,
                }),
                gather: None,
                fold: None,
                output: match output {
                    NormOutput::Add => Output::Residual(&out),
                    NormOutput::Store => Output::Store(&out),
                },
                lora: None,
            };
            let mut rec = gpu.recorder();
            matmul::encode(gpu, &mut rec, &op, mm);
            rec.submit();
            check_bitwise(
                &format!("norm_add {shape:?} vs the RMSNorm prologue on {}", mm.key()),
                &got,
                &read_f32(gpu, &out),
            )?;
        }
    }
    Ok(outcome)
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for shape in NormAddShape::ALL {
        for &(m, width) in SIZES {
            let name = format!("{shape:?}/m{m}_w{width}");
            cases.push(Case::new("norm_add", name, move |gpu| {
                accuracy(gpu, (m, width), shape, NormOutput::Add)
            }));
        }
        // Storing differs from adding only in the last write: a sample of the sizes.
        for &(m, width) in [SIZES[1], SIZES[2]].iter() {
            let name = format!("{shape:?}/store/m{m}_w{width}");
            cases.push(Case::new("norm_add", name, move |gpu| {
                accuracy(gpu, (m, width), shape, NormOutput::Store)
            }));
        }
    }
    cases.push(Case::new("norm_add", "shapes-agree", shapes_agree));
    // A width of a partial last block read as vec4s by the matmul, and an odd one read
    // as scalars.
    for width in [200, 37] {
        cases.push(Case::new(
            "norm_add",
            format!("same-bits-as-the-rmsnorm-prologue/w{width}"),
            move |gpu| same_bits_as_the_prologue(gpu, width, NormOutput::Add),
        ));
        cases.push(Case::new(
            "norm_add",
            format!("store/same-bits-as-the-rmsnorm-prologue/w{width}"),
            move |gpu| same_bits_as_the_prologue(gpu, width, NormOutput::Store),
        ));
    }
    cases
}
