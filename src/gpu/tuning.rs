//! Which kernel variant serves each dispatch on this adapter: defaults by adapter kind,
//! replaced by measurements where `sprout tune` has taken them (`gpu::tune_file`).
//!
//! Every variant of a kernel computes bitwise the same result (the matmul shapes share one
//! order of operations, the attention variants one order of pages), so a choice here is a
//! matter of speed only: batch invariance holds whatever is chosen, and a tuned adapter
//! gives exactly the tokens and log-probs of an untuned one.
//!
//! Matmul choices are keyed by the matmul's site in the decoder, the weight's format and
//! shape, and a bucket of row counts; attention by head size and heads per kv head.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::context::Capabilities;
use super::kernels::attention::AttentionVariant;
use super::kernels::matmul::MatmulShape;
use crate::formats::WeightFormat;

/// Where a matmul sits in the decoder (each has its own fusion and shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulSite {
    /// RMSNorm, the q|k|v projection, RoPE and the KV-cache write.
    Qkv,
    /// The attention output projection and its residual add.
    AttnOut,
    /// RMSNorm, the gate and up projections and SiLU-gate.
    GateUp,
    /// The down projection and its residual add.
    Down,
    /// The final RMSNorm of the rows that draw, and the vocabulary projection.
    LmHead,
}

impl MatmulSite {
    pub const ALL: [MatmulSite; 5] = [
        MatmulSite::Qkv,
        MatmulSite::AttnOut,
        MatmulSite::GateUp,
        MatmulSite::Down,
        MatmulSite::LmHead,
    ];
}

/// The upper ends of the row-count buckets that choices are made for: a dispatch of `m`
/// rows uses the choice of the first bucket that holds `m`.
pub const ROW_BUCKETS: [usize; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/// A matmul choice's key: site, format and weight shape (`n` rows of `k`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatmulKey {
    pub site: MatmulSite,
    pub format: WeightFormat,
    pub n: usize,
    pub k: usize,
}

/// One measured choice of `sprout tune`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatmulChoice {
    #[serde(flatten)]
    pub key: MatmulKey,
    /// The largest row count this choice serves (a `ROW_BUCKETS` entry).
    pub max_rows: usize,
    pub shape: MatmulShape,
    /// The winner's time and the default's, in microseconds per dispatch.
    pub micros: f64,
    pub default_micros: f64,
}

/// One measured attention choice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionChoice {
    pub head_dim: usize,
    pub group: usize,
    /// The most query rows in a step this choice serves (a `ROW_BUCKETS` entry).
    pub max_rows: usize,
    pub variant: AttentionVariant,
    pub micros: f64,
    pub default_micros: f64,
}

/// The choices in force on one device.
#[derive(Clone, Debug, Default)]
pub struct KernelChoices {
    is_cpu: bool,
    /// Per key, (largest row count, shape) by increasing row count.
    matmul: HashMap<MatmulKey, Vec<(usize, MatmulShape)>>,
    /// Per (head_dim, group), (largest row count, variant) by increasing row count.
    attention: HashMap<(usize, usize), Vec<(usize, AttentionVariant)>>,
    /// The tune file these came from, when tuned.
    pub source: Option<String>,
}

impl KernelChoices {
    /// The defaults for an adapter: CPU-shaped kernels on CPU adapters, GPU-shaped ones
    /// elsewhere.
    pub fn defaults(is_cpu: bool) -> KernelChoices {
        KernelChoices {
            is_cpu,
            ..KernelChoices::default()
        }
    }

    /// The defaults with the measured choices over them; `source` names the file.
    pub fn tuned(
        is_cpu: bool,
        matmul: &[MatmulChoice],
        attention: &[AttentionChoice],
        source: String,
    ) -> KernelChoices {
        let mut choices = KernelChoices::defaults(is_cpu);
        for c in matmul {
            choices
                .matmul
                .entry(c.key)
                .or_default()
                .push((c.max_rows, c.shape));
        }
        for shapes in choices.matmul.values_mut() {
            shapes.sort_by_key(|(rows, _)| *rows);
        }
        for a in attention {
            choices
                .attention
                .entry((a.head_dim, a.group))
                .or_default()
                .push((a.max_rows, a.variant));
        }
        for variants in choices.attention.values_mut() {
            variants.sort_by_key(|(rows, _)| *rows);
        }
        choices.source = Some(source);
        choices
    }

    /// The shape for `m` rows at `key` on an adapter with `caps`.
    pub fn matmul_shape(&self, caps: &Capabilities, key: MatmulKey, m: usize) -> MatmulShape {
        if let Some(shapes) = self.matmul.get(&key)
            && let Some((_, shape)) = shapes.iter().find(|(rows, _)| m <= *rows)
            && shape.runs_on(caps)
        {
            return *shape;
        }
        self.default_shape(caps, key, m)
    }

    /// The shape for `m` rows at `key` when nothing was measured.
    pub fn default_shape(&self, caps: &Capabilities, key: MatmulKey, m: usize) -> MatmulShape {
        if self.is_cpu {
            MatmulShape::for_cpu(caps, m, key.n)
        } else {
            MatmulShape::for_gpu(m, key.n, key.k)
        }
    }

    /// The attention variant for a step of `rows` query rows, heads of `head_dim` with
    /// `group` query heads per kv head.
    pub fn attention(&self, head_dim: usize, group: usize, rows: usize) -> AttentionVariant {
        self.attention
            .get(&(head_dim, group))
            .and_then(|v| v.iter().find(|(most, _)| rows <= *most))
            .map(|(_, variant)| *variant)
            .unwrap_or_else(|| AttentionVariant::default_for(self.is_cpu))
    }
}

/// Capabilities of a plain adapter (no f16, no subgroups), for unit tests.
#[cfg(test)]
pub(crate) fn tests_caps() -> Capabilities {
    Capabilities {
        subgroups: false,
        subgroup_min_size: 0,
        timestamps: false,
        timestamps_inside_passes: false,
        max_binding: 1 << 27,
        max_buffer: 1 << 28,
        max_workgroups_per_dim: 65535,
        max_workgroup_invocations: 256,
        max_storage_buffers_per_stage: 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::kernels::matmul::XLoads;

    fn caps() -> Capabilities {
        tests_caps()
    }

    #[test]
    fn a_tuned_shape_serves_its_bucket_and_defaults_fill_the_rest() {
        let key = MatmulKey {
            site: MatmulSite::Down,
            format: WeightFormat::Q4_1,
            n: 576,
            k: 1536,
        };
        let gemm = MatmulShape::Gemm { tm: 4 };
        let matvec = MatmulShape::MatVec {
            wg: 64,
            nr: 2,
            xr: 1,
        };
        let choice = |max_rows, shape| MatmulChoice {
            key,
            max_rows,
            shape,
            micros: 1.0,
            default_micros: 2.0,
        };
        let c = KernelChoices::tuned(
            false,
            &[choice(64, gemm), choice(1, matvec)],
            &[],
            "file".into(),
        );
        assert_eq!(c.matmul_shape(&caps(), key, 1), matvec);
        for m in [2, 8, 64] {
            assert_eq!(c.matmul_shape(&caps(), key, m), gemm, "{m}");
        }
        assert_eq!(
            c.matmul_shape(&caps(), key, 65),
            MatmulShape::for_gpu(65, 576, 1536)
        );
        let other = MatmulKey { n: 577, ..key };
        assert_eq!(
            c.matmul_shape(&caps(), other, 1),
            MatmulShape::for_gpu(1, 577, 1536)
        );
    }

    #[test]
    fn a_shape_the_adapter_cannot_run_falls_back_to_the_default() {
        let key = MatmulKey {
            site: MatmulSite::Qkv,
            format: WeightFormat::F16,
            n: 960,
            k: 576,
        };
        let shuffled = MatmulShape::Tile {
            rows: 1,
            cols: 2,
            loads: XLoads::Shuffled,
        };
        let choice = MatmulChoice {
            key,
            max_rows: 512,
            shape: shuffled,
            micros: 1.0,
            default_micros: 1.0,
        };
        let c = KernelChoices::tuned(true, &[choice], &[], "file".into());
        assert_eq!(
            c.matmul_shape(&caps(), key, 1),
            MatmulShape::for_cpu(&caps(), 1, 960)
        );
    }
}
