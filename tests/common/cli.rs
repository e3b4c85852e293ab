//! The release binary run from a test: its stdout when it must succeed (a failure shows its
//! stderr), or its stderr when it must fail.

use std::process::{Command, Output};

/// Runs `sprout ARGS`.
pub fn sprout(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(args)
        .output()
        .expect("running sprout")
}

/// Runs `sprout ARGS`, which must succeed; its stdout.
pub fn stdout_of(args: &[&str]) -> String {
    let out = sprout(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sprout {args:?} failed: {stderr}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs `sprout ARGS`, which must fail; its stderr.
pub fn failure(args: &[&str]) -> String {
    let out = sprout(args);
    assert!(!out.status.success(), "sprout {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
