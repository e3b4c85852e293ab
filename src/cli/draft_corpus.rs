//! `--draft-corpus FILE.jsonl`: earlier rollouts to draft from, such as the last epoch's
//! output of `sprout rollout`. Each line is a JSON object with `prompt_token_ids` and
//! `token_ids` (lists of token ids); other fields are ignored, blank lines skipped.
//!
//! A corpus only changes speed, never a sample, so it is read leniently but never
//! blindly: a line that is not such an object stops the run with its line number, and
//! token ids are checked against the vocabulary. What is kept is bounded by
//! `sprout::spec::DraftCorpus`'s caps.

use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

#[derive(Deserialize)]
struct Record {
    prompt_token_ids: Vec<u32>,
    token_ids: Vec<u32>,
}

/// The (prompt, completion) pairs of `path`, each id below `vocab_size`.
pub fn read(path: &Path, vocab_size: usize) -> Result<Vec<(Vec<u32>, Vec<u32>)>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening the draft corpus {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {} line {}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(&line).with_context(|| {
            format!(
                "{} line {}: a draft corpus line needs `prompt_token_ids` and `token_ids` \
                 (lists of token ids), as `sprout rollout` writes",
                path.display(),
                i + 1
            )
        })?;
        let ids = record.prompt_token_ids.iter().chain(&record.token_ids);
        if let Some(bad) = ids.into_iter().find(|&&t| t as usize >= vocab_size) {
            bail!(
                "{} line {}: token id {bad} is outside the model's vocabulary of {vocab_size}",
                path.display(),
                i + 1
            );
        }
        out.push((record.prompt_token_ids, record.token_ids));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rollout_lines_and_names_a_bad_one() {
        let dir = std::env::temp_dir().join(format!("sprout-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.jsonl");
        std::fs::write(
            &path,
            "{\"prompt_token_ids\":[1,2],\"token_ids\":[3],\"text\":\"x\"}\n\n",
        )
        .unwrap();
        assert_eq!(read(&path, 10).unwrap(), vec![(vec![1, 2], vec![3])]);
        let err = read(&path, 3).unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("token id 3"),
            "{err}"
        );
        std::fs::write(&path, "{\"prompt_token_ids\":[1]}\n").unwrap();
        let err = format!("{:#}", read(&path, 10).unwrap_err());
        assert!(err.contains("line 1") && err.contains("token_ids"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
