"""The soak's memory record (serve_soak.py): the server's RSS and its reported device
memory sampled every second, their drift between two windows of the run (the second and
the last quarter), and a plot of the curve.

Standard library only (matplotlib optional, for the plot).
"""

import http.client

from serve_load import get_json


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def sampler(soak, pid, stop):
    """Every second until `stop`, a row into `soak.memory`: RSS, the device memory
    reserved and allocated, the KV blocks in use, and whether the server was asleep,
    changing weights or settling after either."""
    while not stop.wait(1.0):
        row = {"t": soak.now(), "rss_bytes": rss_bytes(pid) if pid else None}
        try:
            _, health, _ = get_json(soak.host, soak.port, "/health")
            row["gpu_memory_bytes"] = health.get("gpu_memory_bytes")
            row["gpu_memory_allocated_bytes"] = health.get("gpu_memory_allocated_bytes")
            row["kv_blocks_in_use"] = health.get("kv_blocks_in_use")
        except (OSError, http.client.HTTPException, AttributeError):
            row["gpu_memory_bytes"] = None
        with soak.lock:
            row["asleep"] = soak.slept
            row["changing"] = soak.changes_started != soak.changes_done
            row["settling"] = row["t"] - soak.settled_at < soak.args.settle_s
            soak.memory.append(row)


def median(values):
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def drift(rows, field, windows):
    """The relative change of the median of `field` from the first of `windows` ((start,
    end) seconds; end None: to the last sample) to the second, over the samples taken
    awake, outside an update and settled. The soak's windows are the second and the last
    quarter of the run (with --cycle: before the cycle and after it)."""
    def window(start, end):
        return [r[field] for r in rows
                if r.get(field) is not None and not r["asleep"] and not r["changing"]
                and not r.get("settling")
                and start <= r["t"] and (end is None or r["t"] < end)]
    second, last = median(window(*windows[0])), median(window(*windows[1]))
    if not second or last is None:
        return {"second_quarter": second, "last_quarter": last, "drift": None}
    return {"second_quarter": second, "last_quarter": last,
            "drift": abs(last - second) / second}


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not importable; no plot drawn")
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    t = [r["t"] / 60 for r in rows]
    for field, label in (("rss_bytes", "server RSS"),
                         ("gpu_memory_bytes", "device memory reserved"),
                         ("gpu_memory_allocated_bytes", "device memory allocated")):
        ax.plot(t, [(r.get(field) or 0) / 2**20 for r in rows], label=label)
    ax.set_xlabel("minutes")
    ax.set_ylabel("MiB")
    ax.set_title("sprout serve under the soak")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("memory curve: %s" % path)
