//! A usable `XDG_RUNTIME_DIR` for the graphics drivers.
//!
//! Mesa's drivers print "XDG_RUNTIME_DIR is invalid or not set in the environment" on
//! every adapter they open when the variable is missing or names no private directory:
//! the common case on servers, in containers and over ssh. sprout does not need the
//! directory, so the warning only hides real messages. On Linux, when the variable is
//! unusable, sprout points it at a private directory of its own
//! (`$TMPDIR/sprout-runtime-<uid>`, mode 0700, made if missing) before any driver loads.
//! A usable value is kept as it is, and one that cannot be made private is left alone
//! (the drivers then keep their warning).

/// Sets `XDG_RUNTIME_DIR` to a private directory when it is unset or unusable.
///
/// Call it first in `main`, before any thread starts (setting an environment variable is
/// only sound while no other thread reads the environment).
pub fn ensure() {
    #[cfg(target_os = "linux")]
    linux::ensure();
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};

    pub fn ensure() {
        let current = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
        if current.is_some_and(|dir| is_private_dir(&dir)) {
            return;
        }
        if let Some(dir) = private_dir() {
            // SAFETY: called at the start of `main`, before any other thread exists.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", dir) };
        }
    }

    /// Whether `dir` is a directory of this user's that no one else may use (what Mesa
    /// checks).
    fn is_private_dir(dir: &Path) -> bool {
        std::fs::symlink_metadata(dir).is_ok_and(|m| {
            m.is_dir() && Some(m.uid()) == uid() && m.permissions().mode() & 0o077 == 0
        })
    }

    /// This user's private directory under the temporary directory, made if missing.
    fn private_dir() -> Option<PathBuf> {
        let dir = std::env::temp_dir().join(format!("sprout-runtime-{}", uid()?));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        is_private_dir(&dir).then_some(dir)
    }

    /// The process's user id: the owner of `/proc/self`.
    fn uid() -> Option<u32> {
        std::fs::metadata("/proc/self").ok().map(|m| m.uid())
    }
}
