"""Resident memory of the trainer and of the server, as grpo.py logs it (Linux only:
everything is read from /proc). Standard library only.

`RssSampler` samples VmRSS from /proc/<pid>/status every 50 ms in a thread, between
entering and leaving a `with` block, and keeps each process's peak and the peak of
their sum taken at the same instant (which is what the machine had to hold at once,
unlike the sum of two peaks reached at different moments). A sample is also taken on
entering and on leaving, so a block shorter than the interval still has two. A process
whose status cannot be read (it exited) makes leaving the block raise: a peak missing
samples is not reported as if it were whole."""

import resource
import threading


def vm_rss_bytes(pid):
    """The resident set size of `pid` ("self" for this process), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                value, unit = line.split()[1:3]
                if unit != "kB":
                    raise RuntimeError(f"/proc/{pid}/status: VmRSS in {unit!r}, not kB")
                return int(value) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS line")


def max_rss_bytes():
    """This process's peak resident set size since it started (getrusage's ru_maxrss,
    which Linux gives in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class RssSampler:
    """Peaks of the resident set sizes of named processes over a `with` block.

    `pids` maps a name to a pid, "self", or None (unknown: its peak is None, and so is
    the total's)."""

    def __init__(self, pids, interval_s=0.05):
        self.pids = dict(pids)
        self.interval_s = interval_s
        self.peak = {name: None for name in self.pids}
        self.peak_total = None
        self.samples = 0
        self._error = None
        self._stop = threading.Event()
        self._thread = None

    def _sample(self):
        values = {name: vm_rss_bytes(pid) for name, pid in self.pids.items()
                  if pid is not None}
        for name, value in values.items():
            if self.peak[name] is None or value > self.peak[name]:
                self.peak[name] = value
        if len(values) == len(self.pids):
            total = sum(values.values())
            if self.peak_total is None or total > self.peak_total:
                self.peak_total = total
        self.samples += 1

    def _run(self):
        try:
            while not self._stop.wait(self.interval_s):
                self._sample()
        except (OSError, RuntimeError) as e:
            self._error = e

    def __enter__(self):
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind, value, traceback):
        self._stop.set()
        self._thread.join()
        if kind is not None:
            return False
        if self._error is not None:
            raise RuntimeError(f"reading resident memory failed mid-block: {self._error}")
        self._sample()
        return False
