//! A `sprout serve` that a test starts: spawned on a free port (`--port 0`), the port read
//! from the line it prints on stderr, and killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `sprout serve`; killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    /// Spawns `command`, a `sprout serve ... --port 0`, and waits until it listens. Reads
    /// its stderr to the end on a thread, so the server never blocks on a full pipe;
    /// panics with what it printed if it exits before listening, or after 300 s.
    pub fn spawn(mut command: Command) -> Server {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting sprout serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut tx, mut seen) = (Some(tx), String::new());
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1)
                    && let Some(port) = rest.rsplit(':').next()
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(Ok(port.trim().parse::<u16>().unwrap()));
                }
                seen.push_str(&line);
                seen.push('\n');
            }
            if let Some(tx) = tx {
                let _ = tx.send(Err(seen));
            }
        });
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(Ok(port)) => Server { child, port },
            Ok(Err(stderr)) => panic!("sprout serve exited before listening:\n{stderr}"),
            Err(_) => panic!("sprout serve did not listen within 300 s"),
        }
    }
}

// Each test crate that includes this file starts its servers one way or another.
#[allow(dead_code)]
impl Server {
    /// `sprout serve` on the tiny Llama fixture, with `extra` arguments.
    pub fn tiny(extra: &[&str]) -> Server {
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
        command
            .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
            .args(extra);
        Server::spawn(command)
    }

    /// The same with `template` as its `--chat-template` (a file removed once the server
    /// has read it).
    pub fn tiny_with_template(template: &str, extra: &[&str]) -> Server {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!(
            "sprout-test-template-{}-{n}.jinja",
            std::process::id()
        ));
        std::fs::write(&file, template).unwrap();
        let mut args = vec!["--chat-template", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        let server = Server::tiny(&args);
        let _ = std::fs::remove_file(&file);
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
