//! `sprout export` and `--quantize` on the command line: every command that loads a model
//! takes `--quantize`, a quantized load runs on the quantized kernels (its records name
//! the format), what cannot be quantized is refused with a message naming why, and an
//! export refuses a directory that is not empty unless told to overwrite it.
//!
//! They run the release binary on the GPU: with no adapter the commands fail, and so do
//! these tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn sprout(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(args)
        .output()
        .expect("running sprout")
}

fn stdout_of(out: &Output, args: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sprout {args:?} failed: {stderr}");
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// Runs sprout, which must fail; its stderr.
fn failure(args: &[&str]) -> String {
    let out = sprout(args);
    assert!(!out.status.success(), "sprout {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn every_command_that_loads_a_model_takes_quantize() {
    for command in [
        "generate", "rollout", "score", "serve", "bench", "tune", "check", "export",
    ] {
        let args = [command, "--help"];
        let help = stdout_of(&sprout(&args), &args);
        assert!(
            help.contains("--quantize <FORMAT>"),
            "sprout {command}: {help}"
        );
    }
}

#[test]
fn a_quantized_load_runs_on_the_quantized_format() {
    let model = fixture("tiny-qwen2");
    for (quantize, format) in [
        ("q4_1", "q4_1"),
        ("q8_0", "q8_0"),
        ("q4_0", "q4_0"),
        ("bf16", "bf16"),
        ("f16", "f16"),
        ("none", "f16"),
    ] {
        let args = [
            "rollout",
            "--model",
            model.to_str().unwrap(),
            "--quantize",
            quantize,
            "--prompt",
            "The grey cat",
            "-n",
            "1",
            "--max-tokens",
            "4",
        ];
        let out = stdout_of(&sprout(&args), &args);
        let record: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(
            record["provenance"]["weight_format"], format,
            "--quantize {quantize}"
        );
        assert_eq!(record["token_ids"].as_array().unwrap().len(), 4);
    }
}

#[test]
fn what_cannot_be_quantized_is_refused_with_the_reason() {
    // The default model is a Q4_1 GGUF (its embedding Q8_0).
    let e = failure(&["generate", "--quantize", "q8_0", "--prompt", "hi"]);
    assert!(
        e.contains("quantizing to q8_0 on load") && e.contains("already stored as q8_0"),
        "{e}"
    );
    let e = failure(&[
        "bench",
        "--load-format",
        "dummy",
        "--model",
        "tiny-llama",
        "--quantize",
        "q4_1",
    ]);
    assert!(e.contains("--weight-format q4_1"), "{e}");
    let e = failure(&["generate", "--quantize", "f32", "--prompt", "hi"]);
    assert!(e.contains("cannot quantize to `f32`"), "{e}");
}

#[test]
fn export_refuses_a_non_empty_out_unless_told_to_overwrite() {
    let parent = std::env::temp_dir().join(format!("sprout-cli-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    let out = parent.join("tiny-qwen2-bf16");
    let model = fixture("tiny-qwen2");
    let mut args = vec![
        "export",
        "--model",
        model.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dtype",
        "bf16",
    ];
    let printed = stdout_of(&sprout(&args), &args);
    assert!(
        printed.contains("(bf16 weights)") && printed.contains("model.safetensors"),
        "{printed}"
    );
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "Qwen2ForCausalLM");
    assert_eq!(config["torch_dtype"], "bfloat16");
    let e = failure(&args);
    assert!(
        e.contains("is not empty") && e.contains("--overwrite"),
        "{e}"
    );
    args.push("--overwrite");
    stdout_of(&sprout(&args), &args);
    let mut left: Vec<String> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["tiny-qwen2-bf16"], "nothing but the export is left");
    std::fs::remove_dir_all(parent).unwrap();
}
