#!/usr/bin/env bash
# Runs the fuzz targets one after another, one job each (the machine may be shared), and
# prints what each did. Usage: fuzz/run.sh SECONDS TARGET [SECONDS TARGET ...], e.g.
#   fuzz/run.sh 900 gguf 300 hf_dir 300 prompts_file 300 chat_template
# Logs go to fuzz/logs/TARGET.log; the corpus grows in fuzz/corpus/TARGET and crashes are
# saved in fuzz/artifacts/TARGET (both ignored by git).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p logs
while (($# >= 2)); do
    seconds=$1 target=$2
    shift 2
    mkdir -p "corpus/$target"
    # Rust is memory-safe: no sanitizer, so the executions go to coverage. Debug
    # assertions (cargo fuzz's default) make overflowing arithmetic a crash.
    cargo +nightly fuzz run -O -s none "$target" -- -max_total_time="$seconds" \
        -jobs=1 -workers=1 -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
        > "logs/$target.log" 2>&1 || true
    # With -jobs the run itself logs to fuzz-0.log.
    [[ -f fuzz-0.log ]] && cat fuzz-0.log >> "logs/$target.log" && rm fuzz-0.log
    execs=$(grep -m1 'stat::number_of_executed_units' "logs/$target.log" | awk '{print $2}')
    rss=$(grep -m1 'stat::peak_rss_mb' "logs/$target.log" | awk '{print $2}')
    crashes=$(find "artifacts/$target" -type f 2> /dev/null | wc -l)
    echo "$target: ${seconds}s, ${execs:-?} executions, $(ls "corpus/$target" | wc -l) corpus" \
        "entries, peak RSS ${rss:-?} MB, $crashes crash or timeout artifacts"
done
