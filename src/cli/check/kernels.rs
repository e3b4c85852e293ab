//! The kernel self-check of `sprout check`: a few kernels at small sizes against the
//! plain-Rust references in `sprout::reference` (the kernel test suite, `tests/kernels/`,
//! covers every variant and shape; this is the quick version a user can run anywhere).
//!
//! - matmul in every weight format (`WeightFormat::ALL`, the formats' registry: a format
//!   added there is checked here), a decode row and a 5-row batch (k rounded up to whole
//!   blocks), on every shape the adapter may pick (its tuning candidates and the
//!   GPU-shaped default);
//! - paged grouped-query attention with SmolLM2's heads, a prefill and a decode in one
//!   dispatch, with every attention variant whose query loads fit;
//! - Qwen3's per-head q and k norms with RoPE and the KV write (`head_norm_rope`), with
//!   Qwen3-0.6B's heads, a prefill and a decode in one dispatch;
//! - the post-norm residual add (`norm_add`), Gemma 3 270M's width, in both shapes;
//! - sampling: plain-temperature and greedy draws must be the reference's tokens exactly,
//!   and their log-probs close to the reference's.
//!
//! Invariant: inputs are a pure function of their index (no generator state, no clock),
//! so every run on every adapter checks the same numbers.

use anyhow::{Result, bail};
use serde::Serialize;
use sprout::formats::WeightFormat;
use sprout::gpu::Gpu;
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::attention::{
    AttentionFixture, AttentionShape, AttentionVariant, SplitRows,
};
use sprout::gpu::kernels::head_norm_rope::{HeadNormRopeFixture, HeadShape, POOL_SENTINEL};
use sprout::gpu::kernels::matmul::{MatmulFixture, MatmulInputs, MatmulShape};
use sprout::gpu::kernels::norm_add::{NormAddFixture, NormAddShape};
use sprout::gpu::kernels::rope::frequencies;
use sprout::gpu::kernels::sample::{RowParams, SampleKey, SamplingFixture};
use sprout::reference;
use sprout::reference::head_norm_rope::Heads;

/// Largest accepted |GPU − reference| for matmul and attention outputs (values of order
/// one) and for sampling log-probs: f32 sums in another order differ by ~1e-6, an
/// indexing or dequantization mistake by 1e-2 or more.
pub const KERNEL_TOLERANCE: f64 = 1e-4;

/// What one kernel check measured.
#[derive(Clone, Debug, Serialize)]
pub struct KernelCheck {
    pub name: String,
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

/// One kernel check: what it checks, as the report names it, and how.
type Check = Box<dyn Fn(&Gpu) -> Result<KernelCheck>>;

/// Every kernel check: matmul in each weight format, attention, the per-head norms, the
/// post-norm residual add, sampling.
pub fn checks() -> Vec<(String, Check)> {
    let mut checks: Vec<(String, Check)> = WeightFormat::ALL
        .into_iter()
        .map(|format| {
            let check: Check = Box::new(move |gpu: &Gpu| matmul(gpu, format));
            (format!("matmul {format}"), check)
        })
        .collect();
    checks.push(("attention".into(), Box::new(attention)));
    checks.push(("head_norm_rope".into(), Box::new(head_norm_rope)));
    checks.push(("norm_add".into(), Box::new(norm_add)));
    checks.push(("sampling".into(), Box::new(sampling)));
    checks
}

/// Runs every kernel check on `gpu`.
pub fn run(gpu: &Gpu) -> Vec<KernelCheck> {
    checks()
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

fn matmul(gpu: &Gpu, format: WeightFormat) -> Result<KernelCheck> {
    let mut worst = 0.0f64;
    for (m, k, n) in [(1, 576usize, 64), (5, 96, 70)] {
        // Rows of whole blocks: the K-quants' super-blocks of 256 take 768 and 256 (the
        // other formats' k are multiples of their blocks already, so their rows are as
        // they always were).
        let k = k.next_multiple_of(format.block_len());
        let inputs = MatmulInputs::new(
            format,
            (m, k, n),
            values(m * k, 1, 1.0),
            &values(n * k, 2, 0.5),
        )?;
        // The reference multiplies by the decoded weights: only f32 sums differ.
        let want = reference::matmul::matmul(&inputs.x, &inputs.w, m, k, n);
        let weight = inputs.upload_weight(gpu, None)?;
        let fixture = MatmulFixture::new(gpu, &weight, &inputs.x, m);
        let mut shapes = MatmulShape::candidates(&gpu.caps, m, n, k);
        let gpu_default = MatmulShape::for_gpu(m, n, k);
        if gpu_default.runs_on(&gpu.caps) && !shapes.contains(&gpu_default) {
            shapes.push(gpu_default);
        }
        for shape in shapes {
            let got = pollster::block_on(fixture.run(gpu, shape))?;
            worst = worst.max(max_abs_delta(&got, &want));
        }
    }
    Ok(KernelCheck {
        name: format!("matmul {format}"),
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
    let rows: Vec<RowInfo> = rows.iter().map(|&(t, p)| RowInfo::new(t, p, 0)).collect();
    let want = reference::attention::attention(&shape, &q, &k_pool, &v_pool, &tables, &rows);
    // Only the decode is its sequence's only row, so only it may be split.
    let fixture = AttentionFixture::new(
        gpu,
        shape,
        (&q, &k_pool, &v_pool),
        &tables,
        &rows,
        SplitRows::Decodes,
    );
    let mut worst = 0.0f64;
    for variant in AttentionVariant::all() {
        if variant.q_loads_for(&shape) != variant.q_loads {
            continue; // the same kernel as the direct loads, checked on its own
        }
        let got = pollster::block_on(fixture.run(gpu, variant))?;
        worst = worst.max(max_abs_delta(&got, &want));
    }
    Ok(KernelCheck {
        name: "attention".into(),
        tokens_equal: None,
        max_abs_delta: worst,
        error: None,
    })
}

fn head_norm_rope(gpu: &Gpu) -> Result<KernelCheck> {
    // Qwen3-0.6B's heads; rows at positions 0 to 4 (slots 0 to 4) and 300 (slot 21).
    let heads = Heads {
        n_heads: 16,
        n_kv_heads: 8,
        head_dim: 128,
    };
    let (kv_dim, width) = (8 * 128, (16 + 2 * 8) * 128);
    let (pool_rows, table) = (32, 512);
    let rows: Vec<RowInfo> = (0..5)
        .map(|p| RowInfo::new(0, p, p))
        .chain([RowInfo::new(0, 300, 21)])
        .collect();
    let x = values(rows.len() * width, 7, 4.0);
    let (q_norm, k_norm) = (values(128, 8, 0.5), values(128, 9, 0.5));
    let freqs = frequencies(128, 1e6);
    let shape = HeadShape {
        n_heads: 16,
        n_kv_heads: 8,
        head_dim: 128,
    };
    let eps = 1e-6;
    let fixture = HeadNormRopeFixture::new(
        gpu,
        &shape,
        &x,
        (&q_norm, &k_norm, eps),
        &rows,
        (&freqs, table),
        pool_rows,
    )?;
    let [q, k_pool, v_pool] = pollster::block_on(fixture.run(gpu))?;
    let mut want_k = vec![POOL_SENTINEL; pool_rows * kv_dim];
    let mut want_v = want_k.clone();
    let positions: Vec<u32> = rows.iter().map(|r| r.position).collect();
    let slots: Vec<u32> = rows.iter().map(|r| r.slot).collect();
    let want_q = reference::head_norm_rope::head_norm_rope(
        &x,
        heads,
        (&q_norm, &k_norm, eps),
        &positions,
        &slots,
        (&freqs, table),
        &mut want_k,
        &mut want_v,
    );
    let worst = [(q, want_q), (k_pool, want_k), (v_pool, want_v)]
        .iter()
        .map(|(got, want)| max_abs_delta(got, want))
        .fold(0.0, f64::max);
    Ok(KernelCheck {
        name: "head_norm_rope".into(),
        tokens_equal: None,
        max_abs_delta: worst,
        error: None,
    })
}

fn norm_add(gpu: &Gpu) -> Result<KernelCheck> {
    // Gemma 3 270M's width: a decode row and a 6-row batch of a prefill.
    let width = 640;
    let mut worst = 0.0f64;
    for (m, seed) in [(1, 10), (6, 11)] {
        let x = values(m * width, seed, 4.0);
        let weights: Vec<f32> = values(width, seed + 1, 0.5)
            .iter()
            .map(|w| 1.0 + w)
            .collect();
        let residual = values(m * width, seed + 2, 2.0);
        let eps = 1e-6;
        let want = reference::norm_add::norm_add(&residual, &x, &weights, eps, width);
        let fixture = NormAddFixture::new(gpu, (&x, width), (&weights, eps), &residual);
        for shape in NormAddShape::ALL {
            let got = pollster::block_on(fixture.run(gpu, shape))?;
            worst = worst.max(max_abs_delta(&got, &want));
        }
    }
    Ok(KernelCheck {
        name: "norm_add".into(),
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
    // softmax, truncate, sample and draw_logprobs, as the engine records them.
    let fixture = SamplingFixture::new(gpu, (&logits, vocab), &params, &keys);
    let drawn = pollster::block_on(fixture.run(gpu))?;
    let got = drawn.tokens;
    let want = reference::sample::sample_rows(&logits, vocab, &params, &keys);
    let equal = got.iter().zip(&want).filter(|(a, b)| a == b).count();
    if want.iter().collect::<std::collections::BTreeSet<_>>().len() < 4 {
        bail!("the reference drew fewer than 4 distinct tokens: the inputs are too peaked");
    }
    // The reference's log-probs of the GPU's own draws, so a wrong draw shows only once.
    let ref_logprobs = reference::sample::draw_logprobs(&logits, vocab, &keys, &got);
    Ok(KernelCheck {
        name: "sampling".into(),
        tokens_equal: Some((equal, m)),
        max_abs_delta: max_abs_delta(&drawn.logprobs, &ref_logprobs),
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
