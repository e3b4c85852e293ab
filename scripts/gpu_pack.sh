#!/usr/bin/env bash
# Builds everything scripts/gpu_check.sh needs into gpu/, for a GPU machine that has no
# cargo, no apt and no Vulkan loader:
#   gpu/bin/sprout, gpu/bin/kernels-test, gpu/bin/kernels-bench   release builds, stripped
#   gpu/debs/libvulkan1_*.deb                                     the Vulkan loader (amd64)
#   gpu/lib/libvulkan.so.1                                        the same loader, unpacked
# gpu/ is build output (ignored by git); carry it with the working tree.
#
# Usage (from anywhere): bash scripts/gpu_pack.sh
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p gpu/bin gpu/debs gpu/lib

# The executable that cargo reports (in its JSON messages) for the target named $1 of kind
# $2 (test or bench); there are several target/release/deps/kernels-* files, so no glob.
executable_of() {
    python3 -c '
import json, sys
name, kind = sys.argv[1], sys.argv[2]
found = None
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and t.get("name") == name \
            and kind in t.get("kind", []) and m.get("executable"):
        found = m["executable"]
if not found:
    sys.exit("cargo reported no %s executable for target %s" % (kind, name))
print(found)
' "$1" "$2"
}

echo "== building (release)"
sprout_exe=$(cargo build --release --bin sprout --message-format=json-render-diagnostics |
    executable_of sprout bin)
test_exe=$(cargo test --release --test kernels --no-run --message-format=json-render-diagnostics |
    executable_of kernels test)
bench_exe=$(cargo bench --bench kernels --no-run --message-format=json-render-diagnostics |
    executable_of kernels bench)

echo "== copying and stripping into gpu/bin"
install -m 755 "$sprout_exe" gpu/bin/sprout
install -m 755 "$test_exe" gpu/bin/kernels-test
install -m 755 "$bench_exe" gpu/bin/kernels-bench
strip gpu/bin/sprout gpu/bin/kernels-test gpu/bin/kernels-bench
# The newest glibc symbol version each needs: the GPU machine's glibc must be at least that.
for f in gpu/bin/*; do
    glibc=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 || true)
    printf '%-22s %10s bytes  (%s%s)\n' "$f" "$(stat -c %s "$f")" \
        "$(du -h "$f" | cut -f1)" "${glibc:+, needs $glibc}"
done

echo "== the Vulkan loader (libvulkan1, amd64)"
if ! ls gpu/debs/libvulkan1_*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/amd64/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    # shellcheck disable=SC2086
    apt-get $o update
    # shellcheck disable=SC2086
    (cd gpu/debs && apt-get $o download libvulkan1)
fi
deb=$(find gpu/debs -name 'libvulkan1_*.deb' | head -1)
echo "$deb"
# Also unpacked here, as a plain file (no symlink), for a GPU machine where dpkg -x into /
# is not possible: gpu_check.sh then puts gpu/lib on LD_LIBRARY_PATH.
unpack=$(mktemp -d)
dpkg -x "$deb" "$unpack"
cp -L "$(find "$unpack" -name 'libvulkan.so.1' | head -1)" gpu/lib/libvulkan.so.1
rm -rf "$unpack"
ls -l gpu/lib/libvulkan.so.1

if ! grep -qx '/gpu/' .gitignore 2>/dev/null; then
    echo '/gpu/' >>.gitignore
    echo "added /gpu/ to .gitignore"
fi

echo "== what travels (the working tree git sees, plus gpu/; at most 64 MiB)"
tree_bytes=$(git ls-files -z --cached --others --exclude-standard |
    xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
gpu_bytes=$(find gpu -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
total=$((tree_bytes + gpu_bytes))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "working tree: $(mib "$tree_bytes"), gpu/: $(mib "$gpu_bytes"), total: $(mib "$total")"
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
    echo "warning: over the 64 MiB a call may carry" >&2
fi
