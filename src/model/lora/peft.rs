//! From PEFT's two files to a [`LoraAdapter`]: the config read and checked
//! (`peft_config`), the modules it targets in this model with their ranks (each at most
//! the caller's `max_rank`), the tensors read against them (`peft_tensors`), and each
//! layer laid out (`layout`).
//!
//! Nothing is sized from the tensors file before the config has said what it may hold:
//! its length is capped at what the targeted modules' A and B take in f32 plus a header
//! allowance, so a file that claims more is refused before it is read (`read_dir` checks
//! the file's length before reading it).
//!
//! The digest is the SHA-256 of the two files' bytes one after the other (config first),
//! so `cat adapter_config.json adapter_model.safetensors | sha256sum` gives it too.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::error::SproutError;
use crate::model::config::ModelConfig;
use crate::model::lora::layout::{self, ProjectionLora};
use crate::model::lora::peft_config::PeftConfig;
use crate::model::lora::peft_tensors::{self, Expected};
use crate::model::lora::projection::{Projection, UNSUPPORTED_MODULES};
use crate::model::lora::{LayerLora, LoraAdapter};

/// PEFT's file names in an adapter's directory.
pub const CONFIG_FILE: &str = "adapter_config.json";
pub const TENSORS_FILE: &str = "adapter_model.safetensors";

/// Header bytes allowed beyond the tensors' data: a fixed part (`__metadata__`) and a
/// part per tensor (its name, dtype, shape and offsets take about 130).
const HEADER_BASE_BYTES: u64 = 64 << 10;
const HEADER_BYTES_PER_TENSOR: u64 = 1 << 10;

/// The largest `adapter_config.json` read (PEFT writes a few kilobytes; a `rank_pattern`
/// naming every module of a large model, some tens).
#[cfg(not(target_arch = "wasm32"))]
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// What the config asks of this model: the modules it targets and what their tensors
/// must be.
struct Plan {
    config: PeftConfig,
    expected: BTreeMap<String, Expected>,
    max_r: usize,
    /// The most bytes the tensors file may hold.
    max_tensor_bytes: u64,
}

fn adapter_error(file: &str, message: String) -> SproutError {
    SproutError::Adapter(format!("{file}: {message}"))
}

impl Plan {
    fn new(
        config_json: &[u8],
        model: &ModelConfig,
        max_rank: usize,
        file: &str,
    ) -> Result<Plan, SproutError> {
        let bad = |m: String| adapter_error(file, m);
        let config = PeftConfig::parse(config_json).map_err(bad)?;
        for module in UNSUPPORTED_MODULES {
            if config.targeting.targets(module, false) {
                return Err(bad(format!(
                    "target_modules selects {module}; sprout runs adapters on the decoder \
                     layers' projections only"
                )));
            }
        }
        let mut expected = BTreeMap::new();
        let mut f32_values: u64 = 0;
        for layer in 0..model.n_layers {
            for projection in Projection::ALL {
                let name = projection.module_name(layer);
                if !config.targeting.targets(&name, true) {
                    continue;
                }
                let r = config.rank_of(&name);
                if r > max_rank {
                    return Err(bad(format!(
                        "{name} has rank {r}, above the largest LoRA rank allowed, {max_rank}"
                    )));
                }
                let (out, inp) = projection.shape(model);
                // r is at most max_rank, which a caller may set high: checked products.
                f32_values = (out.checked_add(inp))
                    .and_then(|n| n.checked_mul(r))
                    .and_then(|n| f32_values.checked_add(n as u64))
                    .ok_or_else(|| bad(format!("{name}'s rank {r} is too large to hold")))?;
                let want = Expected {
                    layer,
                    projection,
                    r,
                    out,
                    inp,
                };
                expected.insert(name, want);
            }
        }
        if expected.is_empty() {
            return Err(bad(
                "target_modules selects none of this model's projections \
                 (model.layers.N.self_attn.{q,k,v,o}_proj, model.layers.N.mlp.{gate,up,down}_proj)"
                    .into(),
            ));
        }
        let max_r = expected.values().map(|e| e.r).max().unwrap_or(0);
        let header = HEADER_BASE_BYTES + 2 * HEADER_BYTES_PER_TENSOR * expected.len() as u64;
        let max_tensor_bytes = f32_values
            .checked_mul(4)
            .and_then(|n| n.checked_add(8 + header))
            .ok_or_else(|| bad("the adapter's ranks are too large to hold".into()))?;
        Ok(Plan {
            config,
            expected,
            max_r,
            max_tensor_bytes,
        })
    }

    /// Reads and lays out the tensors; `file` names the tensors file in errors.
    fn build(
        &self,
        config_json: &[u8],
        tensors: &[u8],
        model: &ModelConfig,
        file: &str,
    ) -> Result<LoraAdapter, SproutError> {
        let bad = |m: String| adapter_error(file, m);
        if tensors.len() as u64 > self.max_tensor_bytes {
            return Err(bad(self.too_large(tensors.len() as u64)));
        }
        let mut weights =
            peft_tensors::read(tensors, &self.expected, model.n_layers).map_err(bad)?;
        let mut per_layer: Vec<BTreeMap<Projection, ProjectionLora>> =
            vec![BTreeMap::new(); model.n_layers];
        for (name, e) in &self.expected {
            let w = weights
                .remove(name)
                .expect("peft_tensors::read returns every module");
            let lora = ProjectionLora {
                r: e.r,
                scale: self.config.scale_of(name),
                a: w.a,
                b: w.b,
            };
            per_layer[e.layer].insert(e.projection, lora);
        }
        let layers: Vec<LayerLora> = per_layer
            .iter()
            .map(|projections| layout::layer(model, |p| projections.get(&p)))
            .collect();
        Ok(LoraAdapter {
            layers,
            max_r: self.max_r,
            digest: digest(config_json, tensors),
        })
    }

    fn too_large(&self, len: u64) -> String {
        format!(
            "is {len} bytes, more than the {} bytes that the A and B matrices of the \
             modules adapter_config.json targets take in f32, with their header",
            self.max_tensor_bytes
        )
    }
}

fn digest(config_json: &[u8], tensors: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(config_json);
    hasher.update(tensors);
    crate::formats::hex(&hasher.finalize())
}

impl LoraAdapter {
    /// An adapter from the bytes of PEFT's `adapter_config.json` and
    /// `adapter_model.safetensors`, checked against `model` and laid out for its fused
    /// kernels; an adapter whose largest rank is above `max_rank` is refused. An error
    /// names the file and the field, tensor or value.
    pub fn from_peft(
        config_json: &[u8],
        tensors: &[u8],
        model: &ModelConfig,
        max_rank: usize,
    ) -> Result<LoraAdapter, SproutError> {
        let plan = Plan::new(config_json, model, max_rank, CONFIG_FILE)?;
        plan.build(config_json, tensors, model, TENSORS_FILE)
    }

    /// [`LoraAdapter::from_peft`] on the two files of PEFT's directory `dir`; errors name
    /// the file's path. The tensors file's length is checked before it is read.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_dir(
        dir: &std::path::Path,
        model: &ModelConfig,
        max_rank: usize,
    ) -> Result<LoraAdapter, SproutError> {
        let config_path = dir.join(CONFIG_FILE);
        let config_name = config_path.display().to_string();
        let config_json = read_capped(&config_path, |len| {
            (len > MAX_CONFIG_BYTES).then(|| {
                format!("is {len} bytes, more than an adapter config's {MAX_CONFIG_BYTES}")
            })
        })?;
        let plan = Plan::new(&config_json, model, max_rank, &config_name)?;
        let tensors_path = dir.join(TENSORS_FILE);
        if !tensors_path.exists() && dir.join("adapter_model.bin").exists() {
            return Err(adapter_error(
                &tensors_path.display().to_string(),
                "does not exist; the directory holds adapter_model.bin, a pickle, which \
                 sprout does not read (save the adapter with safe_serialization)"
                    .into(),
            ));
        }
        let tensors = read_capped(&tensors_path, |len| {
            (len > plan.max_tensor_bytes).then(|| plan.too_large(len))
        })?;
        let tensors_name = tensors_path.display().to_string();
        plan.build(&config_json, &tensors, model, &tensors_name)
    }
}

/// The bytes of `path`, after `refuse(length)` has had its say on the file's length (and
/// again on what was read, should the file have grown meanwhile).
#[cfg(not(target_arch = "wasm32"))]
fn read_capped(
    path: &std::path::Path,
    refuse: impl Fn(u64) -> Option<String>,
) -> Result<Vec<u8>, SproutError> {
    use std::io::Read;
    let name = path.display().to_string();
    let cannot = |e: std::io::Error| adapter_error(&name, format!("cannot read: {e}"));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    if let Some(why) = refuse(len) {
        return Err(adapter_error(&name, why));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if let Some(why) = refuse(bytes.len() as u64) {
        return Err(adapter_error(&name, why));
    }
    Ok(bytes)
}
