//! The shapes of the JSON the command line prints, as insta snapshots: a rollout record
//! (a line of `sprout rollout --out`), the rollout summary (`--json`), `bench --json` and
//! `devices --json`. Each value is replaced by its type's name, so a snapshot fails only
//! when a key is added, removed or renamed or a value changes type, never because a
//! timing, path, hash or adapter name differs; an intended change is reviewed with
//! `cargo insta review`.
//!
//! They run the release binary on the GPU (the rollout on the default model, bench on
//! dummy weights): with no adapter the commands fail, and so do these tests.

use std::process::Command;

use serde_json::{Map, Value};

/// Runs sprout with `args`; its stdout, or a panic with its stderr.
fn sprout(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(args)
        .output()
        .expect("running sprout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sprout {args:?} failed: {stderr}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `value` with every leaf replaced by its type's name (`integer`, `float`, `string`,
/// `bool`, `null`) and every array by the distinct shapes of its elements. Keys in
/// `nullable` may hold null or `type`: either way they read `type | null`.
fn shape(value: &Value, nullable: &[(&str, &str)]) -> Value {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(n) if n.is_f64() => "float".into(),
        Value::Number(_) => "integer".into(),
        Value::String(_) => "string".into(),
        Value::Array(items) => {
            let mut shapes: Vec<Value> = Vec::new();
            for s in items.iter().map(|v| shape(v, nullable)) {
                if !shapes.contains(&s) {
                    shapes.push(s);
                }
            }
            Value::Array(shapes)
        }
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, v) in map {
                let s = shape(v, nullable);
                let s = match nullable.iter().find(|(k, _)| k == key) {
                    Some((_, ty)) if v.is_null() || s == *ty => format!("{ty} | null").into(),
                    _ => s,
                };
                out.insert(key.clone(), s);
            }
            Value::Object(out)
        }
    }
}

#[test]
fn rollout_record_and_summary() {
    let dir = std::env::temp_dir().join(format!("sprout-cli-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let records = dir.join("records.jsonl");
    // Temperature 0.7 and top-logprobs make the optional fields appear; a stop string the
    // four tokens do not reach gives `stop` a type without ending a sample.
    let summary = sprout(&[
        "rollout",
        "--prompt",
        "The capital of France is",
        "-n",
        "2",
        "--max-tokens",
        "4",
        "--temperature",
        "0.7",
        "--top-logprobs",
        "2",
        "--stop",
        "###",
        "--json",
        "--out",
        records.to_str().unwrap(),
    ]);
    let lines = std::fs::read_to_string(&records).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(lines.lines().count(), 2, "one record per sample");
    let record = parse(lines.lines().next().unwrap());
    insta::assert_json_snapshot!("rollout_record", shape(&record, &[]));
    insta::assert_json_snapshot!("rollout_summary", shape(&parse(&summary), &[]));
}

#[test]
fn bench_json() {
    let out = sprout(&[
        "bench",
        "--load-format",
        "dummy",
        "--model",
        "tiny-llama",
        "--prompts",
        "2",
        "-n",
        "2",
        "--prompt-tokens",
        "8",
        "--max-tokens",
        "4",
        "--json",
    ]);
    // `tuning` is the tune file's path, or null on an adapter `sprout tune` has not seen;
    // the speculation ratios are null without drafts; the encode time per dispatch where
    // the platform has no per-thread clock.
    let nullable = [
        ("tuning", "string"),
        ("encode_us_per_dispatch", "float"),
        ("acceptance_rate", "float"),
        ("mean_accepted_length", "float"),
    ];
    insta::assert_json_snapshot!("bench", shape(&parse(&out), &nullable));
}

#[test]
fn devices_json() {
    let devices = parse(&sprout(&["devices", "--json"]));
    assert!(
        devices.as_array().is_some_and(|a| !a.is_empty()),
        "wgpu found no adapter; on Linux without a GPU: apt-get install mesa-vulkan-drivers \
         libvulkan1"
    );
    let nullable = [("tune_file", "string")];
    insta::assert_json_snapshot!("devices", shape(&devices, &nullable));
}
