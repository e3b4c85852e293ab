//! Long runs that die lose nothing: `sprout rollout --out` and `sprout score --out` write
//! whole groups, so a run killed (SIGKILL) at any point, or cut anywhere mid-write, is
//! continued by `--resume` to a file byte for byte the uninterrupted run's; a write that
//! fails (a file-size limit standing in for a full disk, a closed pipe) is an error naming
//! where, leaves whole lines, and exits non-zero; and a file written by another command
//! line is refused with the difference named.
//!
//! These run the tiny Llama fixture on the GPU: with no adapter they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sprout::rng::SplitMix64;

fn sprout() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sprout"))
}

fn tiny_llama() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny-llama")
        .display()
        .to_string()
}

/// A directory of this test's own, with a prompts file of 12 prompts whose samples end at
/// different steps (so groups are written one after another).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sprout-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prompts: String = (0..12)
            .map(|i| {
                format!(
                    "{{\"prompt\": \"hello world {i}\", \"max_tokens\": {}}}\n",
                    20 + 7 * i
                )
            })
            .collect();
        std::fs::write(dir.join("prompts.jsonl"), prompts).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// The rollout's arguments (writing `out`), with `extra` flags.
fn rollout(s: &Scratch, out: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["rollout", "--model", &tiny_llama(), "--prompts"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.push(s.path("prompts.jsonl"));
    for a in ["-n", "3", "--seed", "5", "--max-num-seqs", "3", "--out"] {
        args.push(a.into());
    }
    args.push(s.path(out));
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn run(args: &[String]) -> Output {
    let out = sprout().args(args).output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Runs `args` and kills it with SIGKILL after `after`; the lines it had written.
fn kill_after(args: &[String], after: Duration, out: &str) -> usize {
    let mut child = sprout().args(args).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(after);
    child.kill().ok(); // SIGKILL (it may have finished already)
    child.wait().unwrap();
    std::fs::read_to_string(out).map_or(0, |t| t.lines().count())
}

/// `--resume`s `args` on `out` and asserts the file ends as `full`.
fn resume_to(args: &[String], out: &str, full: &[u8], what: &str) {
    let mut resumed = args.to_vec();
    resumed.push("--resume".into());
    let result = run(&resumed);
    assert!(result.status.success(), "{what}: resume failed");
    let got = std::fs::read(out).unwrap();
    assert!(
        got == full,
        "{what}: the resumed file differs from the uninterrupted run's"
    );
}

#[test]
fn a_rollout_killed_or_cut_anywhere_resumes_to_the_uninterrupted_file() {
    let s = Scratch::new("resume-rollout");
    let full_args = rollout(&s, "full.jsonl", &[]);
    assert!(run(&full_args).status.success());
    let full = std::fs::read(s.path("full.jsonl")).unwrap();
    assert_eq!(String::from_utf8_lossy(&full).lines().count(), 36);
    let part = s.path("part.jsonl");
    let args = rollout(&s, "part.jsonl", &[]);
    let mut rng = SplitMix64::new(31);
    // SIGKILL at random points of the run.
    for _ in 0..4 {
        std::fs::remove_file(&part).ok();
        let after = Duration::from_millis(150 + rng.below(1200));
        let lines = kill_after(&args, after, &part);
        eprintln!("killed after {after:?} with {lines} lines written");
        resume_to(&args, &part, &full, &format!("killed after {after:?}"));
    }
    // A kill mid-write leaves a prefix of the file cut anywhere: a torn line, an
    // unfinished prompt.
    for _ in 0..6 {
        let cut = rng.below(full.len() as u64) as usize;
        std::fs::write(&part, &full[..cut]).unwrap();
        resume_to(&args, &part, &full, &format!("cut at byte {cut}"));
    }
    // Resuming a finished file does nothing.
    resume_to(&args, &part, &full, "finished");
}

#[test]
fn a_full_disk_or_a_closed_pipe_is_an_error_with_only_whole_lines_left() {
    let s = Scratch::new("resume-full-disk");
    assert!(run(&rollout(&s, "full.jsonl", &[])).status.success());
    let full = std::fs::read(s.path("full.jsonl")).unwrap();
    // A file-size limit of 10 KiB (ulimit -f counts blocks of 512 bytes), its signal
    // ignored so that the write fails as on a full disk.
    let args = rollout(&s, "limited.jsonl", &[]);
    let out = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 20; exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_sprout"))
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let limited = s.path("limited.jsonl");
    assert!(
        stderr.contains(&format!("writing {limited}")) && stderr.contains("whole group"),
        "{stderr}"
    );
    let left = std::fs::read(&limited).unwrap();
    assert!(
        !left.is_empty() && left.len() <= 10240,
        "{} bytes left",
        left.len()
    );
    assert!(
        full.starts_with(&left),
        "what is left is not the run's first groups"
    );
    let lines = String::from_utf8_lossy(&left).lines().count();
    assert_eq!(
        lines % 3,
        0,
        "{lines} lines: not whole prompts of 3 samples"
    );
    eprintln!(
        "the file-size limit left {} bytes, {lines} lines",
        left.len()
    );
    // With room again, --resume finishes it.
    resume_to(&args, &limited, &full, "after the file-size limit");

    // stdout closed before anything is written.
    let mut args = rollout(&s, "unused", &[]);
    args.truncate(args.len() - 2); // no --out: the records go to stdout
    let mut child = sprout()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("writing the records to stdout"), "{stderr}");
}

#[test]
fn a_file_written_by_another_command_line_is_refused_naming_the_difference() {
    let s = Scratch::new("resume-refused");
    assert!(run(&rollout(&s, "full.jsonl", &[])).status.success());
    let full = std::fs::read(s.path("full.jsonl")).unwrap();
    let part = s.path("part.jsonl");
    let refused = |args: Vec<String>, says: &str| {
        std::fs::write(&part, &full[..full.len() / 2]).unwrap();
        let mut args = args;
        args.push("--resume".into());
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert_eq!(
            std::fs::read(&part).unwrap(),
            &full[..full.len() / 2],
            "changed"
        );
    };
    let with = |flag: &str, value: &str| {
        let mut args = rollout(&s, "part.jsonl", &[]);
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1] = value.into();
        args
    };
    refused(with("--seed", "6"), "seed: the file's 5, this run's 6");
    refused(with("-n", "2"), "3 samples, this run asks for 2");
    refused(rollout(&s, "part.jsonl", &["--top-k", "5"]), "top_k");
    let mut other_model = rollout(&s, "part.jsonl", &[]);
    other_model[2] = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny-qwen2")
        .display()
        .to_string();
    refused(other_model, "model_file");
    std::fs::write(&part, "{\"not\": \"a record\"}\n").unwrap();
    let mut args = rollout(&s, "part.jsonl", &[]);
    args.push("--resume".into());
    let out = run(&args);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1 is not a rollout record"));
}

/// `sprout score` of the rollout `input`, writing `out`.
fn score(model: &str, input: &str, out: &str) -> Vec<String> {
    ["score", "--model", model, "--in", input, "--out", out]
        .iter()
        .map(|a| a.to_string())
        .collect()
}

#[test]
fn a_score_killed_or_cut_anywhere_resumes_to_the_uninterrupted_file() {
    let s = Scratch::new("resume-score");
    assert!(run(&rollout(&s, "rollout.jsonl", &[])).status.success());
    let input = s.path("rollout.jsonl");
    let model = tiny_llama();
    assert!(
        run(&score(&model, &input, &s.path("full.jsonl")))
            .status
            .success()
    );
    let full = std::fs::read(s.path("full.jsonl")).unwrap();
    let part = s.path("part.jsonl");
    let args = score(&model, &input, &part);
    let mut rng = SplitMix64::new(7);
    for _ in 0..2 {
        std::fs::remove_file(&part).ok();
        let after = Duration::from_millis(150 + rng.below(1000));
        let lines = kill_after(&args, after, &part);
        eprintln!("score killed after {after:?} with {lines} lines written");
        resume_to(&args, &part, &full, &format!("killed after {after:?}"));
    }
    for _ in 0..4 {
        let cut = rng.below(full.len() as u64) as usize;
        std::fs::write(&part, &full[..cut]).unwrap();
        resume_to(&args, &part, &full, &format!("cut at byte {cut}"));
    }
    // Scores by another model are refused.
    std::fs::write(&part, &full[..full.len() / 2]).unwrap();
    let qwen = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2");
    let mut other = score(qwen.to_str().unwrap(), &input, &part);
    other.push("--resume".into());
    let out = run(&other);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("model_file"),
        "{stderr}"
    );
}
