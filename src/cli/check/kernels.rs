//! The kernel self-check of `sprout check`: a few kernels at small sizes against the
//! plain-Rust references in `sprout::reference` (the kernel test suite, `tests/kernels/`,
//! covers every variant and shape; this is the quick version a user can run anywhere).
//!
//! - q4_1 matmul, a decode row and a 5-row batch, on every shape the adapter may pick
//!   (its tuning candidates and the GPU-shaped default);
//! - paged grouped-query attention with SmolLM2's heads, a prefill and a decode in one
//!   dispatch, with every attention variant whose query loads fit;
//! - sampling: plain-temperature and greedy draws must be the reference's tokens exactly,
//!   and their log-probs close to the reference's.
//!
//! Invariant: inputs are a pure function of their index (no generator state, no clock),
//! so every run on every adapter checks the same numbers.

use anyhow::{Result, bail};
use serde::Serialize;
use sprout::formats::{WeightFormat, dequantize, quantize};
use sprout::gpu::kernels::attention::{
    self, AttentionBuffers, AttentionPlan, AttentionShape, AttentionSplit, AttentionVariant,
    scratch_per_slot,
};
use sprout::gpu::kernels::matmul::{self, Matmul, MatmulShape, Output};
use sprout::gpu::kernels::sample::{self, RowParams, SampleKey};
use sprout::gpu::kernels::softmax::{self, Extra, RowStats};
use sprout::gpu::{Gpu, GpuWeight, Tensor};
use sprout::reference;

/// Largest accepted |GPU − reference| for matmul and attention outputs (values of order
/// one) and for sampling log-probs: f32 sums in another order differ by ~1e-6, an
/// indexing or dequantization mistake by 1e-2 or more.
pub const KERNEL_TOLERANCE: f64 = 1e-4;

/// What one kernel check measured.
#[derive(Clone, Debug, Serialize)]
pub struct KernelCheck {
    pub name: &'static str,
    /// For sampling: draws equal to the reference's, over all draws.
    pub tokens_equal: Option<(usize, usize)>,
    /// Largest |GPU − reference| over every output compared.
    pub max_abs_delta: f64,
    /// Why the check could not run (a read-back failed), if it could not.
    pub error: Option<String>,
}

impl KernelCheck {
    pub fn passes(&self) -> bool {
        self.error.is_none()
            && self.max_abs_delta <= KERNEL_TOLERANCE
            && self.tokens_equal.is_none_or(|(a, b)| a == b)
    }
}

/// One kernel check.
type Check = fn(&Gpu) -> Result<KernelCheck>;

/// Runs every kernel check on `gpu`.
pub fn run(gpu: &Gpu) -> Vec<KernelCheck> {
    let checks: [(&'static str, Check); 3] = [
        ("matmul q4_1", matmul_q4_1),
        ("attention", attention),
        ("sampling", sampling),
    ];
    checks
        .into_iter()
        .map(|(name, check)| {
            check(gpu).unwrap_or_else(|e| KernelCheck {
                name,
                tokens_equal: None,
                max_abs_delta: f64::INFINITY,
                error: Some(format!("{e:#}")),
            })
        })
        .collect()
}

/// `n` values in `[-scale, scale)`, a hash of (index, seed).
fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let mut x = i.wrapping_add(seed.wrapping_mul(0x9e37_79b9));
            x = (x ^ (x >> 16)).wrapping_mul(0x7feb_352d);
            x = (x ^ (x >> 15)).wrapping_mul(0x846c_a68b);
            x ^= x >> 16;
            ((x >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Largest |a − b|; infinite when the lengths differ or a value is not finite.
fn max_abs_delta(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    got.iter().zip(want).fold(0.0f64, |worst, (a, b)| {
        let d = (*a as f64 - *b as f64).abs();
        if d.is_finite() {
            worst.max(d)
        } else {
            f64::INFINITY
        }
    })
}

fn read(gpu: &Gpu, t: &Tensor) -> Result<Vec<f32>> {
    Ok(pollster::block_on(gpu.read_f32(t))?)
}

fn matmul_q4_1(gpu: &Gpu) -> Result<KernelCheck> {
    let format = WeightFormat::Q4_1;
    let mut worst = 0.0f64;
    for (m, k, n) in [(1, 576, 64), (5, 96, 70)] {
        let x = values(m * k, 1, 1.0);
        let bytes = quantize(format, &values(n * k, 2, 0.5), k)?;
        // The reference multiplies by the dequantized weights: only f32 sums differ.
        let want = reference::matmul::matmul(&x, &dequantize(format, &bytes, n, k)?, m, k, n);
        let weight = GpuWeight::upload(gpu, format, &bytes, n, k)?;
        let mut shapes = MatmulShape::candidates(&gpu.caps, m, n, k);
        let gpu_default = MatmulShape::for_gpu(m, n, k);
        if gpu_default.runs_on(&gpu.caps) && !shapes.contains(&gpu_default) {
            shapes.push(gpu_default);
        }
        for shape in shapes {
            let (xs, y) = (gpu.upload(&x), gpu.upload(&vec![f32::NAN; m * n]));
            let mut rec = gpu.recorder();
            let op = Matmul {
                x: &xs,
                m,
                weight: &weight,
                norm: None,
                gather: None,
                output: Output::Store(&y),
            };
            matmul::encode(gpu, &mut rec, &op, shape);
            rec.submit();
            worst = worst.max(max_abs_delta(&read(gpu, &y)?, &want));
        }
    }
    Ok(KernelCheck {
        name: "matmul q4_1",
        tokens_equal: None,
        max_abs_delta: worst,
        error: None,
    })
}

fn attention(gpu: &Gpu) -> Result<KernelCheck> {
    // SmolLM2-135M's heads, blocks of 16: a 21-token prefill (every row) and a decode at
    // position 69 (five blocks, two pages: split when the variant splits decodes).
    let (n_heads, n_kv_heads, head_dim, block_size) = (9, 3, 64, 16);
    let (kv_dim, q_row) = (n_kv_heads * head_dim, n_heads * head_dim);
    let tables: Vec<u32> = (0..7).collect(); // prefill: blocks 0, 1; decode: 2 to 6
    let rows: Vec<(u32, u32)> = (0..21).map(|p| (0, p)).chain([(2, 69)]).collect();
    let pool_rows = tables.len() * block_size;
    // Pool rows no sequence owns are NaN: reading one poisons the output.
    let owned = |r: usize| r < 21 || (2 * block_size..2 * block_size + 70).contains(&r);
    let pool = |seed| -> Vec<f32> {
        let v = values(pool_rows * kv_dim, seed, 1.0);
        v.chunks(kv_dim)
            .enumerate()
            .flat_map(|(r, row)| {
                row.iter()
                    .map(move |&x| if owned(r) { x } else { f32::NAN })
            })
            .collect()
    };
    let (k_pool, v_pool) = (pool(3), pool(4));
    let q = values(rows.len() * q_row, 5, 1.0);
    let shape = AttentionShape::new(rows.len(), n_heads, n_kv_heads, head_dim, block_size);
    let flat_rows: Vec<u32> = rows.iter().flat_map(|&(t, p)| [t, p]).collect();
    let want = reference::attention::attention(&shape, &q, &k_pool, &v_pool, &tables, &flat_rows);
    let rowinfo: Vec<[u32; 4]> = rows.iter().map(|&(t, p)| [t, p, 0, 0]).collect();
    let (qs, ks, vs) = (gpu.upload(&q), gpu.upload(&k_pool), gpu.upload(&v_pool));
    let (tables, rowinfo) = (gpu.upload(&tables), gpu.upload(&rowinfo));
    let mut worst = 0.0f64;
    for variant in AttentionVariant::all() {
        if variant.q_loads_for(&shape) != variant.q_loads {
            continue; // the same kernel as the direct loads, checked on its own
        }
        let mut plan = AttentionPlan::default();
        let split = variant.split == AttentionSplit::DecodePages;
        // Only the decode is its sequence's only row, so only it may be split.
        plan.build(rows.iter().map(|&(t, p)| (p + 1, split && t == 2)));
        let (items, combine) = (gpu.upload(&plan.items), gpu.upload(&plan.combine));
        let slots = plan.slots as usize;
        let scratch = gpu.upload(&vec![f32::NAN; slots.max(1) * scratch_per_slot(&shape)]);
        let out = gpu.upload(&vec![f32::NAN; shape.q_len()]);
        let b = AttentionBuffers {
            q: &qs,
            k_pool: &ks,
            v_pool: &vs,
            block_tables: &tables,
            rowinfo: &rowinfo,
            items: &items,
            out: &out,
            scratch: &scratch,
        };
        let mut rec = gpu.recorder();
        attention::encode(
            gpu,
            &mut rec,
            &shape,
            variant.q_loads,
            &b,
            plan.items.len(),
            slots,
        );
        let n = plan.combine.len();
        attention::encode_combine(gpu, &mut rec, &shape, &scratch, &combine, n, &out);
        rec.submit();
        worst = worst.max(max_abs_delta(&read(gpu, &out)?, &want));
    }
    Ok(KernelCheck {
        name: "attention",
        tokens_equal: None,
        max_abs_delta: worst,
        error: None,
    })
}

fn sampling(gpu: &Gpu) -> Result<KernelCheck> {
    // Four rows of a 1000-token vocabulary: three at temperature 1, one greedy; 64 draws
    // with mixed seeds, prompts, samples and positions, draw d reading row d % 4.
    let (rows, vocab, m) = (4, 1000, 64);
    let logits = values(rows * vocab, 6, 4.0);
    let params: Vec<RowParams> = (0..rows)
        .map(|r| RowParams::temperature(if r == 3 { 0.0 } else { 1.0 }))
        .collect();
    let keys: Vec<SampleKey> = (0..m as u32)
        .map(|d| {
            SampleKey::new(
                0x5eed + d as u64 % 3,
                d % 2,
                d % 5,
                100 + d,
                d % rows as u32,
            )
        })
        .collect();
    let (l, p, k) = (gpu.upload(&logits), gpu.upload(&params), gpu.upload(&keys));
    let (cut, stats) = (gpu.zeros(2 * rows), RowStats::zeros(gpu, rows));
    let (tokens, logprobs, sampling) = (gpu.zeros(m), gpu.zeros(m), gpu.zeros(m));
    // softmax, truncate, sample and draw_logprobs, as the engine records them.
    let mut rec = gpu.recorder();
    softmax::encode(gpu, &mut rec, &l, rows, vocab, &stats, Extra::Nothing);
    sample::encode_truncate(gpu, &mut rec, &l, vocab, rows, &p, &cut);
    sample::encode(gpu, &mut rec, &l, vocab, &p, &cut, &k, m, &tokens);
    sample::encode_draw_logprobs(
        gpu, &mut rec, &l, vocab, &stats, &p, &cut, &k, &tokens, m, &logprobs, &sampling,
    );
    rec.submit();
    let got = pollster::block_on(gpu.read_u32(&tokens))?;
    let want = reference::sample::sample_rows(&logits, vocab, &params, &keys);
    let equal = got.iter().zip(&want).filter(|(a, b)| a == b).count();
    if want.iter().collect::<std::collections::BTreeSet<_>>().len() < 4 {
        bail!("the reference drew fewer than 4 distinct tokens: the inputs are too peaked");
    }
    // The reference's log-probs of the GPU's own draws, so a wrong draw shows only once.
    let ref_logprobs = reference::sample::draw_logprobs(&logits, vocab, &keys, &got);
    Ok(KernelCheck {
        name: "sampling",
        tokens_equal: Some((equal, m)),
        max_abs_delta: max_abs_delta(&read(gpu, &logprobs)?, &ref_logprobs),
        error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_spread_over_their_range_and_differ_by_seed() {
        let v = values(4096, 1, 2.0);
        assert!(v.iter().all(|x| (-2.0..2.0).contains(x)));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.1, "{mean}");
        assert!(v.iter().any(|&x| x > 1.8) && v.iter().any(|&x| x < -1.8));
        assert_ne!(values(8, 1, 1.0), values(8, 2, 1.0));
    }

    #[test]
    fn deltas_catch_lengths_and_non_finite_values() {
        assert_eq!(max_abs_delta(&[1.0, 2.0], &[1.0, 2.5]), 0.5);
        assert_eq!(max_abs_delta(&[1.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(max_abs_delta(&[f32::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(max_abs_delta(&[f32::INFINITY], &[1.0]), f64::INFINITY);
        // Both infinite: equal as numbers, but no finite log-prob or output is that.
        assert_eq!(
            max_abs_delta(&[f32::INFINITY], &[f32::INFINITY]),
            f64::INFINITY
        );
    }
}
