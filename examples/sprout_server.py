"""Starting and stopping `sprout serve --port 0` from a script (used by the examples
serve_load.py and serve_throughput.py). Standard library only."""

import os
import re
import signal
import subprocess
import threading


class Server:
    """A `sprout serve --port 0` child process; its stderr is drained by a thread (a full
    pipe would block the server's logging) into a log file and a short in-memory tail."""

    def __init__(self, command, log_path, start_timeout_s):
        self.command = command
        env = dict(os.environ)
        env.setdefault("XDG_RUNTIME_DIR", "/tmp")
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env,
        )
        self.log = open(log_path, "w") if log_path else None
        self.tail = []
        self.panics = []
        self.url = self._read_url(start_timeout_s)
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def _remember(self, line):
        if self.log:
            self.log.write(line)
            self.log.flush()
        self.tail = (self.tail + [line])[-40:]
        if "panicked" in line:
            self.panics.append(line.rstrip())

    def _read_url(self, timeout_s):
        """Reads stderr until the line naming the port (or the process ends)."""
        found = {}

        def read():
            for raw in self.process.stderr:
                line = raw.decode("utf-8", "replace")
                self._remember(line)
                m = re.search(r"sprout serve: listening on (http://\S+)", line)
                if m:
                    found["url"] = m.group(1)
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if "url" not in found:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                "the server did not print its address within %ss; its stderr ends:\n%s"
                % (timeout_s, "".join(self.tail[-15:])))
        return found["url"]

    def _drain_stderr(self):
        for raw in self.process.stderr:
            self._remember(raw.decode("utf-8", "replace"))

    @property
    def pid(self):
        """The server process's id (to read its memory from /proc)."""
        return self.process.pid

    def alive(self):
        return self.process.poll() is None

    def stop(self, timeout_s=60):
        """SIGTERM, then the exit code (None if it had to be killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = None
        self._drain.join(5)
        if self.log:
            self.log.close()
        return code
