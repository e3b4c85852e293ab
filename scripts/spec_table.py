#!/usr/bin/env python3
"""The Markdown table of `sprout bench --speculative ... --json` files (scripts/spec_bench.sh):
one row per file and speculative mode, with tokens/s, the ratio to `off` in the same run,
acceptance rate and mean accepted length. Standard library only."""

import json
import sys


def main(paths):
    print("| G | workload | mode | tokens/s | vs off | acceptance | accepted/draft | verify steps |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        w = run["workload"]
        name = path.rsplit("/", 1)[-1].removesuffix(".json").split("-", 1)[1]
        modes = run["modes"]
        off = next(r for k, r in modes.items() if r["speculative"] == "off")
        for key, r in modes.items():
            s = r["speculation"]
            fmt = lambda x: "-" if x is None else f"{x:.2f}"
            ratio = r["generated_tokens_per_s"] / off["generated_tokens_per_s"]
            print(
                f"| {w['g']} | {name} | {r['speculative']} | {r['generated_tokens_per_s']:.2f} "
                f"| {ratio:.2f} | {fmt(s['acceptance_rate'])} | {fmt(s['mean_accepted_length'])} "
                f"| {s['steps']} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
