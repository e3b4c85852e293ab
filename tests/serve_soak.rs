//! The soak test of `sprout serve` (examples/serve_soak.py) with a 60-second duration on the
//! default model, exported to an f32 Hugging Face directory (the soak's second checkpoint
//! is derived from it) and served as q8_0 (re-scored as q8_0 too): clients with weight
//! updates, in-place loads of a LoRA adapter (the committed PEFT fixture for the export,
//! and a second one derived from it), pauses in each mode, aborts, disconnects, bad
//! requests, sleeps and wakes. The script must exit 0, and its summary must show that each
//! of those happened and that its checks had something to check: samples re-scored
//! bitwise with `sprout score`, KV quiet points, memory samples.
//!
//! Sized so that every action comes round on two shared CPU cores: the trainer runs its
//! fixed cycle (`--cycle`) after 30 s of load alone, and the load goes on 15 s after it,
//! so that however long the actions take, memory is compared before every action and
//! after all of them (a slow machine stretched the cycle over both quarters of an earlier
//! design's windows and left them no settled sample);
//! 8 clients with prompts of at most 40 words, steps of at most 128 tokens (an action
//! waits for the step in flight) and a 64 MiB KV cache. A wait-mode pause or sleep drains
//! every request in flight first, which with the soak's 32 clients and long prompts takes
//! longer than the minute there. q8_0 for speed: the checks are the same whatever the
//! weights' format, since the re-scoring reads the checkpoints the same way. RSS may
//! drift 50% here: on lavapipe the device memory lives in RSS and moves with the
//! allocator's packing of its blocks across a sleep (up to 31% seen in a minute, the
//! reserved blocks moving 40%, with the allocated bytes unchanged); the device memory
//! allocated is held to 5%, and the hour-long run to 5% for both. A leak of a checkpoint
//! per update (540 MB against about 700 MB) still fails.
//!
//! It runs the script with `python3` (standard library only): without python3 the test
//! fails, naming it. The server runs the model on the GPU: with no adapter it cannot
//! start, and this test fails.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

// Only the default model's path and a scratch directory are used of what the tests
// share.
#[allow(dead_code)]
mod common;

use common::scratch::ScratchDir;

fn count(summary: &Value, pointer: &str) -> u64 {
    summary
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("the soak's summary has no count at {pointer}: {summary}"))
}

#[test]
fn a_minute_of_soak_on_the_default_model_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sprout = env!("CARGO_BIN_EXE_sprout");
    let scratch = ScratchDir::new("serve-soak", "run");
    let model = scratch.path().join("model");
    let export = Command::new(sprout)
        .args(["export", "--out", model.to_str().unwrap(), "--model"])
        .arg(common::smollm2_path())
        .output()
        .expect("running sprout export");
    assert!(
        export.status.success(),
        "sprout export failed: {}",
        String::from_utf8_lossy(&export.stderr)
    );
    let summary_path = scratch.path().join("summary.json");
    let workdir = scratch.path().join("work");
    let run = Command::new("python3")
        .arg(root.join("examples/serve_soak.py"))
        .args(["--sprout", sprout, "--model", model.to_str().unwrap()])
        .arg("--lora-a")
        .arg(root.join("tests/fixtures/lora/smollm2-135m-export"))
        .args(["--duration-s", "60", "--cycle", "--action-every-s", "1"])
        .args(["--clients", "8", "--max-tokens", "16"])
        .args(["--max-prompt-words", "40"])
        .args(["--score-samples", "30", "--max-rss-drift", "0.5"])
        .args(["--workdir", workdir.to_str().unwrap()])
        .args(["--json", summary_path.to_str().unwrap()])
        // Last: passed on to sprout serve and sprout score.
        .args(["--extra", "--quantize", "q8_0", "--max-batch-tokens", "128"])
        .args(["--kv-memory", "64MiB"])
        .output()
        .expect("running python3 examples/serve_soak.py (is python3 installed?)");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the soak failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    // Shown with --nocapture: what the minute did.
    println!("{stdout}");
    assert!(stdout.contains("RESULT: PASS"), "{stdout}");
    let text = std::fs::read_to_string(&summary_path).unwrap();
    let report: Value = serde_json::from_str(&text).unwrap();
    let summary = &report["summary"];
    assert_eq!(summary["passed"], Value::Bool(true), "{stdout}");
    assert!(count(summary, "/good_completed") >= 16, "{stdout}");
    assert!(count(summary, "/tokens") > 0, "{stdout}");
    assert!(count(summary, "/updates") >= 3, "{stdout}");
    assert!(count(summary, "/adapter_loads") >= 3, "{stdout}");
    for mode in ["keep", "wait", "abort"] {
        assert!(count(summary, &format!("/pauses/{mode}")) >= 1, "{stdout}");
    }
    for level in ["level1", "level2"] {
        assert!(count(summary, &format!("/sleeps/{level}")) >= 1, "{stdout}");
    }
    assert!(count(summary, "/aborts/abort_calls") >= 1, "{stdout}");
    assert!(count(summary, "/aborts/disconnects") >= 1, "{stdout}");
    assert!(count(summary, "/quiet_points") >= 3, "{stdout}");
    assert!(count(summary, "/rescore/segments") > 0, "{stdout}");
    assert_eq!(
        count(summary, "/rescore/mismatched_segments"),
        0,
        "{stdout}"
    );
    let samples = summary["memory_samples"].as_array().unwrap();
    assert!(samples.len() >= 40, "{} memory samples", samples.len());
}
