//! End to end against Hugging Face transformers (fixtures made by scripts/make_fixtures.py),
//! on every adapter:
//! - the tiny random Llama, tied Llama (bf16) and Qwen2 (f16, q/k/v bias) models' logits at
//!   every position within 1e-4 of transformers', and their greedy tokens identical;
//! - SmolLM2-135M-Instruct Q4_1 read from its GGUF: prompt ids equal, 32 greedy tokens
//!   identical, teacher-forced log-probs within 1e-3.
//!
//! Every test fails, never skips or passes, when no adapter is found.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{gpus, smollm2_path};
use serde_json::Value;
use sprout::generate::{GenerateParams, generate, logits, score};
use sprout::gpu::Gpu;
use sprout::model::decoder::Decoder;
use sprout::model::gguf_model::GgufModel;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn load(gpu: &Arc<Gpu>, source: &mut dyn WeightSource) -> Decoder {
    Decoder::load(gpu.clone(), source, &mut |_, _| {}).unwrap()
}

/// The largest |a - b|, or NaN when either side holds a NaN (`f32::max` would drop it, and
/// a NaN log-prob would pass as a perfect match).
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
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

fn check_tiny(name: &str) {
    let dir = fixtures().join(name);
    let reference = json(&dir.join("reference.json"));
    let ids = u32s(&reference["input_ids"]);
    let want: Vec<f32> = reference["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(f32s)
        .collect();
    for gpu in gpus() {
        let mut source = SafetensorsDir::open(&dir).unwrap();
        let decoder = load(&gpu, &mut source);
        let got = pollster::block_on(logits(&decoder, &ids)).unwrap();
        let diff = max_abs_diff(&got, &want);
        println!(
            "{name} on {}: logits max |diff| {diff:.2e}",
            gpu.adapter.label()
        );
        assert!(
            diff <= 1e-4,
            "{name} on {}: logits differ by {diff}",
            gpu.adapter.label()
        );

        let greedy = &reference["greedy"];
        let want_ids = u32s(&greedy["token_ids"]);
        let params = GenerateParams {
            max_tokens: want_ids.len(),
            temperature: 0.0,
            seed: 0,
            stop_ids: vec![],
        };
        let g = pollster::block_on(generate(
            &decoder,
            &u32s(&greedy["prompt_ids"]),
            &params,
            |_, _| {},
        ))
        .unwrap();
        assert_eq!(
            g.token_ids,
            want_ids,
            "{name} on {}: greedy tokens",
            gpu.adapter.label()
        );
        let lp = max_abs_diff(&g.logprobs, &f32s(&greedy["logprobs"]));
        assert!(
            lp <= 1e-4,
            "{name} on {}: greedy logprobs differ by {lp}",
            gpu.adapter.label()
        );
    }
}

#[test]
fn tiny_llama_matches_transformers() {
    check_tiny("tiny-llama");
}

#[test]
fn tiny_llama_tied_bf16_matches_transformers() {
    check_tiny("tiny-llama-tied");
}

#[test]
fn tiny_qwen2_f16_with_bias_matches_transformers() {
    check_tiny("tiny-qwen2");
}

#[test]
fn smollm2_matches_transformers() {
    let fixture = json(&fixtures().join("smollm2.json"));
    let path = smollm2_path();
    for gpu in gpus() {
        let mut model = GgufModel::open(&path).unwrap();
        let tokenizer = model.tokenizer().unwrap();
        let decoder = load(&gpu, &mut model);
        for prompt in fixture["prompts"].as_array().unwrap() {
            let name = prompt["name"].as_str().unwrap();
            let label = format!("{name} on {}", gpu.adapter.label());
            let ids = tokenizer.encode(prompt["text"].as_str().unwrap()).unwrap();
            assert_eq!(ids, u32s(&prompt["prompt_ids"]), "{label}: prompt ids");
            let want = u32s(&prompt["greedy_ids"]);
            let params = GenerateParams {
                max_tokens: want.len(),
                temperature: 0.0,
                seed: 0,
                stop_ids: vec![],
            };
            let g = pollster::block_on(generate(&decoder, &ids, &params, |_, _| {})).unwrap();
            assert_eq!(g.token_ids, want, "{label}: greedy tokens");
            let want_lp = f32s(&prompt["greedy_logprobs"]);
            let lp = max_abs_diff(&g.logprobs, &want_lp);
            let full: Vec<u32> = ids.iter().chain(&want).copied().collect();
            let scored = pollster::block_on(score(&decoder, &full)).unwrap();
            let forced = max_abs_diff(&scored[ids.len() - 1..], &want_lp);
            println!(
                "{label}: greedy 32/32, logprobs max |diff| {lp:.2e} (generated), {forced:.2e} (teacher-forced)"
            );
            assert!(
                lp <= 1e-3 && forced <= 1e-3,
                "{label}: logprobs differ by {lp} / {forced}"
            );
        }
    }
}
