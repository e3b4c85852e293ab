//! End to end against Hugging Face transformers (fixtures made by scripts/make_fixtures.py),
//! on every adapter:
//! - the tiny random Llama, tied Llama (bf16) and Qwen2 (f16, q/k/v bias) models' logits at
//!   every position within 1e-4 of transformers', and their greedy tokens identical;
//! - the tiny random Qwen3 (q/k norms, head_dim past hidden, tied, bf16) and Llama 3.1
//!   (rope scaling in all three bands, inputs past the original context) the same way, and
//!   each read from its transformers 5 config form (`rope_parameters`) bit for bit as from
//!   the hub's (`rope_theta`, `rope_scaling`);
//! - the tiny random SmolLM3 (its last layer without RoPE, bf16, tied) the same way;
//! - the tiny random Gemma 3 (sandwich norms of 1 + w, q/k norms, GELU, scaled embeddings,
//!   sliding windows of 12 on three of four layers with their own RoPE base, a 119-token
//!   input crossing them, bf16) the same way, in both config forms;
//! - SmolLM2-135M-Instruct Q4_1 read from its GGUF: prompt ids equal, 32 greedy tokens
//!   identical, teacher-forced log-probs within 1e-3;
//! - the K-quant GGUFs (scripts/make_gguf_fixtures.py: Qwen3 and Llama 3.1 in Q4_K_M's
//!   Q4_K/Q6_K mix, Qwen2 with Q5_0 rows, Llama in Q5_K and Q5_1): prompt ids from the
//!   file's vocabulary equal, greedy tokens equal up to the first near-tie, log-probs
//!   within 1e-3.
//!
//! Every test fails, never skips or passes, when no adapter is found.

mod common;

use common::fixtures::{
    check_close, f32s, fixtures, greedy as greedy_tokens, json, load, max_abs_diff, u32s,
};
use common::{gemma3_path, gpus, smollm2_path};
use serde_json::Value;
use sprout::generate::{logits, score};
use sprout::model::decoder::Decoder;
use sprout::model::gguf_model::GgufModel;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::tokenizer::Tokenizer;

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
fn tiny_qwen3_bf16_with_qk_norms_matches_transformers() {
    check_tiny("tiny-qwen3");
}

#[test]
fn tiny_smollm3_with_a_rope_less_layer_matches_transformers() {
    check_tiny("tiny-smollm3");
}

#[test]
fn tiny_gemma3_with_sliding_windows_matches_transformers() {
    check_tiny("tiny-gemma3");
}

#[test]
fn tiny_llama3_with_rope_scaling_matches_transformers() {
    check_tiny("tiny-llama3");
}

/// The transformers 5 form of a config (`rope_parameters`) is the same model as the hub's:
/// the logits are the same bits.
#[test]
fn both_config_forms_give_the_same_logits() {
    for name in ["tiny-qwen3", "tiny-llama3", "tiny-gemma3"] {
        let dir = fixtures().join(name);
        let v5 = std::env::temp_dir().join(format!("sprout-{name}-v5-{}", std::process::id()));
        std::fs::create_dir_all(&v5).unwrap();
        for file in ["model.safetensors", "tokenizer.json"] {
            std::fs::copy(dir.join(file), v5.join(file)).unwrap();
        }
        std::fs::copy(
            dir.join("config.transformers5.json"),
            v5.join("config.json"),
        )
        .unwrap();
        let ids = u32s(&json(&dir.join("reference.json"))["input_ids"]);
        for gpu in gpus() {
            let run = |dir: &std::path::Path| {
                let mut source = SafetensorsDir::open(dir).unwrap();
                pollster::block_on(logits(&load(&gpu, &mut source), &ids)).unwrap()
            };
            let (hub, five) = (run(&dir), run(&v5));
            assert!(
                hub.iter()
                    .zip(&five)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} on {}: the transformers 5 config gives other logits",
                gpu.adapter.label()
            );
        }
        std::fs::remove_dir_all(&v5).unwrap();
    }
}

/// A step whose reference top1-top2 logit gap is below this may flip within the log-prob
/// tolerance: tokens are compared up to the first such step.
const NEAR_TIE: f32 = 2e-3;

fn check_gguf(name: &str) {
    let fixture = json(&fixtures().join(format!("{name}.json")));
    let path = fixtures().join(format!("{name}.gguf"));
    let want = u32s(&fixture["greedy"]["token_ids"]);
    let want_lp = f32s(&fixture["greedy"]["logprobs"]);
    let gaps = f32s(&fixture["greedy"]["top2_gaps"]);
    let compared = gaps
        .iter()
        .position(|&g| g < NEAR_TIE)
        .map_or(want.len(), |i| i + 1);
    for gpu in gpus() {
        let label = format!("{name} on {}", gpu.adapter.label());
        let mut model = GgufModel::open(&path).unwrap();
        let tokenizer = model.tokenizer().unwrap();
        let decoder = load(&gpu, &mut model);
        let ids = tokenizer.encode(fixture["text"].as_str().unwrap()).unwrap();
        assert_eq!(ids, u32s(&fixture["prompt_ids"]), "{label}: prompt ids");
        let g = greedy_tokens(&decoder, &ids, want.len());
        assert_eq!(
            g.token_ids[..compared],
            want[..compared],
            "{label}: greedy tokens"
        );
        let lp = max_abs_diff(&g.logprobs[..compared], &want_lp[..compared]);
        let full: Vec<u32> = ids.iter().chain(&want).copied().collect();
        let scored = pollster::block_on(score(&decoder, &full)).unwrap();
        let forced = max_abs_diff(&scored[ids.len() - 1..], &want_lp);
        println!(
            "{label} ({}): greedy {compared}/{} compared, logprobs max |diff| {lp:.2e} \
             (generated), {forced:.2e} (teacher-forced)",
            decoder.weight_format(),
            want.len()
        );
        assert!(
            lp <= 1e-3 && forced <= 1e-3,
            "{label}: logprobs differ by {lp} / {forced}"
        );
    }
}

#[test]
fn qwen3_q4_k_m_gguf_matches_transformers() {
    check_gguf("tiny-qwen3-q4_k_m");
}

#[test]
fn llama3_q4_k_m_gguf_with_rope_freqs_matches_transformers() {
    check_gguf("tiny-llama3-q4_k_m");
}

#[test]
fn qwen2_gguf_with_q5_0_rows_matches_transformers() {
    check_gguf("tiny-qwen2-q5_0");
}

#[test]
fn llama_q5_k_gguf_with_q5_1_rows_matches_transformers() {
    check_gguf("tiny-llama-q5_1-q5_k");
}

/// One prompt of a real model's fixture (`text`, `prompt_ids`, `greedy_ids`,
/// `greedy_logprobs`): its ids from the file's own tokenizer, the greedy tokens equal for the
/// first `compared`, and their log-probs, generated and teacher-forced, within 1e-3.
fn check_prompt(
    label: &str,
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    prompt: &Value,
    compared: usize,
) {
    let ids = tokenizer.encode(prompt["text"].as_str().unwrap()).unwrap();
    assert_eq!(ids, u32s(&prompt["prompt_ids"]), "{label}: prompt ids");
    let want = u32s(&prompt["greedy_ids"]);
    let want_lp = f32s(&prompt["greedy_logprobs"]);
    let g = greedy_tokens(decoder, &ids, want.len());
    assert_eq!(
        g.token_ids[..compared],
        want[..compared],
        "{label}: greedy tokens"
    );
    let lp = max_abs_diff(&g.logprobs[..compared], &want_lp[..compared]);
    let full: Vec<u32> = ids.iter().chain(&want).copied().collect();
    let scored = pollster::block_on(score(decoder, &full)).unwrap();
    let forced = max_abs_diff(&scored[ids.len() - 1..], &want_lp);
    println!(
        "{label}: greedy {compared}/{}, logprobs max |diff| {lp:.2e} (generated), \
         {forced:.2e} (teacher-forced)",
        want.len()
    );
    assert!(
        lp <= 1e-3 && forced <= 1e-3,
        "{label}: logprobs differ by {lp} / {forced}"
    );
}

/// Gemma 3 270M Q4_K_M (`--model gemma3-270m`: Q5_0, Q4_K, Q6_K and Q8_0 matrices, a
/// 262,144-row tied embedding, sliding windows of 512) against transformers on the same
/// file, five prompts: prompt ids from the file's vocabulary as sentencepiece gives them,
/// greedy tokens equal up to the first near-tie, log-probs within 1e-3.
#[test]
fn gemma3_270m_matches_transformers() {
    let fixture = json(&fixtures().join("gemma3_270m.json"));
    let path = gemma3_path();
    for gpu in gpus() {
        let mut model = GgufModel::open(&path).unwrap();
        let tokenizer = model.tokenizer().unwrap();
        let decoder = load(&gpu, &mut model);
        for prompt in fixture["prompts"].as_array().unwrap() {
            let label = format!(
                "gemma3 {} on {}",
                prompt["name"].as_str().unwrap(),
                gpu.adapter.label()
            );
            let compared = f32s(&prompt["top2_gaps"])
                .iter()
                .position(|&g| g < NEAR_TIE)
                .map_or(u32s(&prompt["greedy_ids"]).len(), |i| i + 1);
            check_prompt(&label, &decoder, &tokenizer, prompt, compared);
        }
    }
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
            let label = format!(
                "{} on {}",
                prompt["name"].as_str().unwrap(),
                gpu.adapter.label()
            );
            let all = u32s(&prompt["greedy_ids"]).len();
            check_prompt(&label, &decoder, &tokenizer, prompt, all);
        }
    }
}
