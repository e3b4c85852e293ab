#!/usr/bin/env python3
"""`sprout serve` driven by an RL framework's own client and by the `openai` SDK.

The framework client is SkyRL's `RemoteInferenceClient` (pip package `skyrl`, 0.3.0,
installed with --no-deps: the client module itself needs only aiohttp and pydantic, no
vLLM, torch or CUDA), used unchanged through its public methods: token-id rollouts with
log-probs (`/inference/v1/generate`), prompt log-prob scoring (its Tinker `sample()`),
`/tokenize`, `/detokenize`, `/v1/chat/completions/render`, `/v1/completions`,
`/v1/chat/completions`, pause in keep and abort mode, resume, and the prefix-cache
reset. The `openai` SDK covers a token-id completion with log-probs, a chat completion
and the same chat streamed, with vLLM's fields in `extra_body`. What each check asserts
is in skyrl_checks.py and openai_checks.py.

Run (the venv from this folder's README):

    ~/.cache/sprout/clients-venv/bin/python examples/skyrl/rl_client_check.py \\
        --sprout target/release/sprout

starts `sprout serve --port 0` on the default model and stops it at the end; or against
a server already running (the admin routes answer loopback clients):

    ~/.cache/sprout/clients-venv/bin/python examples/skyrl/rl_client_check.py \\
        --url http://127.0.0.1:8000

`--extra` (last on the line) passes further arguments to `sprout serve`, e.g.
`--extra --model tests/fixtures/tiny-llama --load-format dummy`.

It prints one line per check, the client versions and a summary, and exits 1 when any
check failed or found its route missing. Generated text is untrusted data: it is
compared and printed (repr, cut short), never run.
"""

import argparse
import asyncio
import importlib.metadata
import json
import os
import sys
import urllib.request

# The checks are imported from this folder; no bytecode left in the checkout.
sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import openai_checks  # noqa: E402
import skyrl_checks  # noqa: E402
from report import Report  # noqa: E402
from sprout_server import Server  # noqa: E402

PACKAGES = ("skyrl", "openai", "aiohttp", "pydantic")


class Shared:
    """What one check finds and later ones build on."""

    url = None
    prompts = None
    text_ids = None
    completion = None
    chat = None
    rollouts = None
    reference = None

    def __init__(self, pause_tokens):
        self.pause_tokens = pause_tokens


def served_model(url):
    with urllib.request.urlopen(f"{url}/v1/models", timeout=60) as r:
        return json.loads(r.read())["data"][0]["id"]


def versions():
    return ", ".join(f"{p} {importlib.metadata.version(p)}" for p in PACKAGES)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a server already running (else one is started)")
    parser.add_argument("--sprout", default="target/release/sprout")
    parser.add_argument("--log", default="/tmp/sprout-rl-client.log", help="the started server's stderr")
    parser.add_argument("--start-timeout-s", type=float, default=900)
    parser.add_argument("--pause-tokens", type=int, default=48,
                        help="length of the greedy rollout that is paused a third of the way in")
    parser.add_argument("--verbose", action="store_true", help="tracebacks of unexpected errors")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="further arguments to `sprout serve` (last on the line)")
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        command = [args.sprout, "serve", "--port", "0", *args.extra]
        print("starting:", " ".join(command), flush=True)
        server = Server(command, args.log, args.start_timeout_s)
        url = server.url
    report = Report(verbose=args.verbose)
    try:
        model = served_model(url)
        print(f"server {url}, model {model!r}; clients: {versions()}", flush=True)
        shared = Shared(args.pause_tokens)
        openai_checks.run_all(report, url, model, shared)
        if shared.prompts is None:
            report.skip("skyrl checks", "no prompt token ids")
        else:
            asyncio.run(skyrl_checks.run_all(report, url, model, shared))
    finally:
        if server is not None:
            code = server.stop()
            if code != 0:
                report.skip("server exit", f"`sprout serve` exited {code} on SIGTERM (log: {args.log})")
            if server.panics:
                report.skip("server log", f"panics: {server.panics[:2]}")
    print(f"clients: {versions()}")
    print(report.summary())
    return report.exit_code()


if __name__ == "__main__":
    sys.exit(main())
