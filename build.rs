//! Embeds the git commit sprout was built from (`SPROUT_GIT_COMMIT`, "unknown" outside a
//! git checkout, with "-dirty" when tracked files had changes) for rollout provenance.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{hash}-dirty") } else { hash }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=SPROUT_GIT_COMMIT={commit}");
    for path in [
        ".git/HEAD",
        ".git/index",
        ".git/refs/heads",
        ".git/packed-refs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
