#!/usr/bin/env bash
# Serves the demo page built by web/build.sh on http://localhost:${PORT:-8080}/, with the
# default model (SmolLM2-135M-Instruct, Q4_1 GGUF; fetched and cached on first use) beside
# it under models/, where the page's URL field points.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f web/dist/index.html ]; then
  echo "web/serve.sh: web/dist is missing; run web/build.sh first" >&2
  exit 1
fi
model=$(cargo run --release -q -- model-path)
mkdir -p web/dist/models
ln -sf "$model" "web/dist/models/$(basename "$model")"
port=${PORT:-8080}
echo "sprout demo: http://localhost:$port/ (Ctrl-C stops it)"
exec python3 -m http.server "$port" --bind 127.0.0.1 --directory web/dist
