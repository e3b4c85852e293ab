#!/usr/bin/env bash
# The speculative-decoding table of the README ("Does speculative decoding help
# rollouts?"): `sprout bench --speculative off,suffix,auto` on three workloads (natural
# text; structured text, JSON records; a second epoch, drafting from a first run of the
# same prompts with the next seed) at G = 1, 8 and 64 and at temperatures 1 and 0.3 (a
# confident policy): one prompt of 64 tokens, 32 new tokens, the modes in turn each
# round. Writes one JSON per run into target/spec-bench and prints the table
# (scripts/spec_table.py).
#   scripts/spec_bench.sh [--backend vulkan] [more bench options]
# Environment: SPROUT (the binary, default target/release/sprout), SPEC_G (default
# "1 8 64"), SPEC_TEMPERATURES (default "1 0.3"), SPEC_ROUNDS (default 3; G = 64 runs
# SPEC_ROUNDS_64, default 1, since one of its rounds takes minutes on a CPU adapter),
# SPEC_TOKENS (new tokens, default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/spec-bench
mkdir -p "$out"
sprout=${SPROUT:-target/release/sprout}
common=(--prompts 1 --prompt-tokens 64 --max-tokens "${SPEC_TOKENS:-32}" --modes sprout
  --speculative off,suffix,auto --json "$@")
for g in ${SPEC_G:-1 8 64}; do
  rounds=${SPEC_ROUNDS:-3}
  [ "$g" = 64 ] && rounds=${SPEC_ROUNDS_64:-1}
  for t in ${SPEC_TEMPERATURES:-1 0.3}; do
    for workload in natural structured second-epoch; do
      extra=()
      case $workload in
        structured) extra=(--text examples/speculative/records.jsonl.txt) ;;
        second-epoch) extra=(--second-epoch) ;;
      esac
      echo "G=$g T=$t $workload ($rounds rounds)" >&2
      "$sprout" bench -n "$g" --temperature "$t" --rounds "$rounds" "${extra[@]}" \
        "${common[@]}" > "$out/g$g-t$t-$workload.json"
    done
  done
done
python3 scripts/spec_table.py "$out"/g*-t*.json
