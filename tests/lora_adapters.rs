//! The LoRA fixtures (`tests/fixtures/lora/`, made by scripts/make_lora_fixtures.py with
//! PEFT): sprout's reader accepts each adapter for its model, gives each layer's fused
//! sites the ranks PEFT gave the projections, and lays out `B A` as the base's load lays
//! out its weights: for every site, `Bp A_stacked` equals PEFT's `scale * B A` of each
//! projection (Hugging Face's rows, PEFT's own scale from reference.json) with q and k
//! rows permuted, then stacked or interleaved, by the base's own functions.
//! (Whether sprout's forward pass with the adapter gives PEFT's log-probs is a GPU test.)
//! The exported default model's adapter is read against the default model's config (the
//! export writes that config), so these tests need the default model.

// Only the default model's path is used here.
#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use sprout::formats::TensorData;
use sprout::model::config::ModelConfig;
use sprout::model::fused_weights::{
    half_split_to_adjacent, interleave_rows, permute_head_rows, stack_rows,
};
use sprout::model::gguf_model::GgufModel;
use sprout::model::lora::{LoraAdapter, Projection, SiteLora};
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Each fixture adapter: its directory, its reference.json and its base model's config.
fn fixtures() -> Vec<(PathBuf, Value, ModelConfig)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir().join("lora"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 5, "{dirs:?}");
    dirs.into_iter()
        .map(|dir| {
            let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
            let reference: Value = serde_json::from_str(&text).unwrap();
            let config = base_config(reference["model"].as_str().unwrap());
            (dir, reference, config)
        })
        .collect()
}

/// The config of an adapter's base model: a tiny fixture's, or for the exported default
/// model the default model's own (the export writes it as it is).
fn base_config(model: &str) -> ModelConfig {
    if model == "smollm2-135m-export" {
        let gguf = GgufModel::open(common::smollm2_path()).unwrap();
        return gguf.config().clone();
    }
    SafetensorsDir::open(fixtures_dir().join(model))
        .unwrap()
        .config()
        .clone()
}

fn read(dir: &Path, model: &ModelConfig) -> LoraAdapter {
    LoraAdapter::read_dir(dir, model, 64).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn every_fixture_adapter_is_read_with_peft_site_ranks() {
    for (dir, reference, model) in fixtures() {
        let adapter = read(&dir, &model);
        let want = &reference["adapter"]["site_ranks"];
        let got: Vec<Vec<usize>> = adapter
            .layers
            .iter()
            .map(|l| l.sites().iter().map(|s| s.map_or(0, |s| s.rank)).collect())
            .collect();
        let want: Vec<Vec<usize>> = serde_json::from_value(want.clone()).unwrap();
        assert_eq!(got, want, "{}", dir.display());
        let max_r = reference["adapter"]["max_r"].as_u64().unwrap() as usize;
        assert_eq!(adapter.max_r, max_r, "{}", dir.display());
        assert!(adapter.max_site_rank() <= 3 * max_r);
        // The digest: the two files' bytes, config first.
        let mut hasher = Sha256::new();
        hasher.update(std::fs::read(dir.join("adapter_config.json")).unwrap());
        hasher.update(std::fs::read(dir.join("adapter_model.safetensors")).unwrap());
        let hex: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(adapter.digest, hex);
        // The largest rank allowed bounds the adapter, naming both ranks.
        let e = LoraAdapter::read_dir(&dir, &model, max_r - 1)
            .unwrap_err()
            .to_string();
        let (r, allowed) = (format!("rank {max_r}"), format!("allowed, {}", max_r - 1));
        assert!(e.contains(&r) && e.contains(&allowed), "{e}");
        assert!(e.contains("adapter_config.json"), "{e}");
    }
}

/// A module's A (`[r, in]`) and B (`[out, r]`) from the file, as f32.
fn tensors(file: &[u8], module: &str) -> (Vec<f32>, Vec<f32>) {
    let st = safetensors::SafeTensors::deserialize(file).unwrap();
    let values = |half: &str| {
        let t = st
            .tensor(&format!("base_model.model.{module}.lora_{half}.weight"))
            .unwrap();
        let data = t.data();
        match t.dtype() {
            safetensors::Dtype::F32 => data
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            safetensors::Dtype::F16 => data
                .chunks(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            safetensors::Dtype::BF16 => data
                .chunks(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            other => panic!("{module}: {other:?}"),
        }
    };
    (values("A"), values("B"))
}

/// PEFT's dense delta of projection `p` of layer `layer` (`[out, in]`, Hugging Face's
/// rows), zero when the adapter does not target it.
fn peft_delta(
    file: &[u8],
    scales: &Value,
    model: &ModelConfig,
    layer: usize,
    p: Projection,
) -> TensorData {
    let (out, inp) = p.shape(model);
    let module = p.module_name(layer);
    let Some(scale) = scales[&module].as_f64() else {
        return TensorData::from_f32(out, inp, &vec![0.0; out * inp]);
    };
    let (a, b) = tensors(file, &module);
    let r = a.len() / inp;
    let mut delta = vec![0.0f32; out * inp];
    for (i, row) in delta.chunks_mut(inp).enumerate() {
        for (j, d) in row.iter_mut().enumerate() {
            let dot: f64 = (0..r)
                .map(|t| b[i * r + t] as f64 * a[t * inp + j] as f64)
                .sum();
            *d = (scale * dot) as f32;
        }
    }
    TensorData::from_f32(out, inp, &delta)
}

/// `Bp A_stacked` of a site: `[n, k]`.
fn site_delta(site: &SiteLora, k: usize) -> Vec<f32> {
    let n = site.b.len() / site.rank;
    let mut out = vec![0.0f32; n * k];
    for (i, row) in out.chunks_mut(k).enumerate() {
        for (j, d) in row.iter_mut().enumerate() {
            let dot: f64 = (0..site.rank)
                .map(|t| site.b[i * site.rank + t] as f64 * site.a[t * k + j] as f64)
                .sum();
            *d = dot as f32;
        }
    }
    out
}

fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    let peak = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(peak > 0.0, "{what}: an all-zero delta tests nothing");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * peak,
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

#[test]
fn every_fixture_adapter_lays_out_peft_deltas_in_the_base_row_order() {
    use Projection::*;
    for (dir, reference, model) in fixtures() {
        let adapter = read(&dir, &model);
        let file = std::fs::read(dir.join("adapter_model.safetensors")).unwrap();
        let scales = &reference["adapter"]["scales"];
        let order = half_split_to_adjacent(model.head_dim);
        for (l, layer) in adapter.layers.iter().enumerate() {
            let delta = |p| peft_delta(&file, scales, &model, l, p);
            let what = |site: &str| format!("{} layer {l} {site}", dir.display());
            if let Some(site) = &layer.qkv {
                let (mut q, mut k) = (delta(Q), delta(K));
                permute_head_rows(&mut q, model.head_dim, &order);
                permute_head_rows(&mut k, model.head_dim, &order);
                let want = stack_rows(&[&q, &k, &delta(V)]).unwrap().to_f32().unwrap();
                assert_close(&what("qkv"), &site_delta(site, model.hidden_size), &want);
            }
            if let Some(site) = &layer.o {
                let want = delta(O).to_f32().unwrap();
                assert_close(&what("o"), &site_delta(site, model.q_dim()), &want);
            }
            if let Some(site) = &layer.gate_up {
                let want = interleave_rows(&delta(Gate), &delta(Up)).unwrap();
                let got = site_delta(site, model.hidden_size);
                assert_close(&what("gate_up"), &got, &want.to_f32().unwrap());
            }
            if let Some(site) = &layer.down {
                let want = delta(Down).to_f32().unwrap();
                assert_close(
                    &what("down"),
                    &site_delta(site, model.intermediate_size),
                    &want,
                );
            }
        }
    }
}
