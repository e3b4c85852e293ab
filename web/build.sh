#!/usr/bin/env bash
# Builds the WebGPU demo page into web/dist: sprout's engine compiled to wasm32, its
# wasm-bindgen glue, and the static page. The wasm-bindgen CLI must be exactly the version
# of the wasm-bindgen crate in Cargo.lock; it is installed once (a few minutes) and cached
# under ~/.cache/sprout-tools.
#
#   web/build.sh        then   web/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ -z "$version" ]; then
  echo "web/build.sh: no wasm-bindgen in Cargo.lock" >&2
  exit 1
fi
tools="$HOME/.cache/sprout-tools/wasm-bindgen-$version"
bindgen="$tools/bin/wasm-bindgen"
if ! "$bindgen" --version 2>/dev/null | grep -qx "wasm-bindgen $version"; then
  echo "installing wasm-bindgen-cli $version into $tools (once; takes a few minutes)"
  # Not --locked: the CLI's own lock file pins crate versions the registry may no longer
  # serve; the resolved versions are compatible by semver.
  cargo install wasm-bindgen-cli --version "=$version" --root "$tools"
fi

rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
cargo build -p sprout-web --target wasm32-unknown-unknown --release
rm -rf web/dist
mkdir -p web/dist
"$bindgen" --target web --no-typescript --out-dir web/dist/pkg \
  target/wasm32-unknown-unknown/release/sprout_web.wasm
cp web/page/index.html web/page/app.js web/page/worker.js web/page/style.css web/dist/
echo "built web/dist ($(du -sh web/dist | cut -f1)); serve it with web/serve.sh"
