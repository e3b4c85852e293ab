//! The committed fixtures (`tests/fixtures/`), the JSON they hold, and comparing numbers
//! with them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sprout::generate::{GenerateParams, Generation, generate};
use sprout::gpu::Gpu;
use sprout::model::decoder::Decoder;
use sprout::model::source::WeightSource;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

pub fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// `source`'s weights on `gpu`.
pub fn load(gpu: &Arc<Gpu>, source: &mut dyn WeightSource) -> Decoder {
    Decoder::load(gpu.clone(), source, &mut |_, _| {}).unwrap()
}

/// The largest |a - b|, or NaN when either side holds a NaN (`f32::max` would drop it, and
/// a NaN log-prob would pass as a perfect match).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |worst, d| {
            if worst.is_nan() || d.is_nan() {
                f32::NAN
            } else {
                worst.max(d)
            }
        })
}

/// Prints the largest |got - want| as `what`'s, and fails when it exceeds `tolerance`.
pub fn check_close(what: &str, got: &[f32], want: &[f32], tolerance: f32) {
    let diff = max_abs_diff(got, want);
    println!("{what}: max |diff| {diff:.2e}");
    assert!(diff <= tolerance, "{what}: differs by {diff}");
}

/// `n` greedy tokens after `prompt` (no stop tokens), with their log-probs.
pub fn greedy(decoder: &Decoder, prompt: &[u32], n: usize) -> Generation {
    let params = GenerateParams {
        max_tokens: n,
        temperature: 0.0,
        seed: 0,
        stop_ids: vec![],
    };
    pollster::block_on(generate(decoder, prompt, &params, |_, _| {})).unwrap()
}
