#!/usr/bin/env python3
"""Throughput of `sprout serve` against `sprout bench` on the same workload, side by side.

What it measures
----------------
Workload W: one prompt of 128 tokens, sampled 8 times, 128 new tokens per sample
(end of sequence ignored, so every sample makes exactly 128), temperature 1, a fixed
seed. W is run three ways, in turn, `--rounds` times (so that other work on a shared
machine falls on every way alike):

- bench:      `sprout bench --prompts 1 -n 8 --prompt-tokens 128 --max-tokens 128
               --modes sprout --json`; its `generated_tokens_per_s` is the figure.
- server n=8: one non-streamed `POST /v1/completions` with n=8.
- server 8x1: 8 concurrent non-streamed requests with n=1, each with its own seed.

For the server, generated tokens/s = the responses' total `usage.completion_tokens` /
the wall time from the first send to the last response. One `sprout serve --port 0` is
started for all rounds (it sits idle while the bench runs) and warmed up first with one
small request. It prints every round and the medians, and the ratios server/bench for
both shapes, each marked whether it is >= 0.9 (a report, not a check: the exit code is
1 only when the server does not exit 0 on SIGTERM; a refused request or a wrong token
count stops the script with an error).

The server's prompts are cut, like the bench's, from the text the bench cuts its prompts
from (read from src/cli/bench/workload.rs and tokenized by the server, which is also the
warm-up request; if it cannot be read, consecutive token ids from 1000). The bench's
prompt is that text's first 128 tokens and it computes it in every round (a new engine
each time); the server would keep a prompt it has seen in its prefix cache, so each
server measurement takes a window of 128 tokens it has not seen (starting one token
further on each time) and computes its prompt too. `--reuse-prompt` sends the bench's
exact prompt every time instead. The prompt tokens the server found cached are reported.

How to run
----------
    python3 examples/serve_throughput.py --sprout target/release/sprout
    python3 examples/serve_throughput.py --model tests/fixtures/tiny-llama --rounds 1 \\
        --json /tmp/throughput.json --extra --backend vulkan

`--extra` (last on the line) passes engine options to both commands. Only the Python
standard library is used; what the server and the bench print is parsed as JSON, never
evaluated.
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

from sprout_server import Server

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_WORKLOAD_RS = os.path.join(HERE, "..", "src", "cli", "bench", "workload.rs")
FALLBACK_FIRST_ID = 1000
SHAPES = ("bench", "server_n8", "server_8x1")
GOOD_RATIO = 0.9


# ---------------------------------------------------------------------------------------
# The commands


def child_env():
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    return env


def model_args(model):
    return ["--model", model] if model else []


# ---------------------------------------------------------------------------------------
# The bench


def run_bench(args):
    """One `sprout bench` run of W; its sprout mode's figures."""
    command = [
        args.sprout, "bench", "--prompts", "1", "-n", str(args.n),
        "--prompt-tokens", str(args.prompt_tokens), "--max-tokens", str(args.max_tokens),
        "--modes", "sprout", "--seed", str(args.seed), "--json",
    ] + model_args(args.model) + args.extra
    done = subprocess.run(command, capture_output=True, env=child_env(),
                          timeout=args.bench_timeout_s)
    if done.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(command), done.returncode,
                                                  done.stderr.decode("utf-8", "replace")))
    # The JSON is the last line of stdout.
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    mode = json.loads(lines[-1])["modes"]["sprout"]
    return {
        "generated_tokens": mode["generated_tokens"],
        "wall_s": mode["wall_s"],
        "tokens_per_s": mode["generated_tokens_per_s"],
        "prompt_tokens_computed": mode.get("prefill_tokens_computed"),
    }


# ---------------------------------------------------------------------------------------
# The server


def post_completion(host, port, body, timeout_s):
    """POST /v1/completions; the parsed reply (raises on a non-200 status)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read().decode("utf-8", "replace")
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError("POST /v1/completions answered %d: %s"
                           % (response.status, raw[:500]))
    reply = json.loads(raw)
    if not isinstance(reply, dict):
        raise RuntimeError("the reply is not a JSON object: %s" % raw[:200])
    return reply


def max_model_len(host, port, timeout_s):
    """The server's longest prompt plus max_tokens, from GET /v1/models."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/v1/models")
        reply = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return int(reply["data"][0]["max_model_len"])


def bench_text():
    """The text `sprout bench` cuts its prompts from, read from the Rust source (a
    string literal whose line ends are `\\` continuations); None if it cannot be read."""
    try:
        with open(BENCH_WORKLOAD_RS) as f:
            source = f.read()
    except OSError:
        return None
    m = re.search(r'const TEXT: &str = "((?:[^"\\]|\\.)*)";', source, re.S)
    if not m:
        return None
    text = re.sub(r"\\\n\s*", "", m.group(1))  # a continuation drops the line end
    if "\\" in text:
        return None  # other escapes: not worth decoding here
    return text


def source_ids(host, port, args):
    """Token ids that W's prompts are cut from, and where they came from: the bench's
    text as the server tokenizes it (that request is also the warm-up), or, if it cannot
    be read, consecutive ids from FALLBACK_FIRST_ID."""
    text = bench_text()
    if text is not None:
        # A token covers at least one character, so a text cut to the context's length
        # in characters fits; cut at a space, the tokens before the cut are unchanged.
        text = text[:max_model_len(host, port, args.request_timeout_s) - 2]
        text = text.rsplit(" ", 1)[0]
        reply = post_completion(host, port, {
            "prompt": text, "max_tokens": 1, "return_token_ids": True, "seed": args.seed,
        }, args.request_timeout_s)
        ids = reply["choices"][0].get("prompt_token_ids") or []
        if len(ids) >= args.prompt_tokens:
            return ids, "the bench's text"
    ids = list(range(FALLBACK_FIRST_ID, FALLBACK_FIRST_ID + args.prompt_tokens
                     + 2 * args.rounds))
    post_completion(host, port, {"prompt": ids[:8], "max_tokens": 1},
                    args.request_timeout_s)
    return ids, "token ids from %d" % FALLBACK_FIRST_ID


def prompt_window(ids, start, length):
    """`length` ids from `start` on, wrapping around as the bench does."""
    return [ids[(start + i) % len(ids)] for i in range(length)]


def w_request(args, prompt, n, seed):
    return {
        "prompt": prompt, "n": n, "max_tokens": args.max_tokens, "temperature": 1.0,
        "seed": seed, "ignore_eos": True,
    }


def timed_requests(host, port, bodies, timeout_s):
    """Sends `bodies` at once (a thread each); (replies, seconds from the first send to
    the last response)."""
    replies = [None] * len(bodies)
    errors = []
    barrier = threading.Barrier(len(bodies) + 1)

    def send(i):
        barrier.wait()
        try:
            replies[i] = post_completion(host, port, bodies[i], timeout_s)
        except Exception as e:  # reported below, with the others
            errors.append(repr(e))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.monotonic()
    for t in threads:
        t.join()
    wall_s = time.monotonic() - start
    if errors:
        raise RuntimeError("; ".join(errors))
    return replies, wall_s


def run_server_shape(host, port, args, prompt, shape):
    """W on the server: one request with n=8 (server_n8) or 8 with n=1 (server_8x1)."""
    if shape == "server_n8":
        bodies = [w_request(args, prompt, args.n, args.seed)]
    else:
        bodies = [w_request(args, prompt, 1, args.seed + i) for i in range(args.n)]
    replies, wall_s = timed_requests(host, port, bodies, args.request_timeout_s)
    tokens = sum(r["usage"]["completion_tokens"] for r in replies)
    choices = sum(len(r["choices"]) for r in replies)
    expected = args.n * args.max_tokens
    if tokens != expected or choices != args.n:
        raise RuntimeError("%s: %d choices and %d tokens, expected %d and %d"
                           % (shape, choices, tokens, args.n, expected))
    cached = sum(r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                 for r in replies)
    return {"generated_tokens": tokens, "wall_s": wall_s, "tokens_per_s": tokens / wall_s,
            "cached_prompt_tokens": cached}


# ---------------------------------------------------------------------------------------
# The summary


def summarize(rounds):
    medians = {shape: statistics.median(r[shape]["tokens_per_s"] for r in rounds)
               for shape in SHAPES}
    ratios = {shape: medians[shape] / medians["bench"] for shape in SHAPES[1:]}
    return {
        "median_tokens_per_s": medians,
        "ratio_vs_bench": ratios,
        "ratio_at_least_0_9": {shape: ratio >= GOOD_RATIO for shape, ratio in ratios.items()},
    }


def print_round(i, rounds_total, round_):
    cells = ", ".join("%s %.2f tokens/s (%.1f s)"
                      % (shape, round_[shape]["tokens_per_s"], round_[shape]["wall_s"])
                      for shape in SHAPES)
    print("round %d/%d: %s" % (i, rounds_total, cells), flush=True)


def print_summary(args, prompt_source, rounds, summary):
    print()
    starts = sorted({r[s]["prompt_start"] for r in rounds for s in SHAPES[1:]})
    print("workload: 1 prompt of %d tokens, n=%d, %d new tokens each, temperature 1, "
          "seed %d" % (args.prompt_tokens, args.n, args.max_tokens, args.seed))
    print("prompts: cut from %s; the bench's starts at token 0, the server's at %s"
          % (prompt_source, ", ".join(map(str, starts))))
    print("%-12s %12s   %s" % ("shape", "median t/s", "every round's tokens/s"))
    for shape in SHAPES:
        every = ", ".join("%.2f" % r[shape]["tokens_per_s"] for r in rounds)
        print("%-12s %12.2f   %s" % (shape, summary["median_tokens_per_s"][shape], every))
    cached = [r[s]["cached_prompt_tokens"] for r in rounds for s in SHAPES[1:]]
    print("server prompt tokens found in the prefix cache per measurement: %s" % cached)
    for shape, ratio in summary["ratio_vs_bench"].items():
        verdict = "yes" if summary["ratio_at_least_0_9"][shape] else "NO"
        print("%s / bench = %.3f   (>= %.1f: %s)" % (shape, ratio, GOOD_RATIO, verdict))


# ---------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(
        description="sprout serve's tokens/s against sprout bench's on one workload.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--sprout", default="target/release/sprout", help="the sprout binary")
    p.add_argument("--model", default=None,
                   help="--model for both commands; none: sprout's default model")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of bench, server n=8 and server 8x1, in turn")
    p.add_argument("-n", type=int, default=8, help="samples of the prompt")
    p.add_argument("--prompt-tokens", type=int, default=128, help="tokens in the prompt")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per sample")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling seed (the 8x1 requests use seed .. seed+n-1)")
    p.add_argument("--reuse-prompt", action="store_true",
                   help="send the bench's exact prompt every time (the server then finds "
                        "most of it in its prefix cache) rather than one it has not seen")
    p.add_argument("--server-log", default=None, help="write the server's stderr here")
    p.add_argument("--start-timeout-s", type=float, default=600,
                   help="how long the server may take to load the model")
    p.add_argument("--request-timeout-s", type=float, default=1800,
                   help="socket timeout of each request")
    p.add_argument("--bench-timeout-s", type=float, default=3600,
                   help="how long one bench run may take")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write every round's figures and the summary here as JSON")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="engine options for both bench and serve, e.g. --backend vulkan "
                        "--kv-memory 256MiB; must come last")
    args = p.parse_args()
    if min(args.rounds, args.n, args.prompt_tokens, args.max_tokens) < 1:
        p.error("--rounds, -n, --prompt-tokens and --max-tokens must be at least 1")
    return args


def main():
    args = parse_args()
    command = [args.sprout, "serve", "--port", "0"] + model_args(args.model) + args.extra
    server = Server(command, args.server_log, args.start_timeout_s)
    print("started %s at %s" % (" ".join(command), server.url), flush=True)
    host = urllib.parse.urlsplit(server.url).hostname
    port = urllib.parse.urlsplit(server.url).port
    rounds = []
    try:
        ids, prompt_source = source_ids(host, port, args)
        measurement = 0
        for i in range(1, args.rounds + 1):
            round_ = {"bench": run_bench(args)}
            for shape in SHAPES[1:]:
                # The bench computes its prompt in every round (a new engine each time);
                # a prompt the server has not seen (the window moved on by one token:
                # no cached block matches) makes it compute its prompt too.
                measurement += 1
                start = 0 if args.reuse_prompt else measurement
                prompt = prompt_window(ids, start, args.prompt_tokens)
                round_[shape] = run_server_shape(host, port, args, prompt, shape)
                round_[shape]["prompt_start"] = start
            rounds.append(round_)
            print_round(i, args.rounds, round_)
    finally:
        code = server.stop()
    summary = summarize(rounds)
    summary["server_exit_code"] = code
    print_summary(args, prompt_source, rounds, summary)
    print("server exit code on SIGTERM: %s" % code)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "prompt_source": prompt_source,
                       "source_token_ids": ids, "rounds": rounds, "summary": summary},
                      f, indent=1)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
