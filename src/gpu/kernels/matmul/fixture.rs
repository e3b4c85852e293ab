//! One matmul set up to be checked or timed: what the kernel suite, `sprout check`, `sprout
//! tune` and the kernel benchmarks share.
//!
//! [`MatmulInputs`] is a product on the CPU: `x`, a weight's stored bytes in a format, and
//! the values those bytes decode to (what a reference multiplies by, so that only the
//! order of f32 sums can differ from the GPU's). [`MatmulFixture`] puts `x` and an output
//! on the GPU beside a weight (the inputs', or a loaded model's) and runs the plain matmul
//! (`y = x · Wᵀ`, stored) on any shape, with a LoRA term ([`LoraInputs`]) when given one.
//!
//! Invariant: before a run, the output holds NaN, so a value a shape fails to write shows
//! as NaN instead of as the value of an earlier run.

use super::{LoraArgs, Matmul, MatmulShape, NormArgs, Output, encode};
use crate::error::SproutError;
use crate::formats::{FormatError, WeightFormat, dequantize, quantize};
use crate::gpu::kernels::RowInfo;
use crate::gpu::{Gpu, GpuWeight, Recorder, Tensor};
use crate::rng::SplitMix64;

/// A product on the CPU: `x` is `[m, k]`, the weight `[n, k]` stored as `bytes` in
/// `format`, and `w` those bytes decoded.
#[derive(Clone, Debug)]
pub struct MatmulInputs {
    pub format: WeightFormat,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub x: Vec<f32>,
    pub bytes: Vec<u8>,
    pub w: Vec<f32>,
}

impl MatmulInputs {
    /// `x` against the weight `raw` (`n * k` values) stored in `format` as ggml rounds it.
    pub fn new(
        format: WeightFormat,
        (m, k, n): (usize, usize, usize),
        x: Vec<f32>,
        raw: &[f32],
    ) -> Result<MatmulInputs, FormatError> {
        assert_eq!(x.len(), m * k, "matmul inputs: x is not {m}x{k}");
        let bytes = quantize(format, raw, k)?;
        let w = dequantize(format, &bytes, n, k)?;
        Ok(MatmulInputs {
            format,
            m,
            k,
            n,
            x,
            bytes,
            w,
        })
    }

    /// Values from `seed`'s stream: x uniform in ±1, then the weight in ±0.5.
    pub fn random(
        format: WeightFormat,
        (m, k, n): (usize, usize, usize),
        seed: u64,
    ) -> Result<MatmulInputs, FormatError> {
        let mut rng = SplitMix64::new(seed);
        let x = rng.vec(m * k, 1.0);
        let raw = rng.vec(n * k, 0.5);
        MatmulInputs::new(format, (m, k, n), x, &raw)
    }

    /// The same weight with only rows `first..first + count` of `x`.
    pub fn rows(&self, first: usize, count: usize) -> MatmulInputs {
        MatmulInputs {
            m: count,
            x: self.x[first * self.k..(first + count) * self.k].to_vec(),
            ..self.clone()
        }
    }

    /// The weight on the GPU; `part_limit` caps each part's bytes (to force splitting).
    pub fn upload_weight(
        &self,
        gpu: &Gpu,
        part_limit: Option<u64>,
    ) -> Result<GpuWeight, SproutError> {
        let (format, k, n) = (self.format, self.k, self.n);
        match part_limit {
            Some(l) => GpuWeight::upload_with_limit(gpu, format, &self.bytes, n, k, l),
            None => GpuWeight::upload(gpu, format, &self.bytes, n, k),
        }
    }
}

/// A LoRA term on the CPU: `t` is `[m, rank]` (each row's A x), `b` is `[n, rank]` (B',
/// scaled, in the weight's row layout), and `adapters[i]` row i's RowInfo adapter word
/// (0: no term).
#[derive(Clone, Debug)]
pub struct LoraInputs {
    pub rank: usize,
    pub t: Vec<f32>,
    pub b: Vec<f32>,
    pub adapters: Vec<u32>,
}

impl LoraInputs {
    /// Values from `seed`'s stream: t uniform in ±1, then B' in ±`b_scale`; `adapters` as
    /// given (`m` of them).
    pub fn random(n: usize, rank: usize, adapters: Vec<u32>, b_scale: f32, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let t = rng.vec(adapters.len() * rank, 1.0);
        let b = rng.vec(n * rank, b_scale);
        LoraInputs {
            rank,
            t,
            b,
            adapters,
        }
    }

    /// Rows of x.
    pub fn m(&self) -> usize {
        self.adapters.len()
    }

    /// The same term for only rows `first..first + count`.
    pub fn rows(&self, first: usize, count: usize) -> LoraInputs {
        let r = self.rank;
        LoraInputs {
            t: self.t[first * r..(first + count) * r].to_vec(),
            adapters: self.adapters[first..first + count].to_vec(),
            ..self.clone()
        }
    }

    /// Each row's RowInfo: only its adapter word matters to the matmul.
    pub fn rowinfo(&self) -> Vec<RowInfo> {
        let rows = self.adapters.iter();
        rows.map(|&a| RowInfo::new(0, 0, 0).with_adapter(a))
            .collect()
    }
}

/// A LoRA term on the GPU.
struct LoraTensors {
    rank: usize,
    t: Tensor,
    b: Tensor,
    rowinfo: Tensor,
}

/// `m` rows of x and an output on the GPU, against a weight (and a LoRA term if given).
pub struct MatmulFixture<'w> {
    weight: &'w GpuWeight,
    m: usize,
    x: Tensor,
    y: Tensor,
    lora: Option<LoraTensors>,
    /// The RMSNorm prologue's weights, when x is read through it.
    norm: Option<Tensor>,
}

impl<'w> MatmulFixture<'w> {
    /// `x` is `[m, weight.cols]`.
    pub fn new(gpu: &Gpu, weight: &'w GpuWeight, x: &[f32], m: usize) -> MatmulFixture<'w> {
        assert_eq!(x.len(), m * weight.cols, "matmul fixture: x is not m x k");
        MatmulFixture {
            weight,
            m,
            x: gpu.upload(x),
            y: gpu.upload(&vec![f32::NAN; m * weight.rows]),
            lora: None,
            norm: None,
        }
    }

    /// The same product with `lora`'s term (its rows the fixture's, its B' the weight's).
    pub fn with_lora(self, gpu: &Gpu, lora: &LoraInputs) -> MatmulFixture<'w> {
        let (m, n, r) = (self.m, self.weight.rows, lora.rank);
        assert_eq!(lora.m(), m, "matmul fixture: LoRA rows");
        assert_eq!(
            lora.t.len(),
            m * r,
            "matmul fixture: LoRA t is not m x rank"
        );
        assert_eq!(
            lora.b.len(),
            n * r,
            "matmul fixture: LoRA B is not n x rank"
        );
        MatmulFixture {
            lora: Some(LoraTensors {
                rank: r,
                t: gpu.upload(&lora.t),
                b: gpu.upload(&lora.b),
                rowinfo: gpu.upload(&lora.rowinfo()),
            }),
            ..self
        }
    }

    /// The same product with x read through an RMSNorm of weights `g` (`k` values).
    pub fn with_rms_norm(self, gpu: &Gpu, g: &[f32]) -> MatmulFixture<'w> {
        assert_eq!(g.len(), self.weight.cols, "matmul fixture: norm weights");
        MatmulFixture {
            norm: Some(gpu.upload(g)),
            ..self
        }
    }

    /// Records `y = x · Wᵀ` (plus the LoRA term) on `shape`.
    pub fn encode(&self, gpu: &Gpu, rec: &mut Recorder, shape: MatmulShape) {
        let op = Matmul {
            x: &self.x,
            m: self.m,
            weight: self.weight,
            norm: self.norm.as_ref().map(|vectors| NormArgs {
                vectors,
                offset: 0,
                eps: 1e-5,
            }),
            gather: None,
            fold: None,
            output: Output::Store(&self.y),
            lora: self.lora.as_ref().map(|l| LoraArgs {
                t: &l.t,
                b: &l.b,
                rank: l.rank,
                rowinfo: &l.rowinfo,
            }),
        };
        encode(gpu, rec, &op, shape);
    }

    /// Runs the product on `shape` and returns `y` (`[m, n]`).
    pub async fn run(&self, gpu: &Gpu, shape: MatmulShape) -> Result<Vec<f32>, SproutError> {
        gpu.write(&self.y, &vec![f32::NAN; self.y.len]);
        let mut rec = gpu.recorder();
        self.encode(gpu, &mut rec, shape);
        rec.submit();
        gpu.read_f32(&self.y).await
    }
}
