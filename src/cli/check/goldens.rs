//! The goldens: what the check suite gave on the default model when it was last reviewed,
//! and how they are read.
//!
//! They live in an `insta` snapshot (`tests/snapshots/check_goldens__goldens.snap`) that
//! `tests/check_goldens.rs` writes from `sprout check --print-goldens`, so an intended
//! change is reviewed with `cargo insta review`; the binary embeds that file, so `sprout
//! check` needs no cargo to compare a user's run against it. The snapshot's body (after
//! insta's `---` header) is the JSON of [`Goldens`], exactly as `--print-goldens` printed
//! it; log-probs are f32 written shortest-round-trip, so reading them back is exact.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The committed goldens, as built into the binary.
pub const BUILT_IN: &str = include_str!("../../../tests/snapshots/check_goldens__goldens.snap");

/// One sample's tokens and the log-probability of each under the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleResult {
    pub prompt: u32,
    pub sample: u32,
    pub token_ids: Vec<u32>,
    /// Empty where the case has no log-probs (the prompts' token ids).
    pub logprobs: Vec<f32>,
}

/// One case of the suite (`greedy`, `sampled`, ...): every sample it produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub case: String,
    pub samples: Vec<SampleResult>,
}

/// The suite's results on one adapter, with the model they came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goldens {
    /// The model file's name.
    pub model: String,
    /// Its SHA-256: goldens compare only against runs of the very same file.
    pub model_sha256: String,
    pub cases: Vec<CaseResult>,
}

/// Reads goldens from an insta snapshot's text (a header between two `---` lines, then the
/// body), or from bare JSON.
pub fn parse(text: &str) -> Result<Goldens> {
    let body = if text.starts_with("---") {
        // The header is `---`, `key: value` lines, `---`; the body follows.
        let mut parts = text.splitn(3, "\n---\n");
        let (_, body) = (parts.next(), parts.next());
        match body {
            Some(body) => body,
            None => bail!("the snapshot has no `---` line closing its header"),
        }
    } else {
        text
    };
    serde_json::from_str(body).context("reading the goldens' JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_goldens_parse_and_hold_every_case() {
        let goldens = parse(BUILT_IN).unwrap();
        let cases: Vec<&str> = goldens.cases.iter().map(|c| c.case.as_str()).collect();
        assert_eq!(
            cases,
            ["prompts", "greedy", "sampled", "truncated", "score"]
        );
        assert!(goldens.cases.iter().all(|c| !c.samples.is_empty()));
    }

    #[test]
    fn a_snapshot_header_is_skipped_and_bare_json_is_read() {
        let json = r#"{"model": "m", "model_sha256": "ab", "cases": []}"#;
        let snap = format!("---\nsource: tests/x.rs\nexpression: out\n---\n{json}\n");
        assert_eq!(parse(&snap).unwrap(), parse(json).unwrap());
        assert!(parse("---\nsource: x\n").is_err());
    }
}
