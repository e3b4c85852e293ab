//! Where sprout keeps what it fetches (models) and measures (tune files), native only.

use std::path::PathBuf;

use crate::error::SproutError;

/// sprout's cache directory: `$SPROUT_CACHE_DIR`, else `$XDG_CACHE_HOME/sprout`, else
/// `~/.cache/sprout`.
pub fn dir() -> Result<PathBuf, SproutError> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = env("SPROUT_CACHE_DIR") {
        return Ok(dir);
    }
    if let Some(dir) = env("XDG_CACHE_HOME") {
        return Ok(dir.join("sprout"));
    }
    env("HOME")
        .map(|h| h.join(".cache").join("sprout"))
        .ok_or_else(|| {
            SproutError::Model("cannot find a cache directory: set SPROUT_CACHE_DIR or HOME".into())
        })
}
