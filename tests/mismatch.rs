//! `sprout mismatch` and `sprout score --trainer-model` on the command line: a row per
//! format with its speed, exactly 0 for a format against itself, the floor row on the
//! exported default model, TIS weights per record, and a clear refusal of a trainer with
//! another vocabulary; with `--lora`, the adapter on both sides and named in the report,
//! the floor only against a fixture of the same adapter (PEFT's log-probs). (The metrics' arithmetic is checked against hand-worked numbers in
//! the library's own tests: `cargo test --lib mismatch`.)
//!
//! They run the release binary on the GPU: with no adapter the commands fail, and so do
//! these tests.

mod common;

use std::path::{Path, PathBuf};

use common::cli::{failure, stdout_of};
use serde_json::Value;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("sprout-mismatch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn report(args: &[&str]) -> Value {
    serde_json::from_str(stdout_of(args).trim()).expect("one JSON object")
}

fn row<'a>(report: &'a Value, format: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["format"] == format)
        .unwrap_or_else(|| panic!("no {format} row in {report}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

#[test]
fn every_format_reports_a_row_with_its_speed_and_the_plot_is_drawn() {
    let dir = TempDir::new("formats");
    let plot = dir.path("mismatch.svg");
    let model = fixture("tiny-llama");
    let formats = ["f32", "f16", "bf16", "q8_0", "q4_1", "q4_0"];
    let joined = formats.join(",");
    let r = report(&[
        "mismatch",
        "--model",
        &model,
        "--formats",
        &joined,
        "-n",
        "2",
        "--max-tokens",
        "12",
        "--json",
        "--plot",
        &plot,
    ]);
    let rows = r["rows"].as_array().unwrap();
    // tiny-llama is not the floor fixture's model: no floor row, and the reason.
    assert_eq!(rows.len(), formats.len(), "{r}");
    assert!(r["floor_left_out"].as_str().unwrap().contains("--floor"));
    assert_eq!(r["workload"]["prompts"], 4);
    for (row, format) in rows.iter().zip(formats) {
        assert_eq!(row["format"], format);
        let speed = &row["speed"];
        assert!(f(&speed["tokens_per_s"]) > 0.0, "{row}");
        assert!(speed["generated_tokens"].as_u64().unwrap() > 0);
        assert_eq!(row["tokens"], speed["generated_tokens"], "{format}");
        assert_eq!(row["sequences"], 8);
        assert!(f(&row["ess"]) > 0.0 && f(&row["ess"]) <= 1.0);
        assert!(row["health"]["healthy"].is_boolean());
        assert!(!row["by_position"].as_array().unwrap().is_empty());
    }
    assert_eq!(f(&row(&r, "f32")["speed"]["speedup_vs_f32"]), 1.0);
    // 4-bit blocks move every log-prob; f16 moves them far less.
    let (q4, f16) = (row(&r, "q4_0"), row(&r, "f16"));
    assert!(f(&q4["abs_r_max"]) > f(&f16["abs_r_max"]), "{q4}\n{f16}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    for format in formats {
        assert!(
            svg.contains(&format!(">\n{format}\n<")),
            "no {format} in the plot"
        );
    }
}

#[test]
fn a_format_against_itself_gives_exactly_zero() {
    let model = fixture("tiny-llama");
    let args = [
        "mismatch",
        "--model",
        &model,
        "--formats",
        "f32",
        "-n",
        "3",
        "--max-tokens",
        "16",
        "--json",
    ];
    let r = report(&args);
    let row = row(&r, "f32");
    for name in [
        "kl",
        "k3_kl",
        "chi2_token",
        "abs_r_mean",
        "abs_r_max",
        "max_abs_dp",
        "tis_clipped_fraction",
        "outside_fraction",
        "chi2_seq",
        "seq_log_ratio_max",
    ] {
        assert_eq!(f(&row[name]), 0.0, "{name}: {row}");
    }
    for name in ["ess", "ppl_ratio", "tis_mean"] {
        assert_eq!(f(&row[name]), 1.0, "{name}: {row}");
    }
    assert_eq!(row["health"]["healthy"], true);
    // The Markdown table says the same.
    let table = stdout_of(&args[..args.len() - 1]);
    let line = table.lines().find(|l| l.starts_with("| f32 |")).unwrap();
    assert!(line.contains("| 0 | 0 | 0 |"), "{line}");
}

#[test]
fn the_floor_row_sets_sprout_f32_against_transformers() {
    common::gpus();
    let dir = TempDir::new("floor");
    let exported = dir.path("smollm2-f32");
    let default_model = common::smollm2_path().display().to_string();
    stdout_of(&["export", "--model", &default_model, "--out", &exported]);
    let r = report(&[
        "mismatch",
        "--model",
        &exported,
        "--formats",
        "f32",
        "-n",
        "1",
        "--max-tokens",
        "4",
        "--json",
    ]);
    assert!(r["floor_left_out"].is_null(), "{r}");
    let floor = row(&r, "floor");
    assert!(floor["speed"].is_null());
    assert!(
        floor["trainer"]
            .as_str()
            .unwrap()
            .starts_with("transformers"),
        "{floor}"
    );
    // The fixture's 4 completions, every token scored.
    assert_eq!(floor["sequences"], 4);
    assert_eq!(floor["tokens"], 174);
    // Kernel rounding only: small, but not zero (two implementations never agree bit
    // for bit), and far inside the health thresholds.
    let kl = f(&floor["kl"]);
    assert!(kl.abs() < 1e-3, "{floor}");
    assert!(
        f(&floor["abs_r_max"]) > 0.0 && f(&floor["abs_r_max"]) < 0.05,
        "{floor}"
    );
    assert_eq!(floor["health"]["healthy"], true);
}

#[test]
fn models_with_different_vocabularies_are_refused_naming_both() {
    let (llama, qwen) = (fixture("tiny-llama"), fixture("tiny-qwen2"));
    let e = failure(&[
        "mismatch",
        "--model",
        &llama,
        "--trainer-model",
        &qwen,
        "--formats",
        "q8_0",
    ]);
    assert!(
        e.contains("different vocabularies") && e.contains(&llama) && e.contains(&qwen),
        "{e}"
    );
    let dir = TempDir::new("vocab");
    let records = dir.path("records.jsonl");
    std::fs::write(
        &records,
        r#"{"prompt_token_ids": [1, 2], "token_ids": [3], "logprobs": [-1.0]}"#,
    )
    .unwrap();
    let out = dir.path("scored.jsonl");
    let e = failure(&[
        "score",
        "--model",
        &llama,
        "--trainer-model",
        &qwen,
        "--in",
        &records,
        "--out",
        &out,
    ]);
    assert!(
        e.contains("different vocabularies") && e.contains(&llama) && e.contains(&qwen),
        "{e}"
    );
}

/// Rolls out `--quantize quantize` of tiny-llama, scores the records with the f32 trainer
/// (cap 1.5), and returns each record's (logprobs, trainer_logprobs, tis_weight).
fn trainer_scores(dir: &TempDir, quantize: &str) -> Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let model = fixture("tiny-llama");
    let (records, scored) = (dir.path("records.jsonl"), dir.path("scored.jsonl"));
    stdout_of(&[
        "rollout",
        "--model",
        &model,
        "--quantize",
        quantize,
        "--prompt",
        "The grey cat",
        "-n",
        "3",
        "--max-tokens",
        "10",
        "--out",
        &records,
    ]);
    stdout_of(&[
        "score",
        "--model",
        &model,
        "--trainer-model",
        &model,
        "--tis-cap",
        "1.5",
        "--in",
        &records,
        "--out",
        &scored,
    ]);
    let list = |v: &Value| -> Vec<f64> { v.as_array().unwrap().iter().map(f).collect() };
    std::fs::read_to_string(&scored)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            assert!(v.get("scored_logprobs").is_none());
            let n = v["token_ids"].as_array().unwrap().len();
            let out = (
                list(&v["logprobs"]),
                list(&v["trainer_logprobs"]),
                list(&v["tis_weight"]),
            );
            assert_eq!((out.1.len(), out.2.len()), (n, n));
            out
        })
        .collect()
}

#[test]
fn score_adds_trainer_logprobs_and_tis_weights() {
    let dir = TempDir::new("score");
    let quantized = trainer_scores(&dir, "q4_0");
    assert_eq!(quantized.len(), 3);
    let mut moved = 0;
    for (rollout, trainer, weights) in &quantized {
        for ((r, t), w) in rollout.iter().zip(trainer).zip(weights) {
            // min(p_train / p_rollout, C), from the f32 log-probs as written.
            let want = ((*t as f32 as f64) - (*r as f32 as f64)).exp().min(1.5);
            assert!((w - want).abs() <= 1e-12 * want.max(1.0), "{w} vs {want}");
            assert!(*w <= 1.5);
            moved += usize::from(*w != 1.0);
        }
    }
    assert!(moved > 0, "q4_0 rollouts against f32 moved no weight");
    // The trainer scoring its own rollouts: every weight exactly 1.
    for (rollout, trainer, weights) in trainer_scores(&dir, "none") {
        assert_eq!(rollout, trainer);
        assert!(weights.iter().all(|&w| w == 1.0), "{weights:?}");
    }
}

#[test]
fn bad_arguments_are_refused_with_the_reason() {
    let model = fixture("tiny-llama");
    for (args, want) in [
        (vec!["--formats", "q3_k"], "unknown weight format `q3_k`"),
        (
            vec!["--formats", "f16,q6_k"],
            "--formats q6_k: a rollout format is f32 or",
        ),
        (vec!["--formats", "q8_0,q8_0"], "names q8_0 twice"),
        (vec!["--tis-cap", "1"], "--tis-cap must be a number above 1"),
        (vec!["--plot", "out.pdf"], ".svg or .png"),
        (vec!["-n", "0"], "-n and --max-tokens must be at least 1"),
        (vec!["--temperature", "-1"], "--temperature"),
    ] {
        let mut all = vec!["mismatch", "--model", model.as_str()];
        all.extend(args);
        let e = failure(&all);
        assert!(e.contains(want), "{all:?}: {e}");
    }
    // A model stored in f16 has no f32 rollout copy to offer.
    let qwen = fixture("tiny-qwen2");
    let e = failure(&["mismatch", "--model", &qwen, "--formats", "f32"]);
    assert!(
        e.contains("loads as f16") && e.contains("sprout export"),
        "{e}"
    );
}

/// A floor fixture (scripts/mismatch_floor.py's shape) of PEFT's reference for the tiny
/// model `name` (tests/fixtures/lora/NAME/reference.json): its input ids scored, with
/// `logprobs` (PEFT's `logprobs` with the adapter, or `base_logprobs`), claiming the adapter
/// `lora` (name and sha256) or none.
fn peft_floor(dir: &TempDir, name: &str, logprobs: &str, lora: Option<(&str, &str)>) -> String {
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(&format!("lora/{name}/reference.json"))).unwrap(),
    )
    .unwrap();
    let ids = reference["input_ids"].as_array().unwrap();
    let model_sha256 = sprout::model::open::model_sha256(Path::new(&fixture(name))).unwrap();
    let mut floor = serde_json::json!({
        "transformers": reference["transformers"],
        "torch": reference["torch"],
        "model": name,
        "model_sha256": model_sha256,
        "samples": [{
            "prompt_token_ids": ids[..1],
            "token_ids": ids[1..],
            "logprobs": reference[logprobs],
        }],
    });
    if let Some((lora, sha256)) = lora {
        floor["lora"] =
            serde_json::json!({"name": lora, "sha256": sha256, "peft": reference["peft"]});
    }
    let path = dir.path(&format!("floor-{logprobs}-{}.json", lora.is_some()));
    std::fs::write(&path, floor.to_string()).unwrap();
    path
}

#[test]
fn with_lora_both_sides_run_the_adapter_and_the_report_names_it() {
    use sprout::model::source::WeightSource;
    let dir = TempDir::new("lora");
    let name = "tiny-llama";
    let (model, lora) = (fixture(name), fixture(&format!("lora/{name}")));
    let source = sprout::model::safetensors_dir::SafetensorsDir::open(&model).unwrap();
    let adapter =
        sprout::model::lora::LoraAdapter::read_dir(Path::new(&lora), source.config(), 64).unwrap();
    let sha = adapter.digest.as_str();
    let with_adapter = peft_floor(&dir, name, "logprobs", Some((name, sha)));
    let args = [
        "mismatch",
        "--model",
        &model,
        "--lora",
        &lora,
        "--formats",
        "f32,q8_0",
        "-n",
        "2",
        "--max-tokens",
        "12",
        "--floor",
        &with_adapter,
    ];
    let r = report(&[&args[..], &["--json"]].concat());
    assert_eq!(r["lora"]["name"], name, "{r}");
    assert_eq!(r["lora"]["sha256"], sha, "{r}");
    for format in ["f32", "q8_0"] {
        let row = row(&r, format);
        assert!(f(&row["speed"]["tokens_per_s"]) > 0.0, "{row}");
        assert!(row["tokens"].as_u64().unwrap() > 0, "{row}");
        for side in ["rollout", "trainer"] {
            let label = row[side].as_str().unwrap();
            assert!(
                label.ends_with("+ LoRA tiny-llama"),
                "{format} {side}: {label}"
            );
        }
    }
    // The f32 rollout is the trainer itself, adapter and all: exactly 0.
    let f32_row = row(&r, "f32");
    for field in ["kl", "abs_r_max", "max_abs_dp"] {
        assert_eq!(f(&f32_row[field]), 0.0, "{field}: {f32_row}");
    }
    // q8_0 + adapter against f32 + adapter: a copy apart from the trainer, so not 0.
    assert!(f(&row(&r, "q8_0")["abs_r_max"]) > 0.0, "{r}");
    // The trainer with the adapter scores PEFT's tokens within 1e-3 of PEFT's log-probs.
    assert!(r["floor_left_out"].is_null(), "{r}");
    let floor = row(&r, "floor");
    assert!(f(&floor["abs_r_max"]) < 1e-3, "{floor}");
    assert!(
        floor["trainer"]
            .as_str()
            .unwrap()
            .ends_with("LoRA tiny-llama"),
        "{floor}"
    );
    // The Markdown says so too.
    let table = stdout_of(&args);
    assert!(
        table.contains(&format!(
            "ran with the LoRA adapter tiny-llama (sha256 {sha})"
        )),
        "{table}"
    );

    // Without --lora the trainer is the base: on the same tokens it is far from PEFT's
    // adapter log-probs (a fixture claiming no adapter, so that the floor runs).
    let base_floor = peft_floor(&dir, name, "logprobs", None);
    let few = ["--formats", "f32", "-n", "1", "--max-tokens", "2", "--json"];
    let r = report(
        &[
            &["mismatch", "--model", &model, "--floor", &base_floor],
            &few[..],
        ]
        .concat(),
    );
    assert!(r["lora"].is_null(), "{r}");
    assert!(f(&row(&r, "floor")["abs_r_max"]) > 0.1, "{r}");
    // A floor fixture of another adapter state than the trainer's is left out, named.
    let r = report(
        &[
            &["mismatch", "--model", &model, "--floor", &with_adapter],
            &few[..],
        ]
        .concat(),
    );
    let why = r["floor_left_out"].as_str().unwrap();
    assert!(
        why.contains("runs without one") && why.contains("tiny-llama"),
        "{why}"
    );
    let r = report(
        &[
            &[
                "mismatch",
                "--model",
                &model,
                "--lora",
                &lora,
                "--floor",
                &base_floor,
            ],
            &few[..],
        ]
        .concat(),
    );
    let why = r["floor_left_out"].as_str().unwrap();
    assert!(
        why.contains("without a LoRA adapter") && why.contains(&sha[..12]),
        "{why}"
    );
}

#[test]
fn an_adapter_that_does_not_fit_a_model_is_refused_naming_both() {
    let (llama, smollm3) = (fixture("tiny-llama"), fixture("tiny-smollm3"));
    let lora = fixture("lora/tiny-llama");
    // The trainer is another model, whose shapes the adapter does not fit.
    let e = failure(&[
        "mismatch",
        "--model",
        &llama,
        "--trainer-model",
        &smollm3,
        "--lora",
        &lora,
        "--formats",
        "q8_0",
    ]);
    assert!(e.contains(&smollm3) && e.contains(&lora), "{e}");
    // A rank above --max-lora-rank.
    let e = failure(&[
        "mismatch",
        "--model",
        &llama,
        "--lora",
        &lora,
        "--max-lora-rank",
        "4",
        "--formats",
        "q8_0",
    ]);
    assert!(
        e.contains(&llama) && e.contains("rank 8, above the largest LoRA rank allowed, 4"),
        "{e}"
    );
}
