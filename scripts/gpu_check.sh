#!/usr/bin/env bash
# The GPU check: runs, on a machine without cargo, what scripts/gpu_pack.sh built into gpu/
# (the kernel suite, `sprout tune`, the kernel benches, the W workload, and transformers on
# the same shapes as the baseline) and prints one Markdown table at the end.
#
# Usage, from the repository root: bash scripts/gpu_check.sh [OUT_DIR]
# OUT_DIR defaults to $OUT when set, else ./gpu-out. Every part writes its own file under
# OUT_DIR/logs/; OUT_DIR/summary.md gets the report, OUT_DIR/logs.tar.gz every log.
#
# A part that fails or runs out of time is recorded and the next one runs; every command
# has a timeout, and the whole run keeps within GPU_CHECK_DEADLINE_S (default 420 s).
#
# Settings (environment):
#   GPU_CHECK_G="8 64 256"         samples per prompt (G) of the W workload
#   GPU_CHECK_PROMPT_TOKENS=128    prompt tokens (PP)
#   GPU_CHECK_MAX_TOKENS=128       new tokens per sample (TG)
#   GPU_CHECK_ROUNDS=3             rounds of each W run (the median round is reported)
#   GPU_CHECK_PROFILE_G=8          G of the one --profile run ("" to skip it)
#   GPU_CHECK_MODEL=smollm2-135m   GPU_CHECK_WEIGHT_FORMAT=q4_1
#   GPU_CHECK_BACKEND=vulkan       the wgpu backend for sprout and the benches
#   GPU_CHECK_QUICK=1              skip the kernel suite and the kernel benches
#   GPU_CHECK_TEST_FILTER=...      a filter for the kernel suite (default: every case)
#   GPU_CHECK_TEST_THREADS=N       --test-threads for the kernel suite
#   GPU_CHECK_BENCH_FILTER=REGEX   the benches to run (default: the copy ceilings and the
#                                  matmul rows at m 1 and 8; set but empty: every bench)
#   GPU_CHECK_TUNE_ARGS=...        more arguments for sprout tune (e.g. --max-rows 8)
#   GPU_CHECK_TUNE_BUDGET_S=90     seconds sprout tune sweeps for (within its 120 s part)
#   GPU_CHECK_HF=0                 skip transformers
#   GPU_CHECK_HF_CPU=1             run transformers even without CUDA (on the CPU)
#   GPU_CHECK_PYTHON=python3       the Python that has torch and transformers
#   GPU_CHECK_DEADLINE_S=420       the whole run's time limit
#   GPU_CHECK_KEEP_LOGS=1          keep OUT_DIR/logs/ beside logs.tar.gz (default: kept
#                                  unless OUT_DIR is $OUT, whose files come back only 8 at most)
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

OUT_DIR=${1:-${OUT:-./gpu-out}}
mkdir -p "$OUT_DIR/logs" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOGS=$OUT_DIR/logs
rm -f "$LOGS"/* "$OUT_DIR/summary.md" "$OUT_DIR/logs.tar.gz" 2>/dev/null
STATUS=$LOGS/status.tsv
: >"$STATUS"

# A cache, config and tune files where this run can find them, fresh each run (so that a
# tune file left by an earlier run is not taken for this one's).
export HOME=$OUT_DIR/home
rm -rf "$HOME"
mkdir -p "$HOME"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/gpu-check-hf

G_LIST=${GPU_CHECK_G:-8 64 256}
PP=${GPU_CHECK_PROMPT_TOKENS:-128}
TG=${GPU_CHECK_MAX_TOKENS:-128}
ROUNDS=${GPU_CHECK_ROUNDS:-3}
PROFILE_G=${GPU_CHECK_PROFILE_G-8}
MODEL=${GPU_CHECK_MODEL:-smollm2-135m}
WFORMAT=${GPU_CHECK_WEIGHT_FORMAT:-q4_1}
BACKEND=${GPU_CHECK_BACKEND:-vulkan}
PY=${GPU_CHECK_PYTHON:-python3}
DEADLINE=${GPU_CHECK_DEADLINE_S:-420}
DEFAULT_BENCH_FILTER='^copy/|^matmul/[^/]+/(576x1536|1536x576|576x49152)/m(1|8)/'
BENCH_FILTER=${GPU_CHECK_BENCH_FILTER-$DEFAULT_BENCH_FILTER}
SPROUT=$ROOT/gpu/bin/sprout
START=$(date +%s)
# Seconds kept back at the end for the table, and (KEEP_AFTER) for the parts after this one,
# so that a slow early part cannot leave no time for the workload and its baseline.
RESERVE=15
KEEP_AFTER=0

{
    echo "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "g=$G_LIST"
    echo "prompt_tokens=$PP"
    echo "max_tokens=$TG"
    echo "rounds=$ROUNDS"
    echo "model=$MODEL"
    echo "weight_format=$WFORMAT"
    echo "backend=$BACKEND"
} >"$LOGS/settings.txt"

elapsed() { echo $(($(date +%s) - START)); }

say() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }

# record NAME RESULT RC SECONDS NOTE
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$STATUS"; }

# part NAME LIMIT_S STDOUT_FILE STDERR_FILE COMMAND...: runs COMMAND under a timeout (the
# smaller of LIMIT_S and what the deadline leaves), records how it ended, returns its status.
# STDERR_FILE "-" sends stderr to STDOUT_FILE.
part() {
    local name=$1 limit=$2 out=$3 err=$4
    shift 4
    local left=$((DEADLINE - $(elapsed) - RESERVE - KEEP_AFTER))
    if [ "$left" -lt 10 ]; then
        record "$name" skipped - 0 "out of time"
        say "$name: skipped (out of time)"
        return 125
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0 rc result
    t0=$(date +%s)
    if [ "$err" = - ]; then
        timeout -k 10 "$limit" "$@" >"$out" 2>&1
    else
        timeout -k 10 "$limit" "$@" >"$out" 2>"$err"
    fi
    rc=$?
    local took=$(($(date +%s) - t0))
    case $rc in
        0) result=ok ;;
        124 | 137) result=timeout ;;
        *) result=failed ;;
    esac
    record "$name" "$result" "$rc" "$took" "limit ${limit}s"
    if [ "$result" = timeout ]; then
        say "$name: TIMED OUT after ${limit}s"
    elif [ "$result" = failed ]; then
        say "$name: FAILED (exit $rc, ${took}s)"
    else
        say "$name: ok (${took}s)"
    fi
    return "$rc"
}

# ---------------------------------------------------------------------------------------
# 1. Setup: the Vulkan loader and the NVIDIA driver.
# ---------------------------------------------------------------------------------------
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
has_loader() { "$LDCONFIG" -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; }

# 0 when wgpu's Vulkan backend finds an adapter that is not a CPU one (lavapipe).
vulkan_gpu_found() {
    timeout -k 5 60 "$SPROUT" --backend vulkan devices --json >"$LOGS/devices-vulkan.json" ||
        return 1
    grep -q '"device_type": "\(discrete-gpu\|integrated-gpu\|virtual-gpu\|other\)"' \
        "$LOGS/devices-vulkan.json"
}

setup() {
    echo "machine: $(uname -srm); $(grep -s '^PRETTY_NAME=' /etc/os-release | cut -d= -f2-)"
    echo "glibc: $(ldd --version 2>/dev/null | head -1)"
    echo "user: $(id -un 2>/dev/null || id -u)"
    if command -v nvidia-smi >/dev/null; then
        timeout -k 5 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
            | tee "$LOGS/nvidia-smi.csv"
    else
        echo "no nvidia-smi"
    fi
    ls -l "$ROOT"/gpu/bin 2>&1
    if [ ! -x "$SPROUT" ]; then
        echo "gpu/bin/sprout is missing: run scripts/gpu_pack.sh where cargo is, and carry gpu/"
        return 1
    fi
    if has_loader; then
        echo "the Vulkan loader is installed: $("$LDCONFIG" -p | grep 'libvulkan\.so\.1 ' | head -1)"
    else
        echo "no Vulkan loader: unpacking gpu/debs/*.deb into /"
        if command -v dpkg >/dev/null && [ -w / ]; then
            for f in "$ROOT"/gpu/debs/*.deb; do
                [ -e "$f" ] || continue
                echo "dpkg -x $f /"
                timeout -k 5 60 dpkg -x "$f" / || echo "dpkg -x $f failed"
            done
            timeout -k 5 60 "$LDCONFIG" || echo "ldconfig failed"
        else
            echo "cannot: no dpkg or / is not writable"
        fi
        if ! has_loader; then
            echo "still no loader in ldconfig's cache: LD_LIBRARY_PATH=gpu/lib"
            export LD_LIBRARY_PATH=$ROOT/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        fi
    fi
    if vulkan_gpu_found; then
        echo "wgpu finds a Vulkan GPU"
    else
        echo "wgpu finds no Vulkan GPU with the default driver search; trying NVIDIA's ICD file"
        local icd found=
        for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
            /etc/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
            $(timeout -k 5 20 find /usr /etc /opt -name 'nvidia_icd*.json' 2>/dev/null); do
            [ -f "$icd" ] || continue
            echo "VK_DRIVER_FILES=$icd"
            export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
            if vulkan_gpu_found; then
                found=1
                break
            fi
        done
        if [ -z "$found" ]; then
            unset VK_DRIVER_FILES VK_ICD_FILENAMES
            echo "still no Vulkan GPU: the parts below run on whatever wgpu finds"
            timeout -k 5 60 "$SPROUT" --backend vulkan devices --json \
                >"$LOGS/devices-vulkan.json"
            return 1
        fi
        echo "wgpu finds a Vulkan GPU with VK_DRIVER_FILES=$VK_DRIVER_FILES"
    fi
}

say "gpu_check: logs in $LOGS"
t0=$(date +%s)
setup >"$LOGS/setup.log" 2>&1
rc=$?
record setup "$([ $rc = 0 ] && echo ok || echo no-gpu)" $rc $(($(date +%s) - t0)) ""
if [ $rc = 0 ]; then say "setup: ok"; else say "setup: $(tail -1 "$LOGS/setup.log")"; fi
grep -v '^name' "$LOGS/nvidia-smi.csv" 2>/dev/null | sed 's/^/        nvidia-smi: /'
{
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}"
} >>"$LOGS/settings.txt"

# ---------------------------------------------------------------------------------------
# 2. The adapters.
# ---------------------------------------------------------------------------------------
part devices 60 "$LOGS/devices.txt" - "$SPROUT" devices
part devices-json 60 "$LOGS/devices.json" "$LOGS/devices-json.log" "$SPROUT" devices --json
sed 's/^/        /' "$LOGS/devices.txt" | head -8

export SPROUT_BACKEND=$BACKEND
# The kernel suite, benches and tuning leave at least this much for the workload and
# transformers (what they take on an H200, with room).
KEEP_AFTER=${GPU_CHECK_KEEP_FOR_WORKLOAD_S:-180}

# ---------------------------------------------------------------------------------------
# 3. The kernel suite.
# ---------------------------------------------------------------------------------------
quick=${GPU_CHECK_QUICK:-0}
if [ "$quick" = 1 ]; then
    record kernels-test skipped - 0 GPU_CHECK_QUICK
    say "kernels-test: skipped (GPU_CHECK_QUICK=1)"
else
    test_args=()
    [ -n "${GPU_CHECK_TEST_THREADS:-}" ] && test_args+=(--test-threads "$GPU_CHECK_TEST_THREADS")
    [ -n "${GPU_CHECK_TEST_FILTER:-}" ] && test_args+=("$GPU_CHECK_TEST_FILTER")
    SPROUT_REQUIRE_GPU=1 part kernels-test 150 "$LOGS/kernels-test.log" - \
        "$ROOT/gpu/bin/kernels-test" "${test_args[@]}"
fi

# ---------------------------------------------------------------------------------------
# 4. Tuning (the runs below go on untuned when it fails). Before the benches, which do not
# use the tune file, so that a slow bench cannot leave tuning no time.
# ---------------------------------------------------------------------------------------
# shellcheck disable=SC2086
# It sweeps the generated space of variants (`--budget-s`), each verified bitwise against
# the default on this device before it is timed, the decode row counts first.
part tune 120 "$LOGS/tune.json" "$LOGS/tune.log" \
    "$SPROUT" tune --load-format dummy --model "$MODEL" --weight-format "$WFORMAT" --json \
    --budget-s "${GPU_CHECK_TUNE_BUDGET_S:-90}" ${GPU_CHECK_TUNE_ARGS:-}

# ---------------------------------------------------------------------------------------
# 5. The kernel benches.
# ---------------------------------------------------------------------------------------
if [ "$quick" = 1 ]; then
    record kernels-bench skipped - 0 GPU_CHECK_QUICK
    say "kernels-bench: skipped (GPU_CHECK_QUICK=1)"
else
    bench_args=(--bench)
    [ -n "$BENCH_FILTER" ] && bench_args+=("$BENCH_FILTER")
    CRITERION_HOME=$(mktemp -d /tmp/gpu-check-criterion.XXXXXX)
    CRITERION_HOME=$CRITERION_HOME part kernels-bench 150 "$LOGS/kernels-bench.log" - \
        "$ROOT/gpu/bin/kernels-bench" "${bench_args[@]}"
    rm -rf "$CRITERION_HOME"
fi

# ---------------------------------------------------------------------------------------
# 6. The W workload: one prompt of PP tokens sampled G times for TG tokens each.
# ---------------------------------------------------------------------------------------
KEEP_AFTER=0
w_args=(bench --load-format dummy --model "$MODEL" --weight-format "$WFORMAT" --prompts 1
    --prompt-tokens "$PP" --max-tokens "$TG" --lengths fixed --modes sprout
    --max-num-seqs 256 --max-batch-tokens 512)
for g in $G_LIST; do
    part "w-g$g" 60 "$LOGS/w-g$g.json" "$LOGS/w-g$g.log" \
        "$SPROUT" "${w_args[@]}" -n "$g" --rounds "$ROUNDS" --json
done
if [ -n "$PROFILE_G" ]; then
    part "profile-g$PROFILE_G" 60 "$LOGS/profile-g$PROFILE_G.txt" - \
        "$SPROUT" "${w_args[@]}" -n "$PROFILE_G" --rounds 1 --profile
fi

# ---------------------------------------------------------------------------------------
# 7. Hugging Face transformers, bf16, on the same shapes.
# ---------------------------------------------------------------------------------------
if [ "${GPU_CHECK_HF:-1}" = 0 ]; then
    record transformers skipped - 0 GPU_CHECK_HF=0
    say "transformers: skipped (GPU_CHECK_HF=0)"
elif GPU_CHECK_HF_CPU=${GPU_CHECK_HF_CPU:-0} timeout -k 5 90 "$PY" -c '
import os, torch, transformers
assert torch.cuda.is_available() or os.environ["GPU_CHECK_HF_CPU"] == "1", "no CUDA"
print("torch", torch.__version__, "transformers", transformers.__version__,
      "cuda", torch.cuda.is_available())' >"$LOGS/hf-check.log" 2>&1; then
    # shellcheck disable=SC2086
    part transformers 150 "$LOGS/hf.jsonl" "$LOGS/hf.log" \
        "$PY" "$ROOT/scripts/hf_generate.py" "$MODEL" "$PP" "$TG" $G_LIST
else
    record transformers skipped - 0 "no torch with CUDA (hf-check.log)"
    say "transformers: skipped ($(tail -1 "$LOGS/hf-check.log"))"
fi

# ---------------------------------------------------------------------------------------
# 8. The report: the table last.
# ---------------------------------------------------------------------------------------
say "done in $(elapsed)s"
packed=(logs)
[ -d "$HOME/.cache/sprout" ] && packed+=(home/.cache/sprout) # the tune files, if any
tar -czf "$OUT_DIR/logs.tar.gz" -C "$OUT_DIR" "${packed[@]}" 2>/dev/null
keep=${GPU_CHECK_KEEP_LOGS:-}
if [ -z "$keep" ]; then
    keep=1
    [ -n "${OUT:-}" ] && [ "$(cd "$OUT" 2>/dev/null && pwd)" = "$OUT_DIR" ] && keep=0
fi
echo
if command -v python3 >/dev/null; then
    timeout -k 5 60 python3 "$ROOT/scripts/gpu_table.py" "$LOGS" --details \
        --markdown "$OUT_DIR/summary.md"
else
    echo "no python3: the logs are in $LOGS"
    cat "$STATUS"
fi
if [ "$keep" = 0 ]; then
    # The device tool brings back at most 8 files from $OUT: leave summary.md and the tarball.
    rm -rf "$LOGS" "$HOME"
fi
exit 0
