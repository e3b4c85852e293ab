//! The tune file: what `sprout tune` measured on one adapter, under the cache directory
//! (`<cache>/tune/<adapter>-<key>.json`), and the kernel choices it makes.
//!
//! A file belongs to one adapter, driver and sprout version: its name carries a hash of
//! them, and loading checks them again, so a driver or sprout upgrade leaves the old file
//! unused (run `sprout tune` again). Entries are keyed by weight format and shape
//! (`gpu::tuning`), so tuning a second model adds its shapes to the same file.
//!
//! Native only: the web build has no files, and runs the defaults.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Gpu;
use super::adapter::AdapterSummary;
use super::tuning::{AttentionChoice, KernelChoices, MatmulChoice};
use crate::error::SproutError;

/// What identifies an adapter for its tune file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterKey {
    pub backend: String,
    pub name: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
}

impl AdapterKey {
    pub fn of(a: &AdapterSummary) -> AdapterKey {
        AdapterKey {
            backend: a.backend.clone(),
            name: a.name.clone(),
            device_type: a.device_type.clone(),
            driver: a.driver.clone(),
            driver_info: a.driver_info.clone(),
        }
    }
}

/// The file's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneFile {
    pub sprout_version: String,
    pub adapter: AdapterKey,
    /// Seconds since the Unix epoch when it was last written.
    pub written_unix_s: u64,
    /// The models whose shapes were measured.
    pub models: Vec<String>,
    pub matmul: Vec<MatmulChoice>,
    pub attention: Vec<AttentionChoice>,
}

impl TuneFile {
    pub fn new(adapter: &AdapterSummary) -> TuneFile {
        TuneFile {
            sprout_version: env!("CARGO_PKG_VERSION").to_string(),
            adapter: AdapterKey::of(adapter),
            written_unix_s: 0,
            models: Vec::new(),
            matmul: Vec::new(),
            attention: Vec::new(),
        }
    }

    /// Adds `other`'s entries, replacing any of the same key.
    pub fn merge(&mut self, other: TuneFile) {
        for c in other.matmul {
            self.matmul
                .retain(|e| !(e.key == c.key && e.max_rows == c.max_rows));
            self.matmul.push(c);
        }
        for a in other.attention {
            self.attention.retain(|e| {
                !(e.head_dim == a.head_dim && e.group == a.group && e.max_rows == a.max_rows)
            });
            self.attention.push(a);
        }
        for m in other.models {
            if !self.models.contains(&m) {
                self.models.push(m);
            }
        }
        self.written_unix_s = other.written_unix_s;
    }
}

/// Where the tune file of `adapter` lives for this version of sprout.
pub fn path_for(adapter: &AdapterSummary) -> Result<PathBuf, SproutError> {
    let key = AdapterKey::of(adapter);
    let mut hasher = Sha256::new();
    for part in [
        &key.backend,
        &key.name,
        &key.device_type,
        &key.driver,
        &key.driver_info,
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
    let hash = crate::formats::hex(&hasher.finalize()[..8]);
    let slug: String = format!("{}-{}", key.backend, key.name)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
        .to_ascii_lowercase();
    let dir = crate::cache::dir()?.join("tune");
    Ok(dir.join(format!("{slug}-{hash}.json")))
}

/// The tune file at `path`, if it exists and belongs to `adapter` and this sprout.
pub fn read(path: &Path, adapter: &AdapterSummary) -> Result<Option<TuneFile>, SproutError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file: TuneFile = serde_json::from_str(&text).map_err(|e| {
        SproutError::Model(format!(
            "{}: not a sprout tune file ({e}); delete it or run `sprout tune` again",
            path.display()
        ))
    })?;
    let ours =
        file.adapter == AdapterKey::of(adapter) && file.sprout_version == env!("CARGO_PKG_VERSION");
    Ok(ours.then_some(file))
}

/// Writes `file` to `path` (through a temporary file, so a reader never sees half of it).
pub fn write(path: &Path, file: &TuneFile) -> Result<(), SproutError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(file).expect("a tune file serializes");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The kernel choices for `gpu`: its adapter's tune file's over the defaults when there is
/// one, the defaults alone otherwise.
pub fn choices(gpu: &Gpu) -> Result<KernelChoices, SproutError> {
    let path = path_for(&gpu.adapter)?;
    let defaults = gpu.cpu_shaped_defaults();
    Ok(match read(&path, &gpu.adapter)? {
        Some(file) => KernelChoices::tuned(
            defaults,
            &file.matmul,
            &file.attention,
            path.display().to_string(),
        ),
        None => KernelChoices::defaults(defaults),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::WeightFormat;
    use crate::gpu::kernels::matmul::MatmulShape;
    use crate::gpu::tuning::{MatmulKey, MatmulSite};

    fn adapter(driver: &str) -> AdapterSummary {
        AdapterSummary {
            backend: "vulkan".into(),
            name: "NVIDIA H200".into(),
            device_type: "discrete-gpu".into(),
            driver: "NVIDIA".into(),
            driver_info: driver.into(),
            shader_f16: true,
            subgroups: true,
            max_storage_buffer_binding_size: 1 << 30,
            max_buffer_size: 1 << 30,
        }
    }

    fn choice(n: usize, max_rows: usize) -> MatmulChoice {
        MatmulChoice {
            key: MatmulKey {
                site: MatmulSite::Down,
                format: WeightFormat::Q4_1,
                n,
                k: 1536,
            },
            max_rows,
            shape: MatmulShape::Gemm { tm: 4 },
            micros: 3.0,
            default_micros: 4.0,
        }
    }

    #[test]
    fn a_file_is_read_back_only_for_its_own_adapter_and_driver() {
        let dir = std::env::temp_dir().join(format!("sprout-tune-test-{}", std::process::id()));
        let path = dir.join("t.json");
        let mut file = TuneFile::new(&adapter("580.159"));
        file.matmul.push(choice(576, 8));
        write(&path, &file).unwrap();
        assert_eq!(read(&path, &adapter("580.159")).unwrap(), Some(file));
        assert_eq!(read(&path, &adapter("580.160")).unwrap(), None);
        let mut other_gpu = adapter("580.159");
        other_gpu.name = "NVIDIA H100".into();
        assert_eq!(read(&path, &other_gpu).unwrap(), None);
        let mut other_backend = adapter("580.159");
        other_backend.backend = "gl".into();
        assert_eq!(read(&path, &other_backend).unwrap(), None);
        assert_eq!(read(&dir.join("absent.json"), &adapter("x")).unwrap(), None);
        std::fs::write(&path, "{").unwrap();
        assert!(read(&path, &adapter("580.159")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn merging_replaces_entries_of_the_same_key_and_keeps_the_rest() {
        let mut a = TuneFile::new(&adapter("1"));
        a.matmul.extend([choice(576, 8), choice(576, 16)]);
        let mut b = TuneFile::new(&adapter("1"));
        let mut newer = choice(576, 8);
        newer.micros = 1.0;
        b.matmul.extend([newer.clone(), choice(960, 8)]);
        b.models.push("m".into());
        a.merge(b);
        assert_eq!(a.matmul.len(), 3);
        assert!(a.matmul.contains(&newer));
        assert_eq!(a.models, ["m"]);
    }

    #[test]
    fn the_path_names_the_adapter_and_changes_with_the_driver() {
        let (a, b) = (adapter("1").clone(), adapter("2"));
        let (pa, pb) = (path_for(&a).unwrap(), path_for(&b).unwrap());
        assert_ne!(pa, pb);
        let name = pa.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with("vulkan-nvidia-h200-"), "{name}");
    }
}
