#!/usr/bin/env python3
"""Measures `sprout serve`'s sleep and wake: the device memory it reports (`/health`'s
`gpu_memory_bytes`) and the process's RSS before, asleep and awake again, at levels 1 and
2, and whether the same seeded request gives bitwise the same samples after the wake
(level 2: the weights woken, the same model file pushed back as an update, the KV cache
woken, as vLLM's level 2 expects). Standard library only.

On a CPU adapter (lavapipe) the device's memory is the process's, so the RSS drop is the
memory a trainer on the same machine gets back; on a GPU the RSS holds the level-1 copy
of the weights instead.

Usage (from the repository root):
    python3 scripts/sleep_check.py [--sprout target/release/sprout] [--model PATH]
        [--json out.json] [-- extra sprout serve arguments]

Prints a Markdown table; exits 1 if a wake does not give the same samples, or if the
device memory asleep is not under 5% of awake, or (on a CPU adapter, at level 2) if the
RSS does not drop by at least the weights' and the KV cache's bytes.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from sprout_server import Server  # noqa: E402


def call(url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{method} {path} answered {e.code}: {e.read().decode(errors='replace')}")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit(f"no VmRSS for process {pid}")


def samples(url, model):
    """A seeded request: every choice's token ids and log-probs (as their JSON text, which
    round-trips an f32 exactly)."""
    out = call(url, "POST", "/v1/completions", {
        "model": model, "prompt": "The history of the printing press", "n": 4,
        "max_tokens": 48, "seed": 1234, "temperature": 1.0, "ignore_eos": True,
        "return_token_ids": True,
    })
    return [(c["token_ids"], json.dumps(c["sprout"]["logprobs"])) for c in out["choices"]]


def measure(url, pid, level, model, model_path, version):
    before = samples(url, model)
    health = call(url, "GET", "/health")
    awake = {"memory": health["gpu_memory_bytes"], "rss": rss_bytes(pid)}
    started = time.perf_counter()
    slept = call(url, "POST", f"/sleep?level={level}")
    sleep_s = time.perf_counter() - started
    time.sleep(0.5)  # the allocator's frees reach the process's pages
    asleep = {"memory": call(url, "GET", "/health")["gpu_memory_bytes"], "rss": rss_bytes(pid)}
    started = time.perf_counter()
    if level == 1:
        call(url, "POST", "/wake_up")
    else:
        call(url, "POST", "/wake_up?tags=weights")
        call(url, "POST", "/update_weights", {"weight_dir": model_path, "weights_version": version})
        call(url, "POST", "/wake_up?tags=kv_cache")
    wake_s = time.perf_counter() - started
    after = samples(url, model)
    return {
        "level": level,
        "source": health["gpu_memory_source"],
        "memory_awake": awake["memory"], "memory_asleep": asleep["memory"],
        "rss_awake": awake["rss"], "rss_asleep": asleep["rss"],
        "freed_weights_bytes": slept["freed_weights_bytes"],
        "freed_kv_cache_bytes": slept["freed_kv_cache_bytes"],
        "sleep_s": sleep_s, "wake_s": wake_s,
        "same_samples": before == after,
    }


def mib(n):
    return f"{n / 2**20:,.1f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sprout", default="target/release/sprout")
    p.add_argument("--model", help="a model path (default: sprout's default model)")
    p.add_argument("--json", help="write the measurements here")
    p.add_argument("extra", nargs="*", help="more `sprout serve` arguments (after --)")
    args = p.parse_args()
    command = [args.sprout, "serve", "--port", "0"]
    if args.model:
        command += ["--model", args.model]
    server = Server(command + args.extra, None, 600)
    try:
        models = call(server.url, "GET", "/v1/models")["data"][0]
        model, model_path = models["id"], models["root"]
        cpu = "llvmpipe" in " ".join(server.tail) or "SwiftShader" in " ".join(server.tail)
        rows = [measure(server.url, server.process.pid, level, model, model_path, level)
                for level in (1, 2)]
    finally:
        server.stop()
    print(f"| level | memory awake MiB | asleep MiB | asleep/awake | RSS awake MiB | "
          f"RSS asleep MiB | RSS drop MiB | weights+KV freed MiB | sleep s | wake s | "
          f"same samples |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    failed = []
    for r in rows:
        freed = r["freed_weights_bytes"] + r["freed_kv_cache_bytes"]
        drop = r["rss_awake"] - r["rss_asleep"]
        share = r["memory_asleep"] / max(r["memory_awake"], 1)
        print(f"| {r['level']} | {mib(r['memory_awake'])} ({r['source']}) | "
              f"{mib(r['memory_asleep'])} | {share:.1%} | {mib(r['rss_awake'])} | "
              f"{mib(r['rss_asleep'])} | {mib(drop)} | {mib(freed)} | {r['sleep_s']:.2f} | "
              f"{r['wake_s']:.2f} | {'yes' if r['same_samples'] else 'NO'} |")
        if not r["same_samples"]:
            failed.append(f"level {r['level']}: the samples after the wake differ")
        if share >= 0.05:
            failed.append(f"level {r['level']}: {share:.1%} of the device memory held asleep")
        if cpu and r["level"] == 2 and drop < freed:
            failed.append(f"level 2: the RSS dropped {drop} bytes, less than the {freed} freed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu_adapter": cpu, "rows": rows}, f, indent=1)
    for f in failed:
        print("FAILED:", f, file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
