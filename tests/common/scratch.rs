//! Scratch directories for the tests: one per test process and name, under the system's
//! temporary directory, empty when made and removed when dropped.

use std::path::{Path, PathBuf};

/// A directory of this test process's own, removed (with what it holds) when dropped.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `sprout-{crate_name}-{name}-{pid}`, made empty.
    pub fn new(crate_name: &str, name: &str) -> ScratchDir {
        let dir =
            std::env::temp_dir().join(format!("sprout-{crate_name}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
