//! `--resume`: what an earlier run of the same command left in its output file.
//!
//! A run that was killed leaves whole lines, then perhaps a torn one (cut off mid-write),
//! and its groups (a prompt's samples, written in prompt order) are whole but perhaps the
//! last. [`read_rollout`] reads the whole lines as rollout records, in groups, and says
//! where the last whole group ends; the command checks that each group is one this run
//! would write, cuts the file there and writes the rest.
//!
//! Invariant: only whole lines are parsed; a torn last line is counted, never read as a
//! record.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value;
use sprout::trajectory::SampleRecord;

/// The file's whole lines, each with the offset just past it, and the length of a torn
/// last line (0 when the file ends with a newline).
pub fn whole_lines(
    path: &Path,
    mut visit: impl FnMut(usize, &str, u64) -> Result<()>,
) -> Result<u64> {
    let fail = |e: std::io::Error| anyhow!("reading {}: {e}", path.display());
    let mut reader = BufReader::new(File::open(path).map_err(fail)?);
    let (mut offset, mut number, mut line) = (0u64, 0usize, Vec::new());
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).map_err(fail)?;
        if read == 0 {
            return Ok(0);
        }
        if line.last() != Some(&b'\n') {
            return Ok(read as u64);
        }
        number += 1;
        offset += read as u64;
        let text = std::str::from_utf8(&line[..read - 1])
            .map_err(|_| anyhow!("{} line {number} is not UTF-8", path.display()))?;
        visit(number, text, offset)?;
    }
}

/// One prompt's records as an earlier run wrote them.
pub struct WrittenGroup {
    pub prompt_index: u32,
    /// Its records, by sample index from 0.
    pub samples: usize,
    /// The first record (the others are checked to agree with it).
    pub first: SampleRecord,
    /// Where the group's last line ends in the file.
    pub end: u64,
}

/// What an earlier rollout left in its output file.
pub struct WrittenRollout {
    pub groups: Vec<WrittenGroup>,
    pub torn_bytes: u64,
}

/// Reads `path` as `sprout rollout` output: records grouped by prompt, in order.
pub fn read_rollout(path: &Path) -> Result<WrittenRollout> {
    let mut groups: Vec<WrittenGroup> = Vec::new();
    let torn_bytes = whole_lines(path, |number, text, end| {
        let record: SampleRecord = serde_json::from_str(text).map_err(|e| {
            anyhow!(
                "{} line {number} is not a rollout record ({e}): --resume continues only a \
                 file this command wrote",
                path.display()
            )
        })?;
        match groups.last_mut() {
            Some(group) if group.prompt_index == record.prompt_index => {
                if record.sample_index as usize != group.samples {
                    bail!(
                        "{} line {number} is sample {} of prompt {}, where sample {} belongs",
                        path.display(),
                        record.sample_index,
                        record.prompt_index,
                        group.samples
                    );
                }
                let same = record.seed == group.first.seed
                    && record.sampling == group.first.sampling
                    && record.provenance == group.first.provenance
                    && record.prompt_token_ids == group.first.prompt_token_ids;
                if !same {
                    bail!(
                        "{} line {number}: prompt {}'s records disagree on how they were made",
                        path.display(),
                        record.prompt_index
                    );
                }
                group.samples += 1;
                group.end = end;
            }
            last => {
                if let Some(last) = last
                    && record.prompt_index <= last.prompt_index
                {
                    bail!(
                        "{} line {number} is prompt {} after prompt {}: not in the order a run \
                         writes",
                        path.display(),
                        record.prompt_index,
                        last.prompt_index
                    );
                }
                if record.sample_index != 0 {
                    bail!(
                        "{} line {number} starts prompt {} at sample {}",
                        path.display(),
                        record.prompt_index,
                        record.sample_index
                    );
                }
                groups.push(WrittenGroup {
                    prompt_index: record.prompt_index,
                    samples: 1,
                    first: record,
                    end,
                });
            }
        }
        Ok(())
    })?;
    Ok(WrittenRollout { groups, torn_bytes })
}

/// The first field in which two records' parts (their provenance, their sampling) differ,
/// as `field: the file's X, this run's Y`; `None` when they agree.
pub fn first_difference<T: Serialize>(file: &T, run: &T) -> Option<String> {
    let (a, b) = (
        serde_json::to_value(file).ok()?,
        serde_json::to_value(run).ok()?,
    );
    let (Value::Object(a), Value::Object(b)) = (a, b) else {
        return None;
    };
    // Both ways: a field written only when it does something may be in either alone.
    let keys = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
    keys.into_iter().find_map(|key| {
        let (x, y) = (
            a.get(key).unwrap_or(&Value::Null),
            b.get(key).unwrap_or(&Value::Null),
        );
        (x != y).then(|| format!("{key}: the file's {x}, this run's {y}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_in_either_record_alone_is_a_difference() {
        let file = serde_json::json!({"a": 1});
        let run = serde_json::json!({"a": 1, "presence_penalty": 0.5});
        let d = first_difference(&file, &run).unwrap();
        assert_eq!(d, "presence_penalty: the file's null, this run's 0.5");
        assert!(first_difference(&run, &file).is_some());
        assert_eq!(first_difference(&run, &run), None);
    }

    #[test]
    fn whole_lines_end_where_they_end_and_a_torn_tail_is_counted() {
        let path = std::env::temp_dir().join(format!("sprout-lines-{}", std::process::id()));
        std::fs::write(&path, "ab\n\ncd\nef").unwrap();
        let mut seen = Vec::new();
        let torn = whole_lines(&path, |n, text, end| {
            seen.push((n, text.to_string(), end));
            Ok(())
        })
        .unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(
            seen,
            [(1, "ab".into(), 3), (2, "".into(), 4), (3, "cd".into(), 7)]
        );
        assert_eq!(torn, 2);
    }
}
