#!/usr/bin/env bash
# Makes the hostile model files of tests/hostile_models.rs and runs the CLI on each
# (`rollout`; `bench --load-format dummy` for a config.json): every run must exit 1 within
# seconds with an `error:` line naming the problem, never panic, and stay under 1 GB of
# resident memory. Prints one line per file: exit status, seconds, peak RSS in MB and the
# error. Usage: scripts/hostile_files.sh [DIR] (default: a temporary directory). Needs GNU
# time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-$(mktemp -d)}"
cargo build --release --quiet
SPROUT_HOSTILE_DIR="$dir" cargo test --release --quiet --test hostile_models -- \
    --ignored write_hostile_files > /dev/null
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
failed=0
printf '%-30s %4s %7s %8s  %s\n' file exit seconds rss_mb error
for path in "$dir"/*; do
    name=$(basename "$path")
    # A config.json is drawn as dummy weights, which only bench takes.
    args=(rollout --model "$path" --prompt hi)
    [[ $name == *.json ]] && args=(bench --load-format dummy --model "$path")
    log="$dir/.$name.log"
    set +e
    timeout 60 /usr/bin/time -v target/release/sprout "${args[@]}" > /dev/null 2> "$log"
    status=$?
    set -e
    seconds=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0;
        for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$log")
    rss_mb=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$log")
    message=$(grep -m1 '^error:' "$log" || true)
    printf '%-30s %4s %7s %8s  %s\n' "$name" "$status" "$seconds" "$rss_mb" "$message"
    if [[ $status != 1 || -z $message || $rss_mb -ge 1024 ]] || grep -q panicked "$log"; then
        failed=1
    fi
done
exit $failed
