//! A LoRA adapter on the device: per layer and fused site, the stacked A as an f32
//! weight (the `A x` matmul reads it like any weight) and the scaled B as one f32 tensor
//! (the base matmul's epilogue reads it), with the version its requests' tokens are
//! labelled with. A version names the adapter's contents over one base: a weights update
//! relabels the adapter one version up ([`DeviceLora::relabelled`], the same buffers).
//!
//! Invariant: every site's A is `[rank, k]` and its B `[n, rank]` for the base weight of
//! its site (`n` rows of `k` columns), checked against the model's shapes on upload.

use std::sync::Arc;

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::gpu::kernels::matmul;
use crate::gpu::{Gpu, GpuWeight, Tensor};
use crate::model::config::ModelConfig;
use crate::model::lora::{LoraAdapter, SiteLora};

/// One fused site's adapter on the device.
pub struct DeviceSite {
    /// `[rank, k]` f32.
    pub a: GpuWeight,
    /// `[n, rank]` f32, scaled, in the base weight's row order.
    pub b: Tensor,
    pub rank: usize,
}

/// One layer's sites (`None`: untouched).
#[derive(Default)]
pub struct DeviceLayer {
    pub qkv: Option<DeviceSite>,
    pub o: Option<DeviceSite>,
    pub gate_up: Option<DeviceSite>,
    pub down: Option<DeviceSite>,
}

/// An adapter on the device.
pub struct DeviceLora {
    /// Shared by the adapter's relabelled copies.
    pub layers: Arc<Vec<DeviceLayer>>,
    /// The widest stacked rank of any site: the `A x` scratch's width.
    pub max_site_rank: usize,
    /// The adapter's largest `r`.
    pub max_r: usize,
    /// The digest of the adapter's contents.
    pub digest: String,
    /// The name it was loaded under (its directory's, or a server's `lora_name`).
    pub name: String,
    /// Its version: what the tokens of requests run with it are labelled with.
    pub version: u64,
}

/// The `(n, k)` of each fused site's base weight: q|k|v, o, gate|up, down.
fn site_shapes(c: &ModelConfig) -> [(usize, usize); 4] {
    let h = c.hidden_size;
    [
        (c.q_dim() + 2 * c.kv_dim(), h),
        (h, c.q_dim()),
        (2 * c.intermediate_size, h),
        (h, c.intermediate_size),
    ]
}

fn upload_site(
    gpu: &Gpu,
    site: &SiteLora,
    (n, k): (usize, usize),
    what: &str,
) -> Result<DeviceSite, SproutError> {
    let r = site.rank;
    if r == 0 || site.a.len() != r * k || site.b.len() != n * r {
        return Err(SproutError::Model(format!(
            "the LoRA adapter's {what}: rank {r} with {} A and {} B values, for a base weight \
             of {n}x{k}",
            site.a.len(),
            site.b.len()
        )));
    }
    let a = GpuWeight::upload(gpu, WeightFormat::F32, bytemuck::cast_slice(&site.a), r, k)?;
    Ok(DeviceSite {
        a,
        b: gpu.upload(&site.b),
        rank: r,
    })
}

impl DeviceLora {
    /// Uploads `adapter` for a model of `config`, named `name` and labelled `version`.
    // On the web wgpu's handles are neither Send nor Sync (one thread); the Arc shares the
    // layers between relabelled copies, which it does the same there.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub fn upload(
        gpu: &Gpu,
        adapter: &LoraAdapter,
        config: &ModelConfig,
        name: &str,
        version: u64,
    ) -> Result<DeviceLora, SproutError> {
        if !matmul::lora_fits(&gpu.caps) {
            return Err(SproutError::Adapter(format!(
                "{name}: this GPU adapter binds at most {} storage buffers per shader stage, \
                 and LoRA's fused q|k|v kernel binds {}",
                gpu.caps.max_storage_buffers_per_stage,
                matmul::lora_storage_bindings_needed()
            )));
        }
        if adapter.layers.len() != config.n_layers {
            return Err(SproutError::Model(format!(
                "the LoRA adapter has {} layers, the model {}",
                adapter.layers.len(),
                config.n_layers
            )));
        }
        let shapes = site_shapes(config);
        let names = ["q|k|v", "o", "gate|up", "down"];
        let mut layers = Vec::with_capacity(adapter.layers.len());
        for (l, layer) in adapter.layers.iter().enumerate() {
            let mut out: [Option<DeviceSite>; 4] = Default::default();
            for (s, site) in layer.sites().into_iter().enumerate() {
                if let Some(site) = site {
                    let what = format!("layer {l} {} site", names[s]);
                    out[s] = Some(upload_site(gpu, site, shapes[s], &what)?);
                }
            }
            let [qkv, o, gate_up, down] = out;
            layers.push(DeviceLayer {
                qkv,
                o,
                gate_up,
                down,
            });
        }
        Ok(DeviceLora {
            layers: Arc::new(layers),
            max_site_rank: adapter.max_site_rank(),
            max_r: adapter.max_r,
            digest: adapter.digest.clone(),
            name: name.to_string(),
            version,
        })
    }

    /// The same adapter (its buffers shared) labelled `version`.
    pub fn relabelled(&self, version: u64) -> DeviceLora {
        DeviceLora {
            layers: self.layers.clone(),
            max_site_rank: self.max_site_rank,
            max_r: self.max_r,
            digest: self.digest.clone(),
            name: self.name.clone(),
            version,
        }
    }

    /// Bytes the adapter holds on the device.
    pub fn device_bytes(&self) -> u64 {
        let sites = self
            .layers
            .iter()
            .flat_map(|l| [&l.qkv, &l.o, &l.gate_up, &l.down]);
        sites
            .flatten()
            .map(|s| s.b.buffer.size() + s.a.parts.iter().map(|p| p.buffer.size()).sum::<u64>())
            .sum()
    }
}
