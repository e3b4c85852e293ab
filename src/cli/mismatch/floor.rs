//! The floor row: sprout's own f32 forward pass against Hugging Face transformers' f32 on
//! the same tokens, the mismatch a trainer in transformers sees even with no quantization
//! at all (the kernels' own rounding: reduction order, fused operations).
//!
//! The reference log-probs come from a fixture that `scripts/mismatch_floor.py` makes
//! (committed as `tests/fixtures/mismatch_floor.json` and built into the binary; `--floor
//! FILE` reads another): sampled completions of the exported default model with
//! transformers' float32 log-prob of every token. The fixture names its model by
//! `model_sha256` (as records do), and the floor is measured only for that very model: on
//! another the row is left out with the reason.
//!
//! A fixture made with a PEFT LoRA adapter (`mismatch_floor.py --lora DIR`) names it by its
//! sha256 (`LoraAdapter::digest`, as records do) and applies only to a trainer running that
//! adapter; a fixture without one applies only to a trainer without one. Any other pairing
//! leaves the row out with the reason: a floor of the base against a trainer with an
//! adapter (or the other way round) would measure the adapter, not the kernels.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use sprout::trajectory::LoraProvenance;

/// The committed fixture (the exported default model).
const BUILT_IN: &str = include_str!("../../../tests/fixtures/mismatch_floor.json");

/// Transformers' log-probs of sampled completions of one model.
#[derive(Deserialize)]
pub struct Fixture {
    pub transformers: String,
    pub torch: String,
    pub model: String,
    pub model_sha256: String,
    /// The adapter transformers ran with, if any.
    #[serde(default)]
    pub lora: Option<FixtureLora>,
    pub samples: Vec<FixtureSample>,
}

/// The PEFT LoRA adapter a fixture was made with.
#[derive(Deserialize)]
pub struct FixtureLora {
    /// Its directory's name.
    pub name: String,
    /// `LoraAdapter::digest` of its files.
    pub sha256: String,
    /// The PEFT version that applied it.
    pub peft: String,
}

#[derive(Deserialize)]
pub struct FixtureSample {
    pub prompt_token_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<f32>,
}

/// The fixture at `path`, or the built-in one; checked (a log-prob per token, a prompt
/// and a completion per sample, at least one sample).
pub fn read(path: Option<&Path>) -> Result<Fixture> {
    let (text, name) = match path {
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            BUILT_IN.to_string(),
            "the built-in floor fixture".to_string(),
        ),
    };
    let fixture: Fixture =
        serde_json::from_str(&text).with_context(|| format!("parsing {name}"))?;
    if fixture.samples.is_empty() {
        bail!("{name} holds no samples");
    }
    for (i, s) in fixture.samples.iter().enumerate() {
        if s.prompt_token_ids.is_empty() || s.token_ids.is_empty() {
            bail!("{name}: sample {i} has an empty prompt or completion");
        }
        if s.logprobs.len() != s.token_ids.len() {
            bail!(
                "{name}: sample {i} has {} log-probs for {} tokens",
                s.logprobs.len(),
                s.token_ids.len()
            );
        }
        if s.logprobs.iter().any(|x| !x.is_finite() || *x > 0.0) {
            bail!("{name}: sample {i} holds a log-prob that is not a finite number <= 0");
        }
    }
    Ok(fixture)
}

impl Fixture {
    /// Why the floor does not apply to a trainer whose `model_sha256` is `trainer`, running
    /// the adapter `lora` (if any), if it does not.
    pub fn mismatch_with(&self, trainer: &str, lora: Option<&LoraProvenance>) -> Option<String> {
        if self.model_sha256 != trainer {
            return Some(format!(
                "the floor fixture is of {} (model_sha256 {}), the trainer is another model \
                 ({}); make one for it with scripts/mismatch_floor.py --model DIR and pass \
                 --floor FILE",
                self.model,
                short(&self.model_sha256),
                short(trainer)
            ));
        }
        let named = |name: &str, sha256: &str| {
            format!("the LoRA adapter {name} (sha256 {})", short(sha256))
        };
        let made_with = |l: &FixtureLora| named(&l.name, &l.sha256);
        let runs = |l: &LoraProvenance| named(&l.name, &l.sha256);
        match (&self.lora, lora) {
            (None, None) => None,
            (Some(f), Some(t)) if f.sha256 == t.sha256 => None,
            (None, Some(t)) => Some(format!(
                "the floor fixture is of {} without a LoRA adapter, and the trainer runs with \
                 {}; make one with it (scripts/mismatch_floor.py --model DIR --lora DIR) and \
                 pass --floor FILE",
                self.model,
                runs(t)
            )),
            (Some(f), None) => Some(format!(
                "the floor fixture is of {} with {}, and the trainer runs without one (pass \
                 --lora)",
                self.model,
                made_with(f)
            )),
            (Some(f), Some(t)) => Some(format!(
                "the floor fixture is of {} with {}, and the trainer runs with {}",
                self.model,
                made_with(f),
                runs(t)
            )),
        }
    }

    /// What the row's label says the reference was.
    pub fn describe(&self) -> String {
        let base = format!(
            "transformers {} (torch {}) f32",
            self.transformers, self.torch
        );
        match &self.lora {
            Some(l) => format!("{base} + peft {} LoRA {}", l.peft, l.name),
            None => base,
        }
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_fixture_reads_and_names_its_model() {
        let f = read(None).unwrap();
        assert_eq!(f.model_sha256.len(), 64);
        assert!(f.lora.is_none());
        assert!(f.mismatch_with(&f.model_sha256.clone(), None).is_none());
        let why = f.mismatch_with("0123456789abcdef", None).unwrap();
        assert!(
            why.contains("0123456789ab") && why.contains("--floor"),
            "{why}"
        );
    }

    #[test]
    fn the_floor_applies_only_to_a_trainer_with_the_fixture_s_own_adapter() {
        let mut f = read(None).unwrap();
        let sha = f.model_sha256.clone();
        let adapter = |sha256: &str| LoraProvenance {
            name: "mine".into(),
            sha256: sha256.into(),
            version: 1,
        };
        let why = f.mismatch_with(&sha, Some(&adapter("aaaa"))).unwrap();
        assert!(
            why.contains("without a LoRA adapter") && why.contains("mine (sha256 aaaa)"),
            "{why}"
        );
        f.lora = Some(FixtureLora {
            name: "theirs".into(),
            sha256: "bbbb".into(),
            peft: "0.21.2".into(),
        });
        assert!(f.mismatch_with(&sha, Some(&adapter("bbbb"))).is_none());
        let why = f.mismatch_with(&sha, None).unwrap();
        assert!(
            why.contains("theirs (sha256 bbbb)") && why.contains("--lora"),
            "{why}"
        );
        let why = f.mismatch_with(&sha, Some(&adapter("aaaa"))).unwrap();
        assert!(why.contains("bbbb") && why.contains("aaaa"), "{why}");
        assert!(f.describe().ends_with("+ peft 0.21.2 LoRA theirs"));
    }

    #[test]
    fn a_broken_fixture_is_refused_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("sprout-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("floor.json");
        let write = |samples: &str| {
            let text = format!(
                r#"{{"transformers": "5", "torch": "2", "model": "m", "model_sha256": "ab",
                    "samples": {samples}}}"#
            );
            std::fs::write(&path, text).unwrap();
            read(Some(&path)).err().map(|e| format!("{e:#}"))
        };
        let e = write("[]").unwrap();
        assert!(e.contains("no samples"), "{e}");
        let e =
            write(r#"[{"prompt_token_ids": [1], "token_ids": [2, 3], "logprobs": [-1]}]"#).unwrap();
        assert!(e.contains("1 log-probs for 2 tokens"), "{e}");
        let e =
            write(r#"[{"prompt_token_ids": [1], "token_ids": [2], "logprobs": [0.5]}]"#).unwrap();
        assert!(e.contains("finite number <= 0"), "{e}");
        assert!(
            write(r#"[{"prompt_token_ids": [1], "token_ids": [2], "logprobs": [-0.5]}]"#).is_none()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
