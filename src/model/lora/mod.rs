//! LoRA adapters kept apart from the base weights: `y = W x + (alpha / r) B (A x)` for
//! the projections an adapter targets, W in any stored format and A, B in f32.
//!
//! An adapter is read from PEFT's directory (`adapter_config.json` and
//! `adapter_model.safetensors`), checked against the model (names, ranks, shapes, what
//! PEFT options sprout refuses by name), and laid out for the fused kernels
//! ([`LoraAdapter`]): per layer, one [`SiteLora`] per fused projection site (q|k|v,
//! o, gate|up, down). A site's A matrices, which share the site's input, are stacked
//! into one `[rank, k]` matrix so one matmul computes every `A x` of the site; its B
//! matrices are scaled by `alpha / r` (or rsLoRA's `alpha / sqrt(r)`) and laid out in the
//! base weight's own row order (q and k rows permuted as the base's are for RoPE's
//! adjacent pairs, gate and up interleaved), each row holding its projection's B row in
//! that projection's columns of the stacked rank and zero elsewhere. The kernels then add
//! `Bp[row] · t` (t = the stacked `A x`) in the base matmul's epilogue.
//!
//! Invariants: every value is finite; `a.len() == rank * k` and `b.len() == n * rank` for
//! the site's base weight of `n` rows and `k` columns; a site with no targeted projection
//! is `None`; `rank` of a site is at most three times the adapter's largest `r`.
//!
//! Files: `peft` (the entry points [`LoraAdapter::from_peft`] and, native only,
//! `LoraAdapter::read_dir`), `peft_config` (what `adapter_config.json` may say, and what
//! is refused by name), `patterns` (PEFT's rules for which modules are targeted with which
//! rank and alpha), `peft_tensors` (the safetensors file checked against them),
//! `projection` (the seven projections and their shapes), `layout` (a layer's sites in the
//! base's fused row order).

pub mod device;
mod layout;
mod patterns;
mod peft;
mod peft_config;
mod peft_tensors;
mod projection;

pub use peft::{CONFIG_FILE, TENSORS_FILE};
pub use projection::Projection;

/// One fused projection site's adapter, laid out for the kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteLora {
    /// Rows of the stacked A (the sum of the ranks of the site's targeted projections).
    pub rank: usize,
    /// `[rank, k]` row-major f32: the targeted projections' A matrices stacked.
    pub a: Vec<f32>,
    /// `[n, rank]` row-major f32: the scaled B rows in the base weight's row order.
    pub b: Vec<f32>,
}

/// One decoder layer's adapter, per fused site (`None`: no projection of the site is
/// targeted in this layer).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerLora {
    pub qkv: Option<SiteLora>,
    pub o: Option<SiteLora>,
    pub gate_up: Option<SiteLora>,
    pub down: Option<SiteLora>,
}

impl LayerLora {
    /// The sites in the order the forward pass runs them.
    pub fn sites(&self) -> [Option<&SiteLora>; 4] {
        [
            self.qkv.as_ref(),
            self.o.as_ref(),
            self.gate_up.as_ref(),
            self.down.as_ref(),
        ]
    }
}

/// A whole adapter, laid out for one model's fused kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraAdapter {
    /// One entry per decoder layer (`LayerLora::default()` for an untouched layer).
    pub layers: Vec<LayerLora>,
    /// The largest `r` of any projection (what `--max-lora-rank` bounds).
    pub max_r: usize,
    /// A hex SHA-256 of the adapter's files, naming this adapter's contents in records
    /// and in the prefix cache.
    pub digest: String,
}

impl LoraAdapter {
    /// The largest stacked rank of any site: the width of the `A x` scratch a step needs.
    pub fn max_site_rank(&self) -> usize {
        let sites = self.layers.iter().flat_map(|l| l.sites());
        sites.flatten().map(|s| s.rank).max().unwrap_or(0)
    }
}
