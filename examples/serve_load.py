#!/usr/bin/env python3
"""Load test of `sprout serve`: many clients at once, good and bad requests mixed.

What it measures and checks
---------------------------
`--clients` threads each loop, sending `POST /v1/completions` with n=4, max_tokens
drawn uniformly from 16..64, a short random prompt and a random seed, until
`--duration-s` has passed or `--max-requests` have been sent (whichever comes first;
requests already in flight are allowed to finish). Of all requests:

- 10% are deliberately bad, cycling through BAD_KINDS (malformed JSON, n=0, ...). Each
  must be refused with 400 (404 for an unknown model name) and OpenAI's error body
  `{"error": {"message", "type", "param", "code"}}`.
- 5% are streamed and dropped by the client (socket closed) right after the first data
  chunk: the server must abort them and free their KV blocks.
- the rest alternate between whole (non-streamed) and streamed requests. A whole
  response must carry exactly n choices (indexes 0..n-1); a stream must carry chunks
  for choice indexes 0..n-1, each ending with one finish_reason, a usage chunk and a
  final `data: [DONE]`. Every finish_reason must be "stop" or "length".

After the clients stop, KV blocks in use are polled until they are back to 0
(`--kv-timeout-s`): `GET /metrics`' `sprout:kv_blocks_in_use` (or, lacking it,
`vllm:kv_cache_usage_perc`), or `GET /health`'s `kv_blocks_in_use` where the server
has no /metrics route. From /metrics it also reports the server's generated tokens,
preemptions and samples finished with reason "abort".

It prints requests sent by kind, good requests completed, requests/s and generated
tokens/s (both over the wall time from the first send to the last response), time to
first token (streamed good requests: send -> first data chunk carrying a choice) and
end-to-end latency (p50/p99), and failures by kind. The exit code is 1 when any check
failed (wrong choices, a bad request not refused properly, a 5xx, a connection error or
timeout, KV blocks not freed, or with --start the server not exiting 0 on SIGTERM).

How to run
----------
Against a server already running:

    python3 examples/serve_load.py --url http://127.0.0.1:8000

Or let the script start one (`sprout serve --port 0`) and stop it with SIGTERM:

    python3 examples/serve_load.py --start --sprout target/release/sprout \\
        --model tests/fixtures/tiny-llama --duration-s 20 --json /tmp/load.json

`--extra` (last on the line) passes further arguments to `sprout serve`, e.g.
`--extra --backend vulkan --kv-memory 256MiB`.

Only the Python standard library is used. Everything the server returns is treated as
untrusted data: it is parsed as JSON or plain text, never evaluated.
"""

import argparse
import http.client
import json
import math
import random
import re
import socket
import sys
import threading
import time
import urllib.parse

from sprout_server import Server

N_CHOICES = 4
MAX_TOKENS_RANGE = (16, 64)
FINISH_REASONS = {"stop", "length"}
WORDS = (
    "the a river mountain quiet engine story light garden winter city ocean book "
    "small bright ancient machine music morning window forest road question answer"
).split()

# `Authorization: Bearer KEY` with --api-key (the /v1 routes and /metrics check it).
AUTH = {}

# Each bad kind: (name, expected HTTP status). The bodies are built in bad_body().
BAD_KINDS = [
    ("malformed_json", 400),
    ("n_zero", 400),
    ("negative_temperature", 400),
    ("top_p_zero", 400),
    ("logprobs_99", 400),
    ("empty_prompt", 400),
    ("token_outside_vocab", 400),
    ("stream_options_without_stream", 400),
    ("unknown_model", 404),
    ("beyond_context", 400),
]


# ---------------------------------------------------------------------------------------
# HTTP helpers


def split_url(url):
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def get_json(host, port, path, timeout_s=10):
    """GET path; (status, parsed JSON or None, raw text)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers=AUTH)
        response = conn.getresponse()
        raw = response.read().decode("utf-8", "replace")
        try:
            return response.status, json.loads(raw), raw
        except ValueError:
            return response.status, None, raw
    finally:
        conn.close()


def parse_prometheus(text):
    """The samples of a Prometheus text page as (name, labels, value) tuples; lines that
    do not parse are skipped."""
    samples = []
    pattern = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
    for line in text.splitlines():
        m = pattern.match(line.strip())
        if line.startswith("#") or not m:
            continue
        labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                 m.group(2) or ""))
        try:
            samples.append((m.group(1), labels, float(m.group(3))))
        except ValueError:
            continue
    return samples


def metric_sum(samples, name, **labels):
    """The sum of metric `name` over the samples whose labels include `labels`; None if
    there is no such sample."""
    values = [v for n, l, v in samples
              if n == name and all(l.get(k) == want for k, want in labels.items())]
    return sum(values) if values else None


def get_metrics(host, port):
    """The samples of `GET /metrics`, or None when the server has no such route (or
    refuses it)."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers=AUTH)
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
    finally:
        conn.close()
    return parse_prometheus(text) if response.status == 200 else None


def read_kv_usage(host, port):
    """KV blocks in use, preferring `GET /metrics` (Prometheus text) and falling back to
    `GET /health`. Returns {"source", "blocks_in_use", "usage_perc"}; a field the
    source lacks is None."""
    samples = get_metrics(host, port)
    if samples is not None:
        blocks = metric_sum(samples, "sprout:kv_blocks_in_use")
        perc = metric_sum(samples, "vllm:kv_cache_usage_perc")
        if blocks is not None or perc is not None:
            return {"source": "/metrics", "blocks_in_use": blocks, "usage_perc": perc}
    _, health, _ = get_json(host, port, "/health")
    blocks = health.get("kv_blocks_in_use") if isinstance(health, dict) else None
    return {"source": "/health", "blocks_in_use": blocks, "usage_perc": None}


def kv_is_free(usage):
    if usage["blocks_in_use"] is not None:
        return usage["blocks_in_use"] == 0
    return usage["usage_perc"] == 0


def wait_for_kv_free(host, port, timeout_s):
    """Polls until no KV block is in use; (freed, seconds waited, last reading)."""
    start = time.monotonic()
    last = None
    while True:
        try:
            last = read_kv_usage(host, port)
            if kv_is_free(last):
                return True, time.monotonic() - start, last
        except (OSError, http.client.HTTPException) as e:
            last = {"source": None, "blocks_in_use": None, "usage_perc": None,
                    "error": repr(e)}
        if time.monotonic() - start > timeout_s:
            return False, time.monotonic() - start, last
        time.sleep(0.5)


def server_counters(host, port):
    """A few of the server's own counters from /metrics (empty without that route)."""
    samples = get_metrics(host, port)
    if samples is None:
        return {}
    return {
        "generation_tokens": metric_sum(samples, "vllm:generation_tokens_total"),
        "preemptions": metric_sum(samples, "vllm:num_preemptions_total"),
        "samples_aborted": metric_sum(samples, "vllm:request_success_total",
                                      finished_reason="abort"),
    }


def served_model_name(host, port):
    status, body, _ = get_json(host, port, "/v1/models")
    try:
        return body["data"][0]["id"] if status == 200 else None
    except (TypeError, KeyError, IndexError):
        return None


# ---------------------------------------------------------------------------------------
# Request bodies


def random_prompt(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))).capitalize()


def good_body(rng, model, stream):
    body = {
        "prompt": random_prompt(rng),
        "n": N_CHOICES,
        "max_tokens": rng.randint(*MAX_TOKENS_RANGE),
        "temperature": 1.0,
        "seed": rng.randrange(2**32),
    }
    if model:
        body["model"] = model
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def bad_body(kind, model):
    """The body of a bad request of `kind`, as bytes."""
    base = {"prompt": "Once upon a time", "n": N_CHOICES, "max_tokens": 16}
    if kind == "malformed_json":
        return b'{"prompt": "Once upon a time", "n": 4,'
    changes = {
        "n_zero": {"n": 0},
        "negative_temperature": {"temperature": -1},
        "top_p_zero": {"top_p": 0},
        "logprobs_99": {"logprobs": 99},
        "empty_prompt": {"prompt": ""},
        "token_outside_vocab": {"prompt": [99999999]},
        "stream_options_without_stream": {"stream_options": {"include_usage": True}},
        "unknown_model": {"model": (model or "model") + "-that-does-not-exist"},
        "beyond_context": {"max_tokens": 10**9},
    }[kind]
    return json.dumps({**base, **changes}).encode()


# ---------------------------------------------------------------------------------------
# One request of each kind. Each returns a result dict; "failure" is None when every
# check passed, otherwise a short name of what went wrong (counted by that name).


def post(host, port, body_bytes, timeout_s):
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    conn.request("POST", "/v1/completions", body=body_bytes,
                 headers={"Content-Type": "application/json", **AUTH})
    return conn, conn.getresponse()


def check_error_body(raw, status):
    """None when `raw` is OpenAI's error body with `code` equal to the status."""
    try:
        error = json.loads(raw)["error"]
    except (ValueError, TypeError, KeyError):
        return "error_body_not_openai_shape"
    if not isinstance(error, dict) or not {"message", "type", "param", "code"} <= error.keys():
        return "error_body_not_openai_shape"
    if error["code"] != status:
        return "error_code_differs_from_status"
    return None


def status_failure(status):
    return "status_5xx" if status >= 500 else "unexpected_status_%d" % status


def check_choices(choices, n):
    """None when `choices` are exactly indexes 0..n-1, each with a known finish_reason."""
    if not isinstance(choices, list) or len(choices) != n:
        return "wrong_choice_count"
    indexes = [c.get("index") if isinstance(c, dict) else None for c in choices]
    if sorted(i for i in indexes if isinstance(i, int)) != list(range(n)):
        return "wrong_choice_indexes"
    if any(c.get("finish_reason") not in FINISH_REASONS for c in choices):
        return "bad_finish_reason"
    return None


def check_usage(usage, n, max_tokens):
    """The completion tokens of a good request, or a failure name."""
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int):
        return None, "missing_usage"
    if not n <= tokens <= n * max_tokens:
        return tokens, "usage_out_of_range"
    return tokens, None


def run_whole(host, port, body, timeout_s):
    result = {"completion_tokens": None, "ttft_s": None}
    conn, response = post(host, port, json.dumps(body).encode(), timeout_s)
    try:
        raw = response.read()
    finally:
        conn.close()
    result["status"] = response.status
    if response.status != 200:
        result["failure"] = status_failure(response.status)
        return result
    try:
        reply = json.loads(raw)
    except ValueError:
        result["failure"] = "response_not_json"
        return result
    if not isinstance(reply, dict):
        result["failure"] = "response_not_object"
        return result
    failure = check_choices(reply.get("choices"), body["n"])
    tokens, usage_failure = check_usage(reply.get("usage"), body["n"], body["max_tokens"])
    result["completion_tokens"] = tokens
    result["failure"] = failure or usage_failure
    return result


def sse_events(response):
    """The `data:` payloads of a server-sent event stream, as strings."""
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data:"):
            yield line[len("data:"):].strip()


def run_stream(host, port, body, timeout_s, sent_at, disconnect):
    """A streamed request; with `disconnect`, the socket is closed after the first data
    chunk (the server should abort the request)."""
    result = {"completion_tokens": None, "ttft_s": None}
    conn, response = post(host, port, json.dumps(body).encode(), timeout_s)
    result["status"] = response.status
    try:
        if response.status != 200:
            response.read()
            result["failure"] = status_failure(response.status)
            return result
        result["failure"] = read_stream(response, body, sent_at, disconnect, result, conn)
        return result
    finally:
        response.close()
        conn.close()


def read_stream(response, body, sent_at, disconnect, result, conn):
    """Reads and checks a stream, filling result's ttft_s and completion_tokens; returns
    a failure name or None."""
    n = body["n"]
    finished = {}
    usage = None
    done = False
    for data in sse_events(response):
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            return "chunk_not_json"
        if not isinstance(chunk, dict):
            return "chunk_not_object"
        if "error" in chunk:
            return "error_chunk"
        choices = chunk.get("choices") or []
        if choices and result["ttft_s"] is None:
            result["ttft_s"] = time.monotonic() - sent_at
        if disconnect:
            # Leave mid-stream: shut the socket down (closing the file objects alone may
            # leave it open while the response still references it).
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except (OSError, AttributeError):
                pass
            return None
        for choice in choices:
            index = choice.get("index") if isinstance(choice, dict) else None
            if not isinstance(index, int) or not 0 <= index < n:
                return "wrong_choice_indexes"
            if index in finished:
                return "chunk_after_finish"
            reason = choice.get("finish_reason")
            if reason is not None:
                if reason not in FINISH_REASONS:
                    return "bad_finish_reason"
                finished[index] = reason
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
    if disconnect:
        return "stream_ended_before_first_chunk"
    if not done:
        return "missing_done"
    if len(finished) != n:
        return "wrong_choice_count"
    tokens, usage_failure = check_usage(usage, n, body["max_tokens"])
    result["completion_tokens"] = tokens
    return usage_failure


def run_bad(host, port, kind, expected_status, model, timeout_s):
    conn, response = post(host, port, bad_body(kind, model), timeout_s)
    try:
        raw = response.read()
    finally:
        conn.close()
    result = {"status": response.status, "completion_tokens": None, "ttft_s": None}
    if response.status >= 500:
        result["failure"] = "status_5xx"
    elif response.status != expected_status:
        result["failure"] = "bad_request_got_%d" % response.status
    else:
        result["failure"] = check_error_body(raw, response.status)
    return result


# ---------------------------------------------------------------------------------------
# The clients


class Plan:
    """Hands out request numbers until the deadline or the cap; the number decides the
    kind, so that the mix is exact whatever the timing."""

    def __init__(self, duration_s, max_requests):
        self.deadline = time.monotonic() + duration_s
        self.max_requests = max_requests
        self.next = 0
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            if time.monotonic() >= self.deadline or self.next >= self.max_requests:
                return None
            self.next += 1
            return self.next - 1


def kind_of(number):
    """10% bad (cycling through BAD_KINDS), 5% dropped streams, the rest half whole and
    half streamed."""
    if number % 10 == 0:
        return "bad:" + BAD_KINDS[(number // 10) % len(BAD_KINDS)][0]
    if number % 20 == 5:
        return "disconnect"
    return "stream" if number % 2 else "whole"


def one_request(host, port, number, rng, model, timeout_s, start):
    kind = kind_of(number)
    sent_at = time.monotonic()
    record = {"number": number, "kind": kind, "sent_s": sent_at - start}
    try:
        if kind.startswith("bad:"):
            name = kind[len("bad:"):]
            expected = dict(BAD_KINDS)[name]
            outcome = run_bad(host, port, name, expected, model, timeout_s)
        else:
            body = good_body(rng, model, stream=kind != "whole")
            record["max_tokens"] = body["max_tokens"]
            if kind == "whole":
                outcome = run_whole(host, port, body, timeout_s)
            else:
                outcome = run_stream(host, port, body, timeout_s, sent_at,
                                     disconnect=kind == "disconnect")
    except socket.timeout:
        outcome = {"status": None, "failure": "timeout"}
    except (OSError, http.client.HTTPException) as e:
        outcome = {"status": None, "failure": "connection_error", "error": repr(e)}
    except Exception as e:  # a reply this client did not expect: counted, not fatal
        outcome = {"status": None, "failure": "unexpected_reply", "error": repr(e)}
    record.update(outcome)
    record["latency_s"] = time.monotonic() - sent_at
    return record


def client_loop(client, plan, host, port, model, timeout_s, seed, start, results, lock):
    rng = random.Random(seed * 1000 + client)
    while True:
        number = plan.take()
        if number is None:
            return
        record = one_request(host, port, number, rng, model, timeout_s, start)
        record["client"] = client
        with lock:
            results.append(record)


def run_clients(args, host, port, model):
    """Runs the clients; (results, wall seconds from first send to last response)."""
    plan = Plan(args.duration_s, args.max_requests)
    results, lock = [], threading.Lock()
    start = time.monotonic()
    threads = [
        threading.Thread(
            target=client_loop,
            args=(c, plan, host, port, model, args.request_timeout_s, args.seed, start,
                  results, lock),
            daemon=True,
        )
        for c in range(args.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["number"]), time.monotonic() - start


# ---------------------------------------------------------------------------------------
# The summary


def percentile(values, p):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarize(results, wall_s):
    sent, failures = {}, {}
    for r in results:
        sent[r["kind"]] = sent.get(r["kind"], 0) + 1
        if r.get("failure"):
            key = "%s: %s" % (r["kind"], r["failure"])
            failures[key] = failures.get(key, 0) + 1
    good = [r for r in results if r["kind"] in ("whole", "stream") and not r.get("failure")]
    tokens = sum(r["completion_tokens"] or 0 for r in good)
    ttft = [r["ttft_s"] for r in good if r["kind"] == "stream" and r["ttft_s"] is not None]
    latency = [r["latency_s"] for r in good]
    return {
        "wall_s": wall_s,
        "requests_sent": len(results),
        "sent_by_kind": dict(sorted(sent.items())),
        "good_completed": len(good),
        "requests_per_s": len(good) / wall_s if wall_s else 0.0,
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / wall_s if wall_s else 0.0,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "latency_p50_s": percentile(latency, 50),
        "latency_p99_s": percentile(latency, 99),
        "status_5xx": sum(1 for r in results if (r.get("status") or 0) >= 500),
        "failures": dict(sorted(failures.items())),
    }


def seconds(x):
    return "-" if x is None else "%.3f s" % x


def fmt_count(x):
    return "-" if x is None else "%d" % x


def print_summary(s):
    print("requests sent: %d in %.1f s" % (s["requests_sent"], s["wall_s"]))
    for kind, count in s["sent_by_kind"].items():
        print("  %-38s %6d" % (kind, count))
    print("good requests completed:  %d" % s["good_completed"])
    print("requests/s:               %.2f" % s["requests_per_s"])
    print("generated tokens:         %d" % s["generated_tokens"])
    print("generated tokens/s:       %.1f" % s["generated_tokens_per_s"])
    print("time to first token:      p50 %s, p99 %s"
          % (seconds(s["ttft_p50_s"]), seconds(s["ttft_p99_s"])))
    print("end-to-end latency:       p50 %s, p99 %s"
          % (seconds(s["latency_p50_s"]), seconds(s["latency_p99_s"])))
    print("5xx responses:            %d" % s["status_5xx"])
    kv = s["kv"]
    print("KV blocks back to 0:      %s after %.1f s (via %s; last reading: %s blocks%s)"
          % ("yes" if kv["freed"] else "NO", kv["waited_s"], kv["reading"].get("source"),
             fmt_count(kv["reading"].get("blocks_in_use")),
             "" if kv["reading"].get("usage_perc") is None
             else ", usage %s" % kv["reading"]["usage_perc"]))
    counters = s.get("server_counters") or {}
    if counters:
        print("server's /metrics:        %s tokens generated, %s preemptions, %s samples "
              "aborted (disconnects sent: %d, n=%d each)"
              % (fmt_count(counters["generation_tokens"]), fmt_count(counters["preemptions"]),
                 fmt_count(counters["samples_aborted"]),
                 s["sent_by_kind"].get("disconnect", 0), N_CHOICES))
    if "server_exit_code" in s:
        print("server exit code:         %s" % s["server_exit_code"])
    if s.get("server_panics"):
        print("server panics:")
        for line in s["server_panics"]:
            print("  " + line)
    if s["failures"]:
        print("FAILURES:")
        for key, count in s["failures"].items():
            print("  %-50s %6d" % (key, count))
    else:
        print("failures:                 none")
    print("RESULT: %s" % ("PASS" if s["passed"] else "FAIL"))


# ---------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(
        description="Load-test a running `sprout serve` (or start one with --start).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--url", default="http://127.0.0.1:8000",
                   help="the server's base URL (ignored with --start)")
    p.add_argument("--start", action="store_true",
                   help="start `sprout serve --port 0` (the --sprout binary) and stop it "
                        "with SIGTERM at the end")
    p.add_argument("--sprout", default="target/release/sprout",
                   help="the sprout binary (with --start)")
    p.add_argument("--model", default=None,
                   help="--model for the server (with --start); none: sprout's default model")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further arguments for `sprout serve` (with --start); must come last")
    p.add_argument("--api-key", default=None,
                   help="send `Authorization: Bearer KEY` (with --start, the server gets it)")
    p.add_argument("--server-log", default=None,
                   help="write the server's stderr here (with --start)")
    p.add_argument("--start-timeout-s", type=float, default=600,
                   help="how long the server may take to load the model (with --start)")
    p.add_argument("--clients", type=int, default=64, help="concurrent clients")
    p.add_argument("--duration-s", type=float, default=180,
                   help="stop sending new requests after this long")
    p.add_argument("--max-requests", type=int, default=100000,
                   help="stop sending new requests after this many")
    p.add_argument("--request-timeout-s", type=float, default=900,
                   help="socket timeout per read; a request that waits longer fails")
    p.add_argument("--kv-timeout-s", type=float, default=60,
                   help="how long KV blocks in use may take to return to 0 at the end")
    p.add_argument("--seed", type=int, default=0, help="seeds the prompts, lengths and seeds")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write every request's result and the summary here as JSON")
    return p.parse_args()


def main():
    args = parse_args()
    if args.api_key:
        AUTH["Authorization"] = "Bearer " + args.api_key
    server = None
    if args.start:
        extra = args.extra + (["--api-key", args.api_key] if args.api_key else [])
        command = [args.sprout, "serve", "--port", "0"]
        command += ["--model", args.model] if args.model else []
        command += list(extra)
        server = Server(command, args.server_log,
                        args.start_timeout_s)
        shown = " ".join(server.command)
        if args.api_key:
            shown = shown.replace(args.api_key, "KEY")
        print("started %s at %s" % (shown, server.url), flush=True)
        url = server.url
    else:
        url = args.url
    host, port = split_url(url)
    try:
        model = served_model_name(host, port)
        print("model %s; %d clients for up to %.0f s or %d requests"
              % (model, args.clients, args.duration_s, args.max_requests), flush=True)
        results, wall_s = run_clients(args, host, port, model)
        freed, waited, reading = wait_for_kv_free(host, port, args.kv_timeout_s)
        summary = summarize(results, wall_s)
        summary["kv"] = {"freed": freed, "waited_s": waited, "reading": reading}
        summary["server_counters"] = server_counters(host, port)
    finally:
        if server:
            code = server.stop()
    passed = not summary["failures"] and summary["status_5xx"] == 0 and freed
    if server:
        summary["server_exit_code"] = code
        summary["server_panics"] = server.panics
        passed = passed and code == 0 and not server.panics
    summary["passed"] = passed
    print_summary(summary)
    if args.json:
        with open(args.json, "w") as f:
            shown_args = {**vars(args), "api_key": "(set)" if args.api_key else None}
            json.dump({"url": url, "args": shown_args, "summary": summary,
                       "requests": results}, f, indent=1)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
