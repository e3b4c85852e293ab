//! Every family and weight format sprout runs, through every command, on every backend the
//! machine has (Vulkan and GL here): the tiny random Qwen3, Gemma 3, SmolLM3 and Llama 3.1
//! directories, and the K-quant GGUFs (Qwen3 and Llama 3.1 in Q4_K_M's Q4_K/Q6_K mix, Qwen2
//! with Q5_0 rows). Each
//! test names a property, not only an exit code:
//! - rollout, then score: every sample's teacher-forced log-probs are its rollout log-probs,
//!   bit for bit; with `--speculative suffix` the samples are the same bits;
//! - a chat prompt through `serve` renders with the file's own chat template as
//!   transformers renders it (the fixture's text), to the same prompt tokens;
//! - tune: the tuned choices change speed, never the samples;
//! - export to f32: the export's greedy samples are the source's (a K-quant dequantizes
//!   exactly); `/update_weights` with that export keeps the samples;
//! - `--quantize q8_0` on the float directories runs and is recorded; bench, check and
//!   mismatch run to their end on each model.
//!
//! Every test runs on every backend found (`sprout devices`).
//!
//! The commands run the release binary on the GPU: with no adapter they fail, and so do
//! these tests. How close each model is to transformers is tests/models.rs's.

#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use http::http;
use server::Server;

/// The models of the matrix: (name, path under tests/fixtures, a float directory).
const FAMILIES: [(&str, &str, bool); 7] = [
    ("qwen3", "tiny-qwen3", true),
    ("gemma3", "tiny-gemma3", true),
    ("smollm3", "tiny-smollm3", true),
    ("llama3", "tiny-llama3", true),
    ("qwen3 q4_k_m", "tiny-qwen3-q4_k_m.gguf", false),
    ("llama3 q4_k_m", "tiny-llama3-q4_k_m.gguf", false),
    ("qwen2 q5_0", "tiny-qwen2-q5_0.gguf", false),
];

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// The backends wgpu finds adapters for here (each command is run once on each).
fn backends() -> Vec<&'static str> {
    let out = sprout(&["devices", "--json"], None);
    assert!(out.status.success(), "sprout devices: {}", stderr(&out));
    let devices: Value = serde_json::from_slice(&out.stdout).expect("devices --json");
    let mut found: Vec<&'static str> = ["vulkan", "gl", "metal", "dx12"]
        .into_iter()
        .filter(|b| {
            devices
                .to_string()
                .to_lowercase()
                .contains(&format!("\"{b}\""))
        })
        .collect();
    found.dedup();
    assert!(!found.is_empty(), "no adapter: {devices}");
    found
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sprout-families-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs sprout (with `cache` as its cache directory when given).
fn sprout(args: &[&str], cache: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
    command.args(args);
    if let Some(cache) = cache {
        command.env("SPROUT_CACHE_DIR", cache);
    }
    command.output().expect("running sprout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs sprout, which must succeed; its stdout.
fn sprout_ok(what: &str, args: &[&str], cache: Option<&Path>) -> String {
    let out = sprout(args, cache);
    assert!(
        out.status.success(),
        "{what}: sprout {args:?} failed: {}",
        stderr(&out)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn records(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Records without what says where and when they were made.
fn samples(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            json!([
                r["prompt_index"],
                r["sample_index"],
                r["token_ids"],
                r["logprobs"]
            ])
        })
        .collect()
}

/// A rollout of a text prompt and a chat prompt, 3 samples each, on `model`; its records.
fn rollout(what: &str, model: &Path, backend: &str, dir: &Path, extra: &[&str]) -> Vec<Value> {
    let prompts = dir.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"The old lighthouse keeper\"}\n\
         {\"messages\": [{\"role\": \"user\", \"content\": \"Name a colour.\"}]}\n",
    )
    .unwrap();
    let mut args = vec![
        "rollout",
        "--backend",
        backend,
        "--model",
        model.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "-n",
        "3",
        "--max-tokens",
        "10",
        "--seed",
        "7",
    ];
    args.extend(extra);
    let all = records(&sprout_ok(what, &args, None));
    assert_eq!(all.len(), 6, "{what}: {all:?}");
    all
}

#[test]
fn rollouts_score_to_their_own_logprobs_and_speculation_changes_nothing() {
    for backend in backends() {
        for (name, path, _) in FAMILIES {
            let what = format!("{name} on {backend}");
            let (model, dir) = (fixture(path), scratch("score"));
            let plain = rollout(&what, &model, backend, &dir, &[]);
            assert!(
                plain
                    .iter()
                    .all(|r| !r["token_ids"].as_array().unwrap().is_empty()),
                "{what}: an empty sample"
            );
            let input = dir.join("rollout.jsonl");
            let lines: Vec<String> = plain.iter().map(Value::to_string).collect();
            std::fs::write(&input, lines.join("\n") + "\n").unwrap();
            let output = dir.join("scored.jsonl");
            sprout_ok(
                &what,
                &[
                    "score",
                    "--backend",
                    backend,
                    "--model",
                    model.to_str().unwrap(),
                    "--in",
                    input.to_str().unwrap(),
                    "--out",
                    output.to_str().unwrap(),
                ],
                None,
            );
            let scored = records(&std::fs::read_to_string(&output).unwrap());
            assert_eq!(scored.len(), plain.len(), "{what}");
            for r in &scored {
                assert_eq!(r["scored_logprobs"], r["logprobs"], "{what}: {r}");
            }
            let speculative = rollout(&what, &model, backend, &dir, &["--speculative", "suffix"]);
            assert_eq!(
                samples(&speculative),
                samples(&plain),
                "{what}: speculative"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn tuned_kernels_change_no_sample() {
    for backend in backends() {
        for (name, path, _) in FAMILIES {
            let what = format!("{name} on {backend}");
            let (model, dir) = (fixture(path), scratch("tune"));
            let untuned = rollout(&what, &model, backend, &dir, &[]);
            let cache = dir.join("cache");
            let m = model.to_str().unwrap();
            sprout_ok(
                &what,
                &[
                    "tune",
                    "--backend",
                    backend,
                    "--model",
                    m,
                    "--max-rows",
                    "8",
                ],
                Some(&cache),
            );
            let tuned = Command::new(env!("CARGO_BIN_EXE_sprout"))
                .env("SPROUT_CACHE_DIR", &cache)
                .args(["rollout", "--backend", backend, "--model", m, "--prompt"])
                .args(["The old lighthouse keeper", "-n", "3", "--max-tokens", "10"])
                .args(["--seed", "7"])
                .output()
                .unwrap();
            assert!(tuned.status.success(), "{what}: {}", stderr(&tuned));
            let tuned = records(&String::from_utf8(tuned.stdout).unwrap());
            let untuned_text: Vec<Value> = samples(&untuned).into_iter().take(3).collect();
            assert_eq!(samples(&tuned), untuned_text, "{what}: tuned samples");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// `sprout tune --budget-s` explores beyond the usual candidates (every decode slot within its
/// budget, even on a loaded machine), keeps only variants with
/// the default's bits (on lavapipe every variant has them, so none is dropped), and with no
/// time left leaves every slot to its default and still writes its file.
#[test]
fn a_budgeted_tune_explores_the_space_and_drops_nothing_here() {
    let model = fixture("tiny-qwen3-q4_k_m.gguf");
    let m = model.to_str().unwrap();
    for backend in backends() {
        let what = format!("tune --budget-s on {backend}");
        let dir = scratch("sweep");
        let tune = |budget: &str| -> Value {
            let args = [
                "tune",
                "--backend",
                backend,
                "--model",
                m,
                "--max-rows",
                "8",
            ];
            let out = sprout_ok(
                &what,
                &[&args[..], &["--budget-s", budget, "--json"]].concat(),
                Some(&dir),
            );
            serde_json::from_str(&out).expect("tune --json")
        };
        let out = tune("30");
        let sweep = &out["sweep"];
        let matmul = out["matmul"].as_array().unwrap();
        let slots = matmul.len() + out["attention"].as_array().unwrap().len();
        // Four row counts (1, 2, 4, 8), each site and attention at each.
        assert_eq!(matmul.len() % 4, 0, "{what}: {out}");
        assert!(matmul.len() >= 4 * 4, "{what}: {out}");
        // The sweep visits the decode row count first: 30 s reaches all of it even on a
        // loaded machine (a slot past the budget keeps its default, and says so).
        let untuned = sweep["untuned"].as_array().unwrap();
        assert!(
            untuned
                .iter()
                .all(|s| !s.as_str().unwrap().ends_with(" m=1")),
            "{what}: {sweep}"
        );
        assert_eq!(sweep["rejected"], json!([]), "{what}: {sweep}");
        let timed = sweep["variants_timed"].as_u64().unwrap() as usize;
        assert!(
            timed > 3 * slots,
            "{what}: {timed} variants for {slots} slots"
        );
        let file = out["path"].as_str().unwrap();
        assert!(Path::new(file).is_file(), "{what}: no {file}");

        let spent = tune("0.000001");
        let untuned = spent["sweep"]["untuned"].as_array().unwrap();
        assert_eq!(untuned.len(), slots, "{what}: {spent}");
        assert_eq!(spent["matmul"], json!([]), "{what}: {spent}");
        assert_eq!(spent["sweep"]["variants_timed"], 0, "{what}: {spent}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Greedy samples of the text prompt: token ids and log-probs.
fn greedy(what: &str, model: &Path, backend: &str) -> (Value, Vec<f64>) {
    let out = sprout_ok(
        what,
        &[
            "rollout",
            "--backend",
            backend,
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            "The old lighthouse keeper",
            "--temperature",
            "0",
            "--max-tokens",
            "12",
            "--ignore-eos",
        ],
        None,
    );
    let r = &records(&out)[0];
    let lp = r["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    (r["token_ids"].clone(), lp)
}

fn assert_same_greedy(what: &str, a: &(Value, Vec<f64>), b: &(Value, Vec<f64>)) {
    assert_eq!(a.0, b.0, "{what}: greedy tokens");
    let diff =
        a.1.iter()
            .zip(&b.1)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
    assert!(diff <= 1e-4, "{what}: greedy log-probs differ by {diff}");
}

#[test]
fn an_f32_export_samples_as_the_source_and_updates_the_server_to_the_same_samples() {
    for backend in backends() {
        for (name, path, _) in FAMILIES {
            let what = format!("{name} on {backend}");
            let (model, dir) = (fixture(path), scratch("export"));
            let export = dir.join("export");
            sprout_ok(
                &what,
                &[
                    "export",
                    "--backend",
                    backend,
                    "--model",
                    model.to_str().unwrap(),
                    "--out",
                    export.to_str().unwrap(),
                ],
                None,
            );
            let source = greedy(&what, &model, backend);
            assert_same_greedy(
                &format!("{what}, export"),
                &source,
                &greedy(&what, &export, backend),
            );

            let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
            command.args([
                "serve",
                "--backend",
                backend,
                "--model",
                model.to_str().unwrap(),
            ]);
            command.args(["--port", "0"]);
            let server = Server::spawn(command);
            let probe = json!({"prompt": "The old lighthouse keeper", "max_tokens": 12,
                           "temperature": 0, "ignore_eos": true, "return_token_ids": true});
            let post = |path: &str, body: &Value| {
                let reply = http(server.port, "POST", path, &[], body.to_string().as_bytes());
                assert_eq!(reply.status, 200, "{what}: {path}: {}", reply.body);
                reply.json()
            };
            let before = post("/v1/completions", &probe);
            assert_eq!(
                before["choices"][0]["token_ids"], source.0,
                "{what}: served"
            );
            post(
                "/update_weights",
                &json!({"weight_dir": export.to_str().unwrap()}),
            );
            let after = post("/v1/completions", &probe);
            assert_eq!(
                after["choices"][0]["token_ids"], source.0,
                "{what}: after /update_weights with its export"
            );
            drop(server);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn chats_render_with_each_file_s_own_template() {
    for backend in backends() {
        for (name, path, float) in FAMILIES {
            let what = format!("{name} on {backend}");
            // A directory's template is in chat_template.jinja or tokenizer_config.json.
            let reference = match float {
                true => fixture(path).join("reference.json"),
                false => fixture(&path.replace(".gguf", ".json")),
            };
            let fixture_json: Value =
                serde_json::from_str(&std::fs::read_to_string(reference).unwrap()).unwrap();
            let chat = &fixture_json["chat"];
            let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
            command.args(["serve", "--backend", backend, "--model"]);
            command.arg(fixture(path)).args(["--port", "0"]);
            let server = Server::spawn(command);
            let post = |path: &str, body: &Value| {
                let reply = http(server.port, "POST", path, &[], body.to_string().as_bytes());
                assert_eq!(reply.status, 200, "{what}: {path}: {}", reply.body);
                reply.json()
            };
            let chat_reply = post(
                "/v1/chat/completions",
                &json!({"messages": chat["messages"], "max_tokens": 4, "seed": 3,
                    "return_token_ids": true}),
            );
            let text_reply = post(
                "/v1/completions",
                &json!({"prompt": chat["rendered"], "max_tokens": 4, "seed": 3,
                    "return_token_ids": true}),
            );
            assert_eq!(
                chat_reply["prompt_token_ids"], text_reply["choices"][0]["prompt_token_ids"],
                "{what}: the chat's prompt is not transformers' rendering"
            );
            assert_eq!(
                chat_reply["choices"][0]["token_ids"], text_reply["choices"][0]["token_ids"],
                "{what}"
            );
        }
    }
}

#[test]
fn quantize_bench_check_and_mismatch_run_on_every_family() {
    for backend in backends() {
        for (name, path, float) in FAMILIES {
            let what = format!("{name} on {backend}");
            let model = fixture(path);
            let m = model.to_str().unwrap();
            if float {
                let dir = scratch("quantize");
                let quantized = rollout(&what, &model, backend, &dir, &["--quantize", "q8_0"]);
                let format = quantized[0]["provenance"]["weight_format"]
                    .as_str()
                    .unwrap();
                assert!(format.contains("q8_0"), "{what}: recorded as {format}");
                std::fs::remove_dir_all(&dir).unwrap();
                let out = sprout_ok(
                    &what,
                    &[
                        "mismatch",
                        "--backend",
                        backend,
                        "--model",
                        m,
                        "--formats",
                        "q8_0",
                        "-n",
                        "2",
                        "--max-tokens",
                        "6",
                        "--json",
                    ],
                    None,
                );
                let report: Value = serde_json::from_str(&out).unwrap();
                assert!(report.to_string().contains("q8_0"), "{what}: {report}");
            }
            let out = sprout_ok(
                &what,
                &[
                    "bench",
                    "--backend",
                    backend,
                    "--model",
                    m,
                    "--prompts",
                    "2",
                    "-n",
                    "2",
                    "--prompt-tokens",
                    "16",
                    "--max-tokens",
                    "8",
                    "--modes",
                    "sprout",
                    "--json",
                ],
                None,
            );
            let bench: Value = serde_json::from_str(&out).unwrap();
            assert!(
                bench.to_string().contains("generated_tokens"),
                "{what}: {bench}"
            );
            sprout_ok(&what, &["check", "--backend", backend, "--model", m], None);
        }
    }
}
