//! A `sprout serve` that a test starts: spawned on a free port (`--port 0`), the port read
//! from the line it prints on stderr, and killed when dropped.

use std::io::{BufRead, BufReader};
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

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
