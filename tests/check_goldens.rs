//! `sprout check` end to end, through the release binary: the suite on the first adapter
//! gives the committed goldens (an insta snapshot, which the binary embeds: review an
//! intended change with `cargo insta review`); every adapter passes against them and
//! against each other; and a goldens file with one token edited makes the check exit 1
//! naming that token.
//!
//! These run the default model on the GPU: with no adapter `sprout check` fails, and so do
//! they (they never pass without having run).

use std::process::{Command, Output};

use serde_json::Value;
use sprout::formats::WeightFormat;

fn sprout(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(args)
        .output()
        .expect("running sprout");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The JSON report of `sprout check` with `args`, and whether it exited 0.
fn check_report(args: &[&str]) -> (bool, Value) {
    let out = sprout(&[&["check", "--json"], args].concat());
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "sprout check printed no JSON report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

#[test]
fn the_suite_gives_the_goldens() {
    let out = sprout(&["check", "--print-goldens"]);
    assert!(out.status.success(), "sprout check --print-goldens failed");
    let goldens = String::from_utf8(out.stdout).unwrap();
    insta::assert_snapshot!("goldens", goldens);
}

#[test]
fn every_adapter_passes_against_the_goldens_and_the_first_adapter() {
    let (passed, report) = check_report(&[]);
    assert!(passed, "{report:#}");
    assert_eq!(report["passed"], true);
    let adapters: Vec<&str> = report["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(!adapters.is_empty());
    // CI names the backends it installed (SPROUT_REQUIRE_BACKENDS=vulkan,gl): each must
    // have been checked.
    let required = std::env::var("SPROUT_REQUIRE_BACKENDS").unwrap_or_default();
    for backend in required.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let prefix = format!("{backend}/");
        assert!(
            adapters.iter().any(|a| a.starts_with(&prefix)),
            "no {backend} adapter was checked: {adapters:?}"
        );
    }
    let rows = report["rows"].as_array().unwrap();
    let count = |adapter: &str, against: &str| {
        rows.iter()
            .filter(|r| r["adapter"] == adapter && r["against"] == against)
            .count()
    };
    for (i, adapter) in adapters.iter().enumerate() {
        assert_eq!(count(adapter, "goldens"), 5, "{adapter}: one row per case");
        // A matmul row per weight format of the registry, then attention, the per-head
        // norms (head_norm_rope), the post-norm residual add (norm_add) and sampling.
        let kernel_rows = WeightFormat::ALL.len() + 4;
        assert_eq!(count(adapter, "cpu reference"), kernel_rows, "{adapter}");
        for format in WeightFormat::ALL {
            let case = format!("kernel matmul {format}");
            assert!(
                rows.iter()
                    .any(|r| r["adapter"] == *adapter && r["case"] == case.as_str()),
                "{adapter}: no {case} row"
            );
        }
        for kernel in ["head_norm_rope", "norm_add"] {
            let case = format!("kernel {kernel}");
            assert!(
                rows.iter()
                    .any(|r| r["adapter"] == *adapter && r["case"] == case.as_str()),
                "{adapter}: no {case} row"
            );
        }
        let across = if i == 0 { 0 } else { 5 };
        assert_eq!(count(adapter, adapters[0]), across, "{adapter}");
    }
    for row in rows.iter().filter(|r| r["against"] != "cpu reference") {
        let tokens = row["tokens_equal"].as_array().unwrap();
        assert_eq!(tokens[0], tokens[1], "{row}");
        assert!(tokens[1].as_u64().unwrap() > 0, "{row}");
    }
}

#[test]
fn a_corrupted_golden_token_fails_the_check_and_names_it() {
    let snap = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshots/check_goldens__goldens.snap"),
    )
    .unwrap();
    let (header, body) = snap.split_once("\n---\n").unwrap();
    let mut goldens: Value = serde_json::from_str(body).unwrap();
    let greedy = goldens["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["case"] == "greedy")
        .unwrap();
    let token = &mut greedy["samples"][2]["token_ids"][5];
    let original = token.as_u64().unwrap();
    *token = (original + 1).into();
    let text = format!(
        "{header}\n---\n{}\n",
        serde_json::to_string_pretty(&goldens).unwrap()
    );
    let path = std::env::temp_dir().join(format!("sprout-corrupted-{}.snap", std::process::id()));
    std::fs::write(&path, text).unwrap();

    // The first adapter's backend only: the comparison does not depend on the adapter.
    let devices = sprout(&["devices", "--json"]);
    let devices: Value = serde_json::from_slice(&devices.stdout).unwrap();
    let backend = devices[0]["backend"].as_str().expect("an adapter");
    let (passed, report) =
        check_report(&["--backend", backend, "--goldens", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
    assert!(!passed, "the check passed against a corrupted golden");
    let failed: Vec<&Value> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["passed"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "only the edited case fails: {failed:#?}");
    let row = failed[0];
    assert_eq!(
        (&row["against"], &row["case"]),
        (&"goldens".into(), &"greedy".into())
    );
    let d = &row["divergence"];
    assert_eq!(
        (&d["prompt"], &d["sample"], &d["position"]),
        (&2.into(), &0.into(), &5.into())
    );
    assert_eq!(d["expected"], original + 1);
    assert_eq!(d["got"], original);
    let regressions = report["regressions"].as_array().unwrap();
    assert_eq!(regressions.len(), 1);
    let line = regressions[0].as_str().unwrap();
    assert!(
        line.contains(&format!("expected {}, got {original}", original + 1)),
        "{line}"
    );
}
