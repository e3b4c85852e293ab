//! End to end against Hugging Face transformers (fixtures made by scripts/make_fixtures.py),
//! on every adapter:
//! - the tiny random Llama, tied Llama (bf16) and Qwen2 (f16, q/k/v bias) models' logits at
//!   every position within 1e-4 of transformers', and their greedy tokens identical;
//! - SmolLM2-135M-Instruct Q4_1 read from its GGUF: prompt ids equal, 32 greedy tokens
//!   identical, teacher-forced log-probs within 1e-3.
//!
//! Every test fails, never skips or passes, when no adapter is found.

mod common;

use common::fixtures::{
    check_close, f32s, fixtures, greedy as greedy_tokens, json, load, max_abs_diff, u32s,
};
use common::{gpus, smollm2_path};
use sprout::generate::{logits, score};
use sprout::model::gguf_model::GgufModel;
use sprout::model::safetensors_dir::SafetensorsDir;

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
        let what = format!("{name} on {}: logits", gpu.adapter.label());
        check_close(&what, &got, &want, 1e-4);

        let greedy = &reference["greedy"];
        let want_ids = u32s(&greedy["token_ids"]);
        let g = greedy_tokens(&decoder, &u32s(&greedy["prompt_ids"]), want_ids.len());
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
            let g = greedy_tokens(&decoder, &ids, want.len());
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
