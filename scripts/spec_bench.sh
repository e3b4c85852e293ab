#!/usr/bin/env bash
# The speculative-decoding table of the README ("Does speculative decoding help
# rollouts?"): `sprout bench --speculative off,suffix,auto` on three workloads (natural
# text; structured text, JSON records; a second epoch, drafting from a first run of the
# same prompts) at G = 1, 8 and 64: one prompt of 64 tokens, 32 new tokens, the median of
# 3 rounds. Writes one JSON per run into target/spec-bench and prints the table
# (scripts/spec_table.py). `SPROUT=path` picks the binary (default target/release/sprout).
#   scripts/spec_bench.sh [--backend vulkan] [more bench options]
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/spec-bench
mkdir -p "$out"
sprout=${SPROUT:-target/release/sprout}
common=(--prompts 1 --prompt-tokens 64 --modes sprout --speculative off,suffix,auto --rounds 3 --json "$@")
for g in 1 8 64; do
  tokens=32
  for workload in natural structured second-epoch; do
    extra=()
    case $workload in
      structured) extra=(--text examples/speculative/records.jsonl.txt) ;;
      second-epoch) extra=(--second-epoch) ;;
    esac
    echo "G=$g $workload" >&2
    "$sprout" bench -n "$g" --max-tokens "$tokens" "${extra[@]}" "${common[@]}" \
      > "$out/g$g-$workload.json"
  done
done
python3 scripts/spec_table.py "$out"/g*.json
