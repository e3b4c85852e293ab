#!/usr/bin/env bash
# The browser test of the demo page: builds the page (web/build.sh), serves it on
# localhost, and drives it in headless Chromium (Debian's `chromium`, through
# playwright-core; never a downloaded browser) on SwiftShader's WebGPU. The page runs a
# greedy, a sampled and a chat-mode rollout of the default model; every sample's tokens
# must equal the native engine's for the same settings (web/test.mjs). Then it stops a
# long rollout, which must free every KV block while the page stays responsive. Leaves
# the results and a screenshot in target/web-test. WEB_TEST_CASES=chat,stop runs only the
# cases named (greedy, sampled, gpu-kernels, chat, k-quant, gemma3, gemma3-sampled, stop), for
# a quick rerun. The k-quant case loads a second, tiny file (tests/fixtures/tiny-qwen3-q4_k_m.gguf);
# the gemma3 cases Gemma 3 270M (`sprout model-path gemma3-270m` fetches it).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v npm >/dev/null || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
(cd web && npm ci --no-audit --no-fund --loglevel=error)

cargo test --release -q -p sprout-web
web/build.sh
cargo build --release -q
model=$(target/release/sprout model-path)
kquant="$PWD/tests/fixtures/tiny-qwen3-q4_k_m.gguf"
gemma=$(target/release/sprout model-path gemma3-270m)
mkdir -p web/dist/models
for file in "$model" "$kquant" "$gemma"; do
  ln -sf "$file" "web/dist/models/$(basename "$file")"
done

out=target/web-test
rm -rf "$out"
mkdir -p "$out"
port=${PORT:-8765}
python3 -m http.server "$port" --bind 127.0.0.1 --directory web/dist >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/" >/dev/null && break
  sleep 0.2
done

SPROUT_BIN=target/release/sprout \
BASE_URL="http://127.0.0.1:$port/" \
MODEL_URL="models/$(basename "$model")" \
MODEL_PATH="$model" \
KQUANT_URL="models/$(basename "$kquant")" \
KQUANT_PATH="$kquant" \
GEMMA_URL="models/$(basename "$gemma")" \
GEMMA_PATH="$gemma" \
OUT_DIR="$out" \
  node web/test.mjs
