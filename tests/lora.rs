//! LoRA adapters against PEFT (fixtures by scripts/make_lora_fixtures.py: a random
//! adapter per tiny model family and one for the exported default model, recorded with
//! transformers + peft), on every adapter:
//! - the teacher-forced log-probs with the adapter within 1e-3 of PEFT's, and the greedy
//!   tokens equal; without the adapter the same comparison fails (the adapter moves
//!   log-probs by more than 0.1), and the base model matches PEFT's base log-probs;
//! - batch invariance: a request with the adapter draws bitwise the same tokens and
//!   log-probs alone and batched with base requests (prefill chunked or not), and a base
//!   request in that batch bitwise what it draws with no adapter set at all;
//! - `sprout rollout --lora DIR` draws PEFT's greedy tokens.
//!
//! Every test fails, never skips or passes, when no GPU adapter is found.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::cli::stdout_of;
use common::engine::{config, request, run};
use common::fixtures::{f32s, fixtures, greedy, json, load, max_abs_diff, u32s};
use common::gpus;
use sprout::generate::score;
use sprout::gpu::Gpu;
use sprout::model::decoder::Decoder;
use sprout::model::lora::LoraAdapter;
use sprout::model::lora::device::DeviceLora;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::sched::{FinishedSample, SamplingParams};

fn adapter_dir(name: &str) -> PathBuf {
    fixtures().join("lora").join(name)
}

/// The tiny fixture `name` on `gpu`, with its PEFT adapter set when `with_adapter`.
fn open(gpu: &Arc<Gpu>, name: &str, with_adapter: bool) -> Decoder {
    open_dir(gpu, &fixtures().join(name), name, with_adapter)
}

/// The model directory `dir` on `gpu`, with the PEFT adapter `name` set when `with_adapter`.
fn open_dir(gpu: &Arc<Gpu>, dir: &Path, name: &str, with_adapter: bool) -> Decoder {
    let mut source = SafetensorsDir::open(dir).unwrap();
    let decoder = load(gpu, &mut source);
    if with_adapter {
        set_adapter(gpu, &decoder, name);
    }
    decoder
}

fn set_adapter(gpu: &Arc<Gpu>, decoder: &Decoder, name: &str) {
    let adapter = LoraAdapter::read_dir(&adapter_dir(name), &decoder.config, 64).unwrap();
    let device = DeviceLora::upload(gpu, &adapter, &decoder.config, name, 1).unwrap();
    decoder.set_adapter(Some(device));
}

fn check_against_peft(name: &str) {
    check_dir_against_peft(name, &fixtures().join(name));
}

/// The model directory `dir` with the adapter `name` against its PEFT reference.
fn check_dir_against_peft(name: &str, dir: &Path) {
    let reference = json(&adapter_dir(name).join("reference.json"));
    let ids = u32s(&reference["input_ids"]);
    let want = f32s(&reference["logprobs"]);
    let want_base = f32s(&reference["base_logprobs"]);
    let g = &reference["greedy"];
    let prompt = u32s(&g["prompt_ids"]);
    let want_greedy = u32s(&g["token_ids"]);
    for gpu in gpus() {
        let label = format!("{name} on {}", gpu.adapter.label());
        let decoder = open_dir(&gpu, dir, name, true);
        let got = pollster::block_on(score(&decoder, &ids)).unwrap();
        let diff = max_abs_diff(&got, &want);
        println!("{label}: log-probs with the adapter within {diff:.2e} of PEFT's");
        assert!(
            diff <= 1e-3,
            "{label}: log-probs differ from PEFT's by {diff}"
        );
        let out = greedy(&decoder, &prompt, want_greedy.len());
        assert_eq!(out.token_ids, want_greedy, "{label}: greedy tokens");

        // Without the adapter the comparison fails, and the base matches PEFT's base.
        decoder.set_adapter(None);
        let base = pollster::block_on(score(&decoder, &ids)).unwrap();
        let moved = max_abs_diff(&base, &want);
        assert!(
            moved > 0.1,
            "{label}: the adapter moves log-probs by only {moved}"
        );
        let base_diff = max_abs_diff(&base, &want_base);
        assert!(
            base_diff <= 1e-3,
            "{label}: base log-probs differ by {base_diff}"
        );
        let out = greedy(&decoder, &prompt, want_greedy.len());
        assert_ne!(
            out.token_ids, want_greedy,
            "{label}: greedy tokens without it"
        );
    }
}

#[test]
fn tiny_llama_with_a_lora_adapter_matches_peft() {
    check_against_peft("tiny-llama");
}

#[test]
fn tiny_qwen2_with_a_lora_adapter_matches_peft() {
    check_against_peft("tiny-qwen2");
}

#[test]
fn tiny_qwen3_with_a_lora_adapter_matches_peft() {
    check_against_peft("tiny-qwen3");
}

#[test]
fn tiny_gemma3_with_a_lora_adapter_matches_peft() {
    check_against_peft("tiny-gemma3");
}

#[test]
fn tiny_smollm3_with_a_lora_adapter_matches_peft() {
    check_against_peft("tiny-smollm3");
}

/// A directory removed when dropped (an export is half a gigabyte: not left behind by a
/// failing test).
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The default model as `sprout export` writes it (f32), exported here as the script
/// exported it: the same bytes, or the reference is of another model.
#[test]
fn the_exported_default_model_with_a_lora_adapter_matches_peft() {
    let name = "smollm2-135m-export";
    let reference = json(&adapter_dir(name).join("reference.json"));
    let dir = std::env::temp_dir().join(format!("sprout-lora-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _removed = Removed(dir.clone());
    let (model, out) = (common::smollm2_path(), dir.display().to_string());
    stdout_of(&[
        "export",
        "--model",
        &model.display().to_string(),
        "--out",
        &out,
    ]);
    let sha = sprout::model::open::model_sha256(&dir).unwrap();
    assert_eq!(
        sha, reference["model_sha256"],
        "the export is not the model scripts/make_lora_fixtures.py recorded"
    );
    check_dir_against_peft(name, &dir);
}

fn bits(samples: &[FinishedSample]) -> Vec<(Vec<u32>, Vec<u32>)> {
    samples
        .iter()
        .map(|s| {
            let lp = s.logprobs.iter().map(|x| x.to_bits()).collect();
            (s.token_ids.clone(), lp)
        })
        .collect()
}

/// The samples of `index` among `samples`.
fn of(samples: &[FinishedSample], index: u32) -> Vec<FinishedSample> {
    let mut out: Vec<FinishedSample> = samples
        .iter()
        .filter(|s| s.request_index == index)
        .cloned()
        .collect();
    out.sort_by_key(|s| s.sample_index);
    out
}

#[test]
fn a_request_with_the_adapter_draws_the_same_bits_alone_and_batched_with_base_requests() {
    let name = "tiny-qwen3";
    let params = SamplingParams {
        temperature: 1.0,
        seed: 7,
        max_tokens: 12,
        ..SamplingParams::default()
    };
    let prompt: Vec<u32> = (20..60).collect();
    let with = |index, lora| {
        let mut r = request(index, prompt.clone(), 3, params.clone());
        r.lora = lora;
        r
    };
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let base_only = open(&gpu, name, false);
        let (alone_base, _) = run(&base_only, &config(64, 512), &[with(1, false)]);
        drop(base_only);
        let decoder = open(&gpu, name, true);
        let (alone_lora, _) = run(&decoder, &config(64, 512), &[with(0, true)]);
        assert_ne!(
            bits(&alone_lora),
            bits(&alone_base),
            "{label}: the adapter changes nothing"
        );
        // Batched together, whole prompts and prefill chunks of 8 tokens.
        for max_batch_tokens in [512, 8] {
            let both = [with(0, true), with(1, false)];
            let (mixed, _) = run(&decoder, &config(64, max_batch_tokens), &both);
            assert_eq!(
                bits(&of(&mixed, 0)),
                bits(&alone_lora),
                "{label}: the adapter's request batched ({max_batch_tokens})"
            );
            assert_eq!(
                bits(&of(&mixed, 1)),
                bits(&alone_base),
                "{label}: the base request batched with the adapter's ({max_batch_tokens})"
            );
            for s in of(&mixed, 0) {
                assert!(s.weights_versions.iter().all(|&v| v == 1), "{label}");
            }
        }
    }
}

#[test]
fn the_rollout_command_with_lora_draws_peft_s_greedy_tokens() {
    let name = "tiny-llama";
    let reference = json(&adapter_dir(name).join("reference.json"));
    let g = &reference["greedy"];
    let prompt = u32s(&g["prompt_ids"]);
    let want = u32s(&g["token_ids"]);
    let dir = std::env::temp_dir().join(format!("sprout-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prompts = dir.join("prompts.jsonl");
    let out = dir.join("out.jsonl");
    let line = serde_json::json!({ "prompt_token_ids": prompt });
    std::fs::write(&prompts, format!("{line}\n")).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["rollout", "--model"])
        .arg(fixtures().join(name))
        .arg("--lora")
        .arg(adapter_dir(name))
        .arg("--prompts")
        .arg(&prompts)
        .args(["-n", "1", "--temperature", "0", "--max-tokens"])
        .arg(want.len().to_string())
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let record: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(u32s(&record["token_ids"]), want);
    let lora = &record["provenance"]["lora"];
    assert_eq!(lora["name"], name, "{record}");
    assert_eq!(lora["version"], 1, "{record}");
}
