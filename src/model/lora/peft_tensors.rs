//! PEFT's `adapter_model.safetensors`: every tensor checked against the modules the config
//! targets before any of its data is read, then read as f32.
//!
//! PEFT names a LoRA layer's tensors `base_model.model.{module}.lora_A.weight` (`[r, in]`)
//! and `.lora_B.weight` (`[out, r]`), the module as the model names it
//! (`model.layers.3.self_attn.q_proj`). Invariants of what [`read`] returns: exactly the
//! expected modules, each with its A and B of the expected shapes (so the rank is the
//! config's), every value finite. Checked from the header alone, so a hostile file sizes
//! nothing: each name is one the config targets, its dtype F32, F16 or BF16, its shape the
//! one the model and config imply, and its byte range inside the file; then the
//! `safetensors` crate's own validation (ranges contiguous and not overlapping, the data
//! ending where the file does). Every error names the tensor.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::lora::projection::{Projection, UNSUPPORTED_MODULES};

/// What PEFT writes before a module's name.
const PREFIX: &str = "base_model.model.";

/// A module the config targets, with what its tensors must be.
#[derive(Clone, Debug)]
pub struct Expected {
    pub layer: usize,
    pub projection: Projection,
    pub r: usize,
    /// Rows of the base weight (B's rows).
    pub out: usize,
    /// Columns of the base weight (A's columns).
    pub inp: usize,
}

/// One module's A (`[r, in]`) and B (`[out, r]`), row-major f32, as PEFT stores them.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleWeights {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Half {
    A,
    B,
}

/// A tensor's header entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Info {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// The value types LoRA weights may be stored in.
#[derive(Clone, Copy)]
enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    /// Little-endian values as f32 (exact for each type).
    fn decode(self, bytes: &[u8]) -> Vec<f32> {
        let chunks = bytes.chunks_exact(self.bytes());
        match self {
            Dtype::F32 => chunks
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => chunks
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::Bf16 => chunks
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        }
    }
}

/// A checked header entry.
struct Entry<'a> {
    module: &'a str,
    half: Half,
    dtype: Dtype,
}

/// Reads the tensors of `buffer` (a whole safetensors file) for the `expected` modules
/// (keyed by module name); `n_layers` makes errors about other layers precise. An error
/// names the tensor (without the file's name, which the caller adds).
pub fn read(
    buffer: &[u8],
    expected: &BTreeMap<String, Expected>,
    n_layers: usize,
) -> Result<BTreeMap<String, ModuleWeights>, String> {
    let (header, data) = split(buffer)?;
    let mut entries: BTreeMap<String, (Entry, (usize, usize))> = BTreeMap::new();
    for (name, value) in &header {
        if name == "__metadata__" {
            continue;
        }
        let (module, half) = classify(name, expected, n_layers)?;
        let want = &expected[module];
        let info = Info::deserialize(value)
            .map_err(|e| format!("tensor {name} has a header entry sprout cannot read: {e}"))?;
        let dtype = match info.dtype.as_str() {
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::Bf16,
            other => {
                return Err(format!(
                    "tensor {name} has dtype {other}; LoRA weights must be F32, F16 or BF16"
                ));
            }
        };
        let shape = match half {
            Half::A => [want.r, want.inp],
            Half::B => [want.out, want.r],
        };
        if info.shape.len() != 2
            || info.shape[0] != shape[0] as u64
            || info.shape[1] != shape[1] as u64
        {
            return Err(format!(
                "tensor {name} has shape {:?}, but the model and adapter_config.json imply \
                 {shape:?} ({module}: rank {}, {} inputs, {} outputs)",
                info.shape, want.r, want.inp, want.out
            ));
        }
        // The shape is the expected one, so this product is small.
        let len = shape[0] * shape[1] * dtype.bytes();
        let (begin, end) = info.data_offsets;
        if begin.checked_add(len as u64) != Some(end) || end > data.len() as u64 {
            return Err(format!(
                "tensor {name}'s data_offsets [{begin}, {end}] do not hold its {len} bytes \
                 inside the file's {} bytes of data (truncated?)",
                data.len()
            ));
        }
        let entry = Entry {
            module,
            half,
            dtype,
        };
        entries.insert(name.clone(), (entry, (begin as usize, end as usize)));
    }
    for module in expected.keys() {
        for half in ["lora_A", "lora_B"] {
            let name = format!("{PREFIX}{module}.{half}.weight");
            if !entries.contains_key(&name) {
                return Err(format!(
                    "there is no tensor {name} (adapter_config.json targets {module})"
                ));
            }
        }
    }
    // Ranges contiguous from 0 and not overlapping, the data ending with the file: the
    // crate's validation, whose errors name an offending tensor where it can.
    safetensors::SafeTensors::deserialize(buffer)
        .map_err(|e| format!("not a valid safetensors file: {e}"))?;
    let mut out: BTreeMap<String, ModuleWeights> = BTreeMap::new();
    for (name, (entry, (begin, end))) in &entries {
        let values = entry.dtype.decode(&data[*begin..*end]);
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "tensor {name} holds a value that is not finite ({} at element {at})",
                values[at]
            ));
        }
        let weights = out
            .entry(entry.module.to_string())
            .or_insert_with(|| ModuleWeights {
                a: vec![],
                b: vec![],
            });
        match entry.half {
            Half::A => weights.a = values,
            Half::B => weights.b = values,
        }
    }
    Ok(out)
}

/// The header (parsed) and the data of a safetensors file.
fn split(buffer: &[u8]) -> Result<(Map<String, Value>, &[u8]), String> {
    let Some((n, rest)) = buffer.split_first_chunk::<8>() else {
        return Err(format!(
            "is {} bytes, too short for a safetensors file",
            buffer.len()
        ));
    };
    let n = u64::from_le_bytes(*n);
    if n > rest.len() as u64 {
        return Err(format!(
            "its header would be {n} bytes, but the file has {} after the header's length \
             (truncated, or not a safetensors file)",
            rest.len()
        ));
    }
    let (header, data) = rest.split_at(n as usize);
    let header: Map<String, Value> = serde_json::from_slice(header)
        .map_err(|e| format!("its header is not a JSON object: {e}"))?;
    Ok((header, data))
}

/// The module and half a tensor name is for, if the config expects it.
fn classify<'a>(
    name: &str,
    expected: &'a BTreeMap<String, Expected>,
    n_layers: usize,
) -> Result<(&'a str, Half), String> {
    let parsed = name.strip_prefix(PREFIX).and_then(|rest| {
        let (module, half) = rest.rsplit_once(".lora_")?;
        match half {
            "A.weight" => Some((module, Half::A)),
            "B.weight" => Some((module, Half::B)),
            _ => None,
        }
    });
    let Some((module, half)) = parsed else {
        return Err(format!(
            "tensor {name} is not a LoRA weight sprout reads ({PREFIX}<module>.lora_A.weight \
             or .lora_B.weight: DoRA magnitudes, LoRA biases, embedding adapters and saved \
             modules are not supported)"
        ));
    };
    if let Some((key, _)) = expected.get_key_value(module) {
        return Ok((key.as_str(), half));
    }
    if UNSUPPORTED_MODULES.contains(&module) {
        return Err(format!(
            "tensor {name} is an adapter on {module}; sprout runs adapters on the decoder \
             layers' projections only"
        ));
    }
    let layer_projection = module
        .strip_prefix("model.layers.")
        .and_then(|rest| rest.split_once('.'))
        .and_then(|(layer, suffix)| {
            let projection = Projection::ALL.into_iter().find(|p| p.suffix() == suffix)?;
            Some((layer.parse::<usize>().ok()?, projection))
        });
    Err(match layer_projection {
        Some((layer, _)) if layer >= n_layers => {
            format!("tensor {name} is for layer {layer}, but the model has {n_layers} layers")
        }
        Some(_) => {
            format!("tensor {name} is for {module}, which adapter_config.json does not target")
        }
        None => format!("tensor {name} is for {module}, which is no projection of this model"),
    })
}
