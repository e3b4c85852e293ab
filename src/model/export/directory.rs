//! Writing an export to disk (native only): the whole Hugging Face directory is written
//! into a hidden temporary directory beside `--out`, `.NAME.sprout-export-PID.partial`,
//! and renamed to `--out` only once every file is complete and synced.
//!
//! Invariants: a directory at `--out` is either what was there before or a complete
//! export, never a partial one: an export that fails removes its temporary directory, and
//! one that is killed leaves it under its `.partial` name. An existing `--out` must be an
//! empty directory unless `overwrite` is set; then it is moved aside (`.old`) and removed
//! only after the new one has taken its name, and never when the model being exported
//! lies inside it.
//!
//! Files: `model.safetensors` and `config.json` are always made from the model. A Hugging
//! Face source's own `tokenizer.json`, `tokenizer_config.json`, `generation_config.json`,
//! `special_tokens_map.json`, `chat_template.jinja`, `vocab.json` and `merges.txt` are
//! copied as they are; what a source lacks (everything, for a GGUF) is made from the
//! model: the tokenizer serialized by the `tokenizers` library, and the JSON files of
//! [`super::json_files`].

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::model::export::json_files::{
    config_json, generation_config_json, tokenizer_config_json,
};
use crate::model::export::tensors::{check_export_format, write_safetensors};
use crate::model::open::OpenedModel;

/// Files of a Hugging Face source that an export copies unchanged when present.
pub const COPIED_FILES: [&str; 7] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
];

/// How to export.
#[derive(Clone, Copy, Debug)]
pub struct ExportOptions {
    /// The float format of every tensor: f32 or bf16.
    pub format: WeightFormat,
    /// Replace a non-empty `--out` directory.
    pub overwrite: bool,
}

/// What an export wrote: the directory and its files with their sizes in bytes.
#[derive(Debug)]
pub struct Exported {
    pub dir: PathBuf,
    pub files: Vec<(String, u64)>,
}

fn io_at(path: &Path, e: std::io::Error) -> SproutError {
    SproutError::Model(format!("{}: {e}", path.display()))
}

/// Writes `model` as a Hugging Face directory at `out`; `progress(done, total)` is called
/// after each tensor of `model.safetensors`.
pub fn export(
    model: &mut OpenedModel,
    out: &Path,
    options: ExportOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Exported, SproutError> {
    check_export_format(options.format)?;
    let source = PathBuf::from(&model.info.path);
    check_target(out, &source, options.overwrite)?;
    let name = out
        .file_name()
        .ok_or_else(|| SproutError::Model(format!("--out {} names no directory", out.display())))?
        .to_string_lossy()
        .to_string();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| io_at(&parent, e))?;
    let stem = format!(".{name}.sprout-export-{}", std::process::id());
    let partial = parent.join(format!("{stem}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| io_at(&partial, e))?;
    }
    std::fs::create_dir(&partial).map_err(|e| io_at(&partial, e))?;
    let source_dir = Some(source).filter(|p| p.is_dir());
    let written =
        write_files(model, &partial, source_dir.as_deref(), options, progress).and_then(|files| {
            swap_into_place(&partial, out, &parent.join(format!("{stem}.old")))?;
            Ok(files)
        });
    match written {
        Ok(files) => Ok(Exported {
            dir: out.to_path_buf(),
            files,
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            Err(e)
        }
    }
}

/// An error unless `out` may take the export: absent, an empty directory, or (with
/// `overwrite`) a directory that does not hold the model `source` being exported.
fn check_target(out: &Path, source: &Path, overwrite: bool) -> Result<(), SproutError> {
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        return Err(SproutError::Model(format!(
            "--out {} exists and is not a directory",
            out.display()
        )));
    }
    let entries = std::fs::read_dir(out).map_err(|e| io_at(out, e))?.count();
    if entries > 0 && !overwrite {
        let noun = if entries == 1 { "entry" } else { "entries" };
        return Err(SproutError::Model(format!(
            "--out {} is not empty ({entries} {noun}); choose a new directory, or pass \
             --overwrite to replace it",
            out.display()
        )));
    }
    let (out_real, source_real) = (out.canonicalize(), source.canonicalize());
    if let (Ok(o), Ok(s)) = (out_real, source_real)
        && s.starts_with(&o)
    {
        return Err(SproutError::Model(format!(
            "--out {} holds the model being exported ({}); export it somewhere else",
            out.display(),
            source.display()
        )));
    }
    Ok(())
}

/// Writes every file of the export into `dir`, each synced to disk; returns their names
/// and sizes.
fn write_files(
    model: &mut OpenedModel,
    dir: &Path,
    source_dir: Option<&Path>,
    options: ExportOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<(String, u64)>, SproutError> {
    let mut files = Vec::new();
    let config = model.source.config().clone();
    // Before any tensor: a config.json that cannot be written fails the export at once.
    let config_file = config_json(&config, options.format)?;
    let path = dir.join("model.safetensors");
    let file = File::create(&path).map_err(|e| io_at(&path, e))?;
    let writer = BufWriter::with_capacity(1 << 20, file);
    let writer = write_safetensors(model.source.as_mut(), options.format, writer, progress)?;
    let file = writer
        .into_inner()
        .map_err(|e| io_at(&path, e.into_error()))?;
    file.sync_all().map_err(|e| io_at(&path, e))?;
    files.push(("model.safetensors".to_string(), file.metadata()?.len()));

    let pretty = |v: serde_json::Value| -> Result<Vec<u8>, SproutError> {
        let mut text = serde_json::to_string_pretty(&sorted_keys(v))
            .map_err(|e| SproutError::Model(format!("cannot write JSON: {e}")))?;
        text.push('\n');
        Ok(text.into_bytes())
    };
    files.push(write_file(dir, "config.json", &pretty(config_file)?)?);
    for name in COPIED_FILES {
        if let Some(from) = source_dir.map(|d| d.join(name)).filter(|p| p.is_file()) {
            let bytes = std::fs::read(&from).map_err(|e| io_at(&from, e))?;
            files.push(write_file(dir, name, &bytes)?);
            continue;
        }
        let made = match name {
            "tokenizer.json" => model.tokenizer.to_json(true)?.into_bytes(),
            "tokenizer_config.json" => pretty(tokenizer_config_json(
                &config,
                &model.tokenizer,
                model.chat_template.as_deref(),
            )?)?,
            "generation_config.json" => pretty(generation_config_json(&config))?,
            _ => continue,
        };
        files.push(write_file(dir, name, &made)?);
    }
    Ok(files)
}

/// Writes `bytes` to `dir/name` and syncs it; returns the name and size.
fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<(String, u64), SproutError> {
    let path = dir.join(name);
    let mut file = File::create(&path).map_err(|e| io_at(&path, e))?;
    file.write_all(bytes).map_err(|e| io_at(&path, e))?;
    file.sync_all().map_err(|e| io_at(&path, e))?;
    Ok((name.to_string(), bytes.len() as u64))
}

/// Renames the complete `partial` directory to `out`. An `out` already there (checked
/// empty, or to be overwritten) is first moved to `old`, put back if the rename fails,
/// and removed once the export holds its name.
fn swap_into_place(partial: &Path, out: &Path, old: &Path) -> Result<(), SproutError> {
    if !out.exists() {
        return std::fs::rename(partial, out).map_err(|e| io_at(out, e));
    }
    std::fs::rename(out, old).map_err(|e| io_at(out, e))?;
    if let Err(e) = std::fs::rename(partial, out) {
        let _ = std::fs::rename(old, out);
        return Err(io_at(out, e));
    }
    std::fs::remove_dir_all(old).map_err(|e| {
        SproutError::Model(format!(
            "{} is complete, but the directory it replaced, moved to {}, could not be \
             removed: {e}",
            out.display(),
            old.display()
        ))
    })
}

/// `v` with every object's keys in sorted order, so an exported file's bytes (and the
/// directory's digest, which records and the mismatch floor name a model by) do not depend
/// on the order its fields were built in (serde_json keeps insertion order in sprout: chat
/// templates need a client's order).
fn sorted_keys(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::TensorData;
    use crate::model::config::ModelConfig;
    use crate::model::open::open;
    use crate::model::rope_scaling::RopeScaling;
    use crate::model::source::WeightSource;

    fn tiny_llama() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
    }

    /// A fresh, empty scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sprout-export-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        names
    }

    fn options(overwrite: bool) -> ExportOptions {
        ExportOptions {
            format: WeightFormat::F32,
            overwrite,
        }
    }

    /// A source that fails when it reaches one tensor, as a disk or a file can mid-export.
    struct FailsAt(Box<dyn WeightSource>, &'static str);

    impl WeightSource for FailsAt {
        fn config(&self) -> &ModelConfig {
            self.0.config()
        }
        fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
            match name == self.1 {
                true => Err(SproutError::Model(format!("{name} could not be read"))),
                false => self.0.read(name),
            }
        }
        fn has(&self, name: &str) -> bool {
            self.0.has(name)
        }
        fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
            self.0.format(name)
        }
        fn unused_tensor(&self, used: &[String]) -> Option<String> {
            self.0.unused_tensor(used)
        }
    }

    #[test]
    fn a_failed_export_leaves_nothing_under_its_name() {
        let parent = scratch("failed");
        let mut model = open(Some(&tiny_llama())).unwrap();
        model.source = Box::new(FailsAt(model.source, "layers.1.down"));
        let out = parent.join("out");
        let e = export(&mut model, &out, options(false), &mut |_, _| {}).unwrap_err();
        assert!(
            e.to_string().contains("layers.1.down could not be read"),
            "{e}"
        );
        assert!(
            names(&parent).is_empty(),
            "left behind: {:?}",
            names(&parent)
        );
        std::fs::remove_dir_all(parent).unwrap();
    }

    /// A source whose config says its RoPE scaling only as a GGUF's divisors would.
    struct Divisors(Box<dyn WeightSource>, ModelConfig);

    impl WeightSource for Divisors {
        fn config(&self) -> &ModelConfig {
            &self.1
        }
        fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
            self.0.read(name)
        }
        fn has(&self, name: &str) -> bool {
            self.0.has(name)
        }
        fn format(&self, name: &str) -> Result<WeightFormat, SproutError> {
            self.0.format(name)
        }
        fn unused_tensor(&self, used: &[String]) -> Option<String> {
            self.0.unused_tensor(used)
        }
    }

    #[test]
    fn rope_divisors_no_llama3_parameters_give_refuse_before_any_tensor() {
        let parent = scratch("divisors");
        let mut model = open(Some(&tiny_llama())).unwrap();
        let mut config = model.source.config().clone();
        let pairs = config.head_dim / 2;
        config.rope_scaling =
            Some(RopeScaling::from_divisors(vec![2.0; pairs], config.head_dim).unwrap());
        model.source = Box::new(Divisors(model.source, config));
        let mut ticks = 0;
        let out = parent.join("out");
        let e = export(&mut model, &out, options(false), &mut |_, _| ticks += 1).unwrap_err();
        assert!(
            e.to_string().contains("rope_freqs.weight") && e.to_string().contains("llama3"),
            "{e}"
        );
        assert_eq!(ticks, 0, "no tensor was written");
        assert!(
            names(&parent).is_empty(),
            "left behind: {:?}",
            names(&parent)
        );
        std::fs::remove_dir_all(parent).unwrap();
    }

    #[test]
    fn a_non_empty_out_is_replaced_only_when_told() {
        let parent = scratch("overwrite");
        let out = parent.join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("keep.txt"), "mine").unwrap();
        let mut model = open(Some(&tiny_llama())).unwrap();
        let e = export(&mut model, &out, options(false), &mut |_, _| {}).unwrap_err();
        assert!(
            e.to_string().contains("is not empty (1 entry)")
                && e.to_string().contains("--overwrite"),
            "{e}"
        );
        assert_eq!(names(&out), ["keep.txt"]);
        let mut ticks = Vec::new();
        let exported = export(&mut model, &out, options(true), &mut |done, total| {
            ticks.push((done, total))
        })
        .unwrap();
        let total = ticks.last().unwrap().1;
        assert_eq!(ticks, (1..=total).map(|d| (d, total)).collect::<Vec<_>>());
        let mut written: Vec<String> = exported.files.into_iter().map(|(n, _)| n).collect();
        written.sort();
        assert_eq!(names(&out), written);
        assert!(names(&out).contains(&"model.safetensors".to_string()));
        assert_eq!(names(&parent), ["out"], "nothing left beside it");
        // An empty directory is taken as it is.
        let empty = parent.join("empty");
        std::fs::create_dir(&empty).unwrap();
        export(&mut model, &empty, options(false), &mut |_, _| {}).unwrap();
        assert!(empty.join("config.json").is_file());
        std::fs::remove_dir_all(parent).unwrap();
    }

    #[test]
    fn out_may_not_hold_the_model_or_be_a_file() {
        let parent = scratch("inside");
        let copy = parent.join("model");
        std::fs::create_dir(&copy).unwrap();
        for entry in std::fs::read_dir(tiny_llama()).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
        }
        let mut model = open(Some(&copy)).unwrap();
        for out in [&copy, &parent] {
            let e = export(&mut model, out, options(true), &mut |_, _| {}).unwrap_err();
            assert!(
                e.to_string().contains("holds the model being exported"),
                "{e}"
            );
        }
        let file = copy.join("config.json");
        let e = export(&mut model, &file, options(true), &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        assert_eq!(names(&parent), ["model"]);
        std::fs::remove_dir_all(parent).unwrap();
    }
}
