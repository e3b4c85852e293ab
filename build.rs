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
    // `--no-optional-locks`: a plain `git status` refreshes `.git/index`, which this script
    // watches, so every build would rerun it and recompile the crate.
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=no",
            ])
            .is_some_and(|s| !s.is_empty());
            if dirty { format!("{hash}-dirty") } else { hash }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=SPROUT_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // What the binary is built from: an edit there makes the tree dirty without touching
    // the git index, and cargo rebuilds the crate for it anyway.
    for path in ["src", "shaders", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
    // Only files that exist: cargo treats a watched file that is missing as changed, and
    // would rerun this script (and recompile the crate) on every build.
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    for name in ["HEAD", "index", "refs/heads", "packed-refs"] {
        let path = std::path::Path::new(&git_dir).join(name);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
