#!/usr/bin/env python3
"""The Markdown table of `sprout bench --speculative ... --json` files (scripts/spec_bench.sh,
named g{G}-t{T}-{workload}.json): one row per file and speculative mode, with tokens/s
(the median round), the ratio to `off` (the median of the rounds' ratios, each round
running the modes in turn, so that a slow spell of a shared machine falls on every mode
of that round), acceptance rate and mean accepted length. Standard library only."""

import json
import statistics
import sys

ORDER = {"off": 0, "suffix": 1, "auto": 2}
WORKLOADS = {"natural": 0, "structured": 1, "second-epoch": 2}


def fmt(x):
    return "-" if x is None else f"{x:.2f}"


def rows(path):
    with open(path) as f:
        run = json.load(f)
    w = run["workload"]
    name = path.rsplit("/", 1)[-1].removesuffix(".json").split("-", 2)[2]
    modes = sorted(run["modes"].values(), key=lambda r: ORDER[r["speculative"]])
    off = modes[0]["rounds_tokens_per_s"]
    for r in modes:
        s = r["speculation"]
        ratio = statistics.median(a / b for a, b in zip(r["rounds_tokens_per_s"], off))
        yield (
            f"| {w['g']} | {w['temperature']:g} | {name} | {r['speculative']} "
            f"| {r['generated_tokens_per_s']:.2f} | {ratio:.2f} "
            f"| {fmt(s['acceptance_rate'])} | {fmt(s['mean_accepted_length'])} | {s['steps']} |"
        )


def main(paths):
    print("| G | T | workload | mode | tokens/s | vs off | acceptance | accepted/draft | verify steps |")
    print("|---|---|---|---|---|---|---|---|---|")
    def key(path):
        g, t, workload = path.rsplit("/", 1)[-1].removesuffix(".json").split("-", 2)
        return (int(g[1:]), -float(t[1:]), WORKLOADS.get(workload, 9))

    for path in sorted(paths, key=key):
        for row in rows(path):
            print(row)


if __name__ == "__main__":
    main(sys.argv[1:])
