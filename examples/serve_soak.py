#!/usr/bin/env python3
"""Soak test of `sprout serve`: hours (or a minute) of load while a trainer drives it.

What it does
------------
It starts `sprout serve --port 0 --model MODEL` (MODEL: a Hugging Face f32 directory;
`sprout export --out DIR` makes one from the default model), derives a second checkpoint
from it (soak_files.py: the final norm scaled) and, with --lora-a, a second adapter.
Then, for --duration-s:

- `--clients` threads (32) send requests: completions and chat (when the model has a
  chat template), half streamed, n from 1 to 4, prompts short, medium and long, max_tokens
  up to --max-tokens, temperature 1, `return_token_ids`; with adapters a quarter name the
  adapter as `model`. One request in ten is a bad one (serve_load.BAD_KINDS), one in
  twenty a stream the client drops after its first chunk. A 503 is retried after its
  Retry-After.
- a trainer thread: every --update-every-s a weight update (`POST /update_weights`,
  alternating the two checkpoints, versions 1, 2, ...) and, with adapters, an in-place
  adapter load (`POST /v1/load_lora_adapter`, alternating the two); between them, every
  --action-every-s, the next of: `/pause` in each mode (keep, wait, abort) then
  `/resume`; `/abort_requests` naming requests in flight; `/sleep?level=1&mode=wait` then
  `/wake_up`; `/sleep?level=2&mode=abort` then `/wake_up?tags=weights`, an update (the
  weights were discarded) and `/wake_up`.
  With --cycle the trainer instead waits for half of --duration-s, then runs one fixed
  cycle back to back, --action-every-s apart: update, pause keep, sleep 1, abort, update,
  sleep 2, pause wait, pause abort (each update with its adapter load), so that a short
  run (CI's minute) sees every action; the load goes on until a quarter of --duration-s
  after the cycle, past --duration-s if the cycle is slow.
- a sampler thread: every second the server's RSS (/proc/PID/status VmRSS) and its
  reported device memory (`/health` gpu_memory_bytes and gpu_memory_allocated_bytes).

What it checks (exit 1 on any failure)
--------------------------------------
- every good request completed: n choices, each finishing stop or length, or abort with
  its tokens so far when the request was in flight during a `/pause?mode=abort` or a
  `/sleep?mode=abort`, or named by `/abort_requests`; token ids, log-probs and versions
  of equal lengths; the usage count equal to the tokens returned; sampling log-probs
  equal to the model's (at temperature 1 they are the same distribution);
- bad requests refused with 400/404 in OpenAI's error body; no 5xx, except a 503 with
  Retry-After while the server sleeps or is busy;
- every token was drawn by the weights version it records: a sample of the completions
  (--score-samples) is re-scored with `sprout score` (soak_rescore.py), segment by
  segment, and must match the server's log-probs bitwise. Adapter requests' tokens name
  the adapter's version, which a load and a weights update both put one up: the soak
  records the base checkpoint and adapter directory of each version, and scores each
  segment under them;
- KV blocks in use return to 0 at every quiet point: while paused (wait and abort), while
  asleep, and at the end;
- memory flat after warm-up: the median device memory and RSS of the last quarter of the
  run within --max-drift (5%) of the second quarter's (RSS: --max-rss-drift, by default
  the same), over the samples taken awake, outside an update and not within --settle-s
  of the end of either (a sleep frees the device memory, an update holds two sets of
  weights for a moment). With --cycle the two windows are the second quarter of
  --duration-s, before the cycle, and the quarter of --duration-s after it: memory before
  every action against memory after all of them. The device memory checked is
  `gpu_memory_allocated_bytes`, what live buffers take, in which a buffer that leaks
  shows exactly. `gpu_memory_bytes`, the allocator's reserved blocks, is reported beside
  it and not checked: the allocator packs the same buffers into its blocks differently
  after a wake or an update, which moves it by whole blocks with nothing leaked (10-30%
  of the default model's footprint on lavapipe within a minute; flat over an hour). On a
  software adapter (lavapipe) the reserved blocks are host memory in the server's RSS,
  so there RSS moves with them too: a short run there needs a looser --max-rss-drift;
- with the server started here: no panic, exit 0 on SIGTERM.

`--json PATH` writes the summary (requests, tokens, updates, pauses, aborts, sleeps,
memory samples); `--plot PATH.png` draws the memory curve when matplotlib is importable.

    python3 examples/serve_soak.py --sprout target/release/sprout \\
        --model tests/fixtures/tiny-llama --lora-a tests/fixtures/lora/tiny-llama \\
        --duration-s 60 --max-tokens 24 \\
        --extra --chat-template tests/fixtures/chat_templates/smollm2.jinja

Standard library only (matplotlib optional, for --plot).
"""

import argparse
import http.client
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time

import serve_load
import soak_files
import soak_memory
import soak_rescore
from serve_load import (AUTH, BAD_KINDS, WORDS, check_error_body, get_json, read_kv_usage,
                        run_bad, served_model_name, sse_events, split_url, wait_for_kv_free)
from sprout_server import Server

GOOD_FINISH = {"stop", "length"}
LORA_NAME = "soak-adapter"


# ---------------------------------------------------------------------------------------
# What the clients and the trainer share


class Soak:
    """The state the threads share, under one lock: the trainer's timeline (what is in
    force, when the server slept or aborted) and what the clients found."""

    def __init__(self, args, host, port, model, max_model_len):
        self.args, self.host, self.port = args, host, port
        self.model, self.max_model_len = model, max_model_len
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.deadline = self.start + args.duration_s
        self.chat = False
        self.lora = False
        # Weight updates and adapter loads: started and finished counts (a request that
        # sees no change start during its life ran under one base and one adapter).
        self.changes_started = 0
        self.changes_done = 0
        self.weights_version = 0
        self.weights = {0: args.model}      # version -> checkpoint directory
        self.lora_versions = {}             # adapter version -> {model, adapter} dirs
        self.lora_dir = None
        self.lora_loads = []                # {version, at}: each load, when it answered
        self.asleep_since = None            # set while a /sleep..wake cycle runs
        self.slept = False                  # from a /sleep's answer to the wake's
        self.settled_at = 0.0               # when the last sleep or change ended
        self.sleep_windows = []             # (start, end)
        self.abort_windows = []             # (start, end) of /pause?mode=abort..resume
                                            # and of /sleep?mode=abort..wake
        self.aborted_ids = set()            # ids named by /abort_requests
        self.in_flight = {}                 # request_id -> number (streams and wholes)
        self.results = []
        self.samples = []                   # for re-scoring
        self.failures = []                  # (kind, detail)
        self.counts = {}                    # named counters
        self.memory = []                    # sampler rows
        self.next_number = 0
        # With --cycle the load goes on past --duration-s until the cycle is done and a
        # quarter of --duration-s after it has passed.
        self.cycle_done = threading.Event()
        self.cycle_ended_at = None
        if not args.cycle:
            self.cycle_done.set()

    def now(self):
        return time.monotonic() - self.start

    def count(self, name, by=1):
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + by

    def fail(self, kind, detail):
        with self.lock:
            self.failures.append((kind, detail))

    def take(self):
        with self.lock:
            if time.monotonic() >= self.deadline and self.cycle_done.is_set():
                return None
            self.next_number += 1
            return self.next_number - 1

    def overlaps(self, windows, sent, ended):
        return any(start <= ended and sent <= (end if end is not None else ended)
                   for start, end in windows)


# ---------------------------------------------------------------------------------------
# HTTP


def request(soak, method, path, body=None, timeout_s=None):
    """(status, headers, raw bytes) of one request."""
    conn = http.client.HTTPConnection(soak.host, soak.port,
                                      timeout=timeout_s or soak.args.request_timeout_s)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **AUTH} if data is not None else AUTH
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def admin(soak, path, body=None, expect=200):
    """An admin call the trainer makes; a failure when it does not answer `expect`."""
    started = soak.now()
    try:
        status, _, raw = request(soak, "POST", path, body if body is not None else {})
    except (OSError, http.client.HTTPException) as e:
        soak.fail("admin", "%s: %r" % (path, e))
        return None
    if status != expect:
        soak.fail("admin", "%s answered %d: %s" % (path, status, raw[:300]))
        return None
    soak.count("admin_calls")
    try:
        reply = json.loads(raw)
    except ValueError:
        reply = raw.decode("utf-8", "replace")
    soak.count("admin_s_x1000", int((soak.now() - started) * 1000))
    return reply


# ---------------------------------------------------------------------------------------
# The clients


def prompt_words(rng, soak, max_tokens):
    """Short, medium or long, within the model's context (a word is at most ~8 tokens
    on the tiniest tokenizers)."""
    room = max(3, (soak.max_model_len - max_tokens - 16) // 8)
    if soak.args.max_prompt_words:
        room = min(room, soak.args.max_prompt_words)
    low, high = rng.choice([(3, 8), (20, 60), (120, 240)])
    count = min(rng.randint(low, high), room)
    return " ".join(rng.choice(WORDS) for _ in range(count)).capitalize()


def good_body(soak, rng, number, api, stream, use_lora):
    max_tokens = rng.randint(4, soak.args.max_tokens)
    text = prompt_words(rng, soak, max_tokens)
    body = {
        "model": LORA_NAME if use_lora else soak.model,
        "n": rng.randint(1, 4),
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": rng.randrange(2**32),
        "return_token_ids": True,
        "request_id": "soak-%d" % number,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


class Outcome:
    """What one good request returned: its choices by index, each with its tokens,
    log-probs, versions and finish reason."""

    def __init__(self):
        self.prompt = None
        self.choices = {}
        self.usage = None

    def choice(self, index):
        return self.choices.setdefault(index, {"token_ids": [], "prompt": None,
                                               "finish_reason": None, "sprout": None})

    def add(self, c, top_prompt):
        """Adds one choice (a whole one, or one chunk's)."""
        mine = self.choice(c.get("index"))
        mine["token_ids"] += c.get("token_ids") or []
        if c.get("prompt_token_ids") is not None:
            mine["prompt"] = c["prompt_token_ids"]
        elif top_prompt is not None and mine["prompt"] is None:
            mine["prompt"] = top_prompt
        if c.get("finish_reason") is not None:
            if mine["finish_reason"] is not None:
                raise ValueError("choice %s finished twice" % c.get("index"))
            mine["finish_reason"] = c["finish_reason"]
            mine["sprout"] = c.get("sprout")


def read_whole(raw):
    body = json.loads(raw)
    outcome = Outcome()
    top = body.get("prompt_token_ids")
    for c in body.get("choices") or []:
        outcome.add(c, top)
    outcome.usage = body.get("usage")
    return outcome


def json_chunks(response):
    """The stream's chunks, parsed; a ValueError when it ends without `data: [DONE]`."""
    for data in sse_events(response):
        if data == "[DONE]":
            return
        yield json.loads(data)
    raise ValueError("the stream ended without data: [DONE]")


def read_streamed(response, disconnect, conn):
    """The outcome of a stream, or None after a deliberate disconnect."""
    outcome = Outcome()
    top = None
    for chunk in json_chunks(response):
        if "error" in chunk:
            raise ValueError("error chunk: %s" % str(chunk["error"])[:200])
        top = chunk.get("prompt_token_ids", top)
        for c in chunk.get("choices") or []:
            outcome.add(c, top)
        if chunk.get("usage") is not None:
            outcome.usage = chunk["usage"]
        if disconnect and outcome.choices:
            conn.sock.shutdown(socket.SHUT_RDWR)
            return None
    return outcome


def check_outcome(soak, number, body, outcome, sent, ended):
    """Checks one good request's outcome; keeps its samples for re-scoring."""
    n = body["n"]
    if sorted(outcome.choices) != list(range(n)):
        return "choices %s, not 0..%d" % (sorted(outcome.choices), n - 1)
    with soak.lock:
        may_abort = (body["request_id"] in soak.aborted_ids
                     or soak.overlaps(soak.abort_windows, sent, ended))
    tokens = 0
    for index, c in sorted(outcome.choices.items()):
        reason = c["finish_reason"]
        if reason == "abort":
            if not may_abort:
                return "choice %d ended abort, but nothing aborted it" % index
            soak.count("samples_aborted")
        elif reason not in GOOD_FINISH:
            return "choice %d finished %r" % (index, reason)
        s = c["sprout"]
        if not isinstance(s, dict):
            return "choice %d has no sprout fields" % index
        ids, logprobs = c["token_ids"], s.get("logprobs") or []
        versions = s.get("weights_versions") or [s.get("weights_version")] * len(ids)
        if not (len(ids) == len(logprobs) == len(s.get("sampling_logprobs") or [])
                == len(versions)):
            return "choice %d: %d token ids, %d log-probs, %d sampling log-probs, %d versions" % (
                index, len(ids), len(logprobs), len(s.get("sampling_logprobs") or []),
                len(versions))
        if not soak_rescore.bitwise_equal(logprobs, s["sampling_logprobs"]):
            return "choice %d: sampling log-probs differ from the model's at temperature 1" % index
        if any(b < a for a, b in zip(versions, versions[1:])):
            return "choice %d: versions go down: %s" % (index, versions)
        if c["prompt"] is None:
            return "choice %d: no prompt_token_ids" % index
        tokens += len(ids)
        keep_sample(soak, number, body, c, ids, logprobs, versions, sent)
    if not isinstance(outcome.usage, dict) or outcome.usage.get("completion_tokens") != tokens:
        return "usage %s, but %d tokens returned" % (outcome.usage, tokens)
    soak.count("tokens", tokens)
    soak.count("samples")
    return None


def keep_sample(soak, number, body, c, ids, logprobs, versions, sent):
    """Keeps a sample for re-scoring; `lora` says whether it ran with the adapter (its
    versions are then the adapter's); `sent` when its request was."""
    sample = {"number": number, "prompt_token_ids": c["prompt"], "token_ids": ids,
              "logprobs": logprobs, "versions": versions, "lora": body["model"] == LORA_NAME,
              "sent": sent}
    with soak.lock:
        soak.samples.append(sample)


def send_good(soak, number, rng, kind):
    api = "chat" if soak.chat and number % 3 == 0 else "completions"
    stream = kind in ("stream", "disconnect")
    use_lora = soak.lora and kind != "disconnect" and rng.random() < 0.25
    body = good_body(soak, rng, number, api, stream, use_lora)
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    attempts = 0
    while True:
        attempts += 1
        with soak.lock:
            soak.in_flight[body["request_id"]] = number
        sent = soak.now()
        wire = {k: v for k, v in body.items() if not k.startswith("_")}
        conn = http.client.HTTPConnection(soak.host, soak.port,
                                          timeout=soak.args.request_timeout_s)
        try:
            conn.request("POST", path, body=json.dumps(wire).encode(),
                         headers={"Content-Type": "application/json", **AUTH})
            response = conn.getresponse()
            if response.status == 503:
                raw = response.read()
                failure = check_503(soak, response, raw, sent)
                if failure:
                    return "%s %s" % (api, kind), failure
                if soak.now() > soak.args.duration_s + soak.args.grace_s:
                    return "%s %s" % (api, kind), "503s past the end of the run"
                time.sleep(min(float(response.headers["Retry-After"]), 2.0))
                continue
            if response.status != 200:
                raw = response.read()
                return "%s %s" % (api, kind), "status %d: %s" % (response.status, raw[:300])
            if stream:
                outcome = read_streamed(response, kind == "disconnect", conn)
            else:
                outcome = read_whole(response.read())
        finally:
            conn.close()
            with soak.lock:
                soak.in_flight.pop(body["request_id"], None)
        if outcome is None:
            return "disconnect", None
        return "%s %s" % (api, kind), check_outcome(soak, number, body, outcome, sent,
                                                    soak.now())


def check_503(soak, response, raw, sent):
    """None for a documented 503 (asleep, or busy) with Retry-After."""
    soak.count("status_503")
    if response.headers.get("Retry-After") is None:
        return "503 without Retry-After: %s" % raw[:200]
    if check_error_body(raw, 503):
        return "503 body: %s" % raw[:200]
    message = json.loads(raw)["error"]["message"]
    with soak.lock:
        asleep = soak.overlaps(soak.sleep_windows, sent, soak.now())
    if "busy" in message or asleep:
        return None
    return "503 while awake and not busy: %s" % message


def one_request(soak, number, rng):
    if number % 10 == 0:
        name, expected = BAD_KINDS[(number // 10) % len(BAD_KINDS)]
        kind = "bad:" + name
        try:
            out = run_bad(soak.host, soak.port, name, expected, soak.model,
                          soak.args.request_timeout_s)
        except (OSError, http.client.HTTPException) as e:
            return kind, "connection error: %r" % e
        failure = out.get("failure")
        if failure and out.get("status") == 503:
            # Asleep: a bad request may be checked only after the sleep check.
            failure = None if out_is_sleep_503(soak) else failure
        return kind, failure
    kind = "disconnect" if number % 20 == 5 else ("stream" if number % 2 else "whole")
    try:
        return send_good(soak, number, rng, kind)
    except socket.timeout:
        return kind, "timeout (no answer within --request-timeout-s)"
    except (OSError, http.client.HTTPException) as e:
        return kind, "connection error: %r" % e
    except (ValueError, KeyError, TypeError) as e:
        return kind, "unexpected reply: %r" % e


def out_is_sleep_503(soak):
    with soak.lock:
        return soak.asleep_since is not None


def client_loop(soak, client):
    rng = random.Random(soak.args.seed * 1000 + client)
    while True:
        number = soak.take()
        if number is None:
            return
        kind, failure = one_request(soak, number, rng)
        soak.count("requests")
        soak.count("sent: " + kind)
        if failure:
            soak.fail(kind, "request %d: %s" % (number, failure))
        elif not kind.startswith("bad:") and kind != "disconnect":
            soak.count("good_completed")


# ---------------------------------------------------------------------------------------
# The trainer


def kv_quiet(soak, where):
    """KV blocks in use must come back to 0 (a quiet point)."""
    freed, waited, reading = wait_for_kv_free(soak.host, soak.port, soak.args.kv_timeout_s)
    soak.count("quiet_points")
    if not freed:
        soak.fail("kv", "%s: %s blocks still in use after %.1f s"
                  % (where, reading.get("blocks_in_use"), waited))


def update(soak):
    """Puts the other checkpoint in force, one version up."""
    with soak.lock:
        version = soak.weights_version + 1
        directory = soak.args.model if version % 2 == 0 else soak.derived
        soak.changes_started += 1
    reply = admin(soak, "/update_weights", {"weight_dir": directory, "weights_version": version})
    with soak.lock:
        if isinstance(reply, dict) and reply.get("weights_version") == version:
            soak.weights[version] = directory
            soak.weights_version = version
            soak.counts["updates"] = soak.counts.get("updates", 0) + 1
            if "lora_version" in reply:  # the adapter relabelled over the new base
                soak.lora_versions[reply["lora_version"]] = {"model": directory,
                                                             "adapter": soak.lora_dir}
        soak.changes_done += 1
        soak.settled_at = soak.now()


def load_adapter(soak, first=False):
    """Loads the other adapter in place (the first load: adapter A)."""
    with soak.lock:
        directory = soak.args.lora_a if first or soak.lora_dir != soak.args.lora_a \
            else soak.lora_b
        soak.changes_started += 1
    body = {"lora_name": LORA_NAME, "lora_path": directory, "load_inplace": not first}
    reply = admin(soak, "/v1/load_lora_adapter", body)
    status, health, _ = get_json(soak.host, soak.port, "/health")
    with soak.lock:
        loaded = (health or {}).get("lora_adapter") or {}
        if reply is not None and loaded.get("name") == LORA_NAME:
            soak.lora_versions[loaded.get("version")] = {
                "model": soak.weights[soak.weights_version], "adapter": directory}
            # Requests sent before this may have computed their prompts' keys and values
            # under the contents before it.
            soak.lora_loads.append({"version": loaded.get("version"), "at": soak.now()})
            soak.lora_dir = directory
            soak.counts["adapter_loads"] = soak.counts.get("adapter_loads", 0) + 1
        elif reply is not None:
            soak.failures.append(("admin", "/health names adapter %s after the load" % loaded))
        soak.changes_done += 1
        soak.settled_at = soak.now()


def pause(soak, mode):
    started = soak.now()
    if mode == "abort":
        with soak.lock:
            soak.abort_windows.append((started, None))
    if admin(soak, "/pause?mode=%s" % mode) is not None:
        soak.count("pauses_" + mode)
        if mode != "keep":
            kv_quiet(soak, "paused (%s)" % mode)
    time.sleep(0.5)
    admin(soak, "/resume")
    if mode == "abort":
        with soak.lock:
            soak.abort_windows[-1] = (started, soak.now())


def abort_some(soak):
    with soak.lock:
        ids = sorted(soak.in_flight)[:4]
        soak.aborted_ids.update(ids)
    if ids:
        reply = admin(soak, "/abort_requests", {"request_ids": ids})
        if isinstance(reply, dict):
            soak.count("aborted_prompts", reply.get("aborted_prompts") or 0)
            soak.count("abort_calls")


def sleep_cycle(soak, level):
    """Level 1 waits for the requests in flight; level 2 aborts them (a trainer that
    wants the memory now)."""
    mode = "wait" if level == 1 else "abort"
    with soak.lock:
        soak.asleep_since = soak.now()
        soak.sleep_windows.append((soak.asleep_since, None))
        if mode == "abort":
            soak.abort_windows.append((soak.asleep_since, None))
    slept = admin(soak, "/sleep?level=%d&mode=%s" % (level, mode)) is not None
    # Until it answers, the server drains its requests, awake (its memory is as ever).
    with soak.lock:
        soak.slept = True
    if slept:
        soak.count("sleeps_level%d" % level)
        kv_quiet(soak, "asleep (level %d)" % level)
    time.sleep(0.5)
    if level == 2:
        # The weights were discarded: wake them, bring new ones, then the KV cache.
        admin(soak, "/wake_up?tags=weights")
        update(soak)
    admin(soak, "/wake_up")
    with soak.lock:
        soak.sleep_windows[-1] = (soak.sleep_windows[-1][0], soak.now())
        if mode == "abort":
            soak.abort_windows[-1] = (soak.abort_windows[-1][0], soak.now())
        soak.asleep_since = None
        soak.slept = False
        soak.settled_at = soak.now()


ACTIONS = ["pause_keep", "abort_requests", "pause_wait", "sleep1", "pause_abort", "sleep2"]
# --cycle: every action once in one fixed order, the updates among them, so that a short
# run (CI's minute on two shared cores) sees each of them.
CYCLE = ["update", "pause_keep", "sleep1", "abort_requests", "update", "sleep2",
         "pause_wait", "pause_abort"]


def act(soak, action):
    if action == "update":
        update(soak)
        if soak.lora:
            load_adapter(soak)
    elif action.startswith("pause_"):
        pause(soak, action[len("pause_"):])
    elif action == "abort_requests":
        abort_some(soak)
    else:
        sleep_cycle(soak, int(action[-1]))


def trainer(soak):
    args = soak.args
    if args.cycle:
        # Load alone for the first half of the duration (warm-up, then the memory's
        # baseline), the cycle, then load alone for a quarter of the duration (the
        # memory's end): however long the actions take on a slow machine, both windows
        # of the drift hold settled samples.
        while soak.now() < args.duration_s / 2:
            time.sleep(0.1)
        try:
            for action in CYCLE:
                time.sleep(args.action_every_s)
                act(soak, action)
        finally:
            with soak.lock:
                soak.cycle_ended_at = soak.now()
                end = max(args.duration_s, soak.cycle_ended_at + args.duration_s / 4)
                soak.deadline = soak.start + end
            soak.cycle_done.set()
        return
    next_update = args.update_every_s
    next_action = args.action_every_s
    step = 0
    while soak.now() < args.duration_s:
        if soak.now() >= next_update:
            act(soak, "update")
            next_update = soak.now() + args.update_every_s
        elif soak.now() >= next_action:
            act(soak, ACTIONS[step % len(ACTIONS)])
            step += 1
            next_action = soak.now() + args.action_every_s
        else:
            time.sleep(0.1)


# ---------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description="Soak-test `sprout serve` (see the module docs).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sprout", default="target/release/sprout")
    p.add_argument("--model", required=True,
                   help="a Hugging Face f32 directory (`sprout export --out DIR`)")
    p.add_argument("--lora-a", default=None, help="a PEFT adapter directory for the model")
    p.add_argument("--lora-b", default=None,
                   help="the second adapter (default: --lora-a with its lora_B doubled)")
    p.add_argument("--duration-s", type=float, default=60)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--max-prompt-words", type=int, default=None,
                   help="cap the prompts (short 3-8, medium 20-60, long 120-240 words) at "
                        "this many words (default: what the model's context allows)")
    p.add_argument("--update-every-s", type=float, default=None,
                   help="seconds between weight updates (default 10; not with --cycle)")
    p.add_argument("--cycle", action="store_true",
                   help="run the trainer's actions back to back in one fixed cycle, "
                        "--action-every-s apart, the updates among them (two a cycle): "
                        "a short run sees every action")
    p.add_argument("--action-every-s", type=float, default=4)
    p.add_argument("--score-samples", type=int, default=200,
                   help="how many samples to re-score with `sprout score`")
    p.add_argument("--max-drift", type=float, default=0.05,
                   help="the most the device memory allocated may drift")
    p.add_argument("--max-rss-drift", type=float, default=None,
                   help="the most RSS may drift (default: --max-drift)")
    p.add_argument("--settle-s", type=float, default=3,
                   help="memory samples this soon after a sleep or a change ends are "
                        "left out of the drift")
    p.add_argument("--request-timeout-s", type=float, default=300)
    p.add_argument("--kv-timeout-s", type=float, default=30)
    p.add_argument("--grace-s", type=float, default=120,
                   help="how long after the end requests may still be retried")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None,
                   help="where the derived checkpoint and adapter go (default: a temporary "
                        "directory, removed at the end)")
    p.add_argument("--server-log", default=None)
    p.add_argument("--start-timeout-s", type=float, default=600)
    p.add_argument("--json", metavar="PATH", default=None)
    p.add_argument("--plot", metavar="PATH", default=None)
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further arguments for `sprout serve` (and, for --backend and "
                        "--quantize, `sprout score`); must come last")
    args = p.parse_args()
    if args.max_rss_drift is None:
        args.max_rss_drift = args.max_drift
    if args.max_prompt_words is not None and args.max_prompt_words < 3:
        p.error("--max-prompt-words must be at least 3 (the shortest prompts' length)")
    if args.cycle and args.update_every_s is not None:
        p.error("--update-every-s does not apply with --cycle (its updates are in the cycle)")
    if args.update_every_s is None and not args.cycle:
        args.update_every_s = 10.0
    return args


def score_flags(extra):
    """The arguments of `sprout serve` that `sprout score` must share to compute alike."""
    flags = []
    for name in ("--backend", "--quantize"):
        if name in extra and extra.index(name) + 1 < len(extra):
            flags += [name, extra[extra.index(name) + 1]]
    return flags


def probe_chat(soak):
    status, _, _ = request(soak, "POST", "/v1/chat/completions", {
        "model": soak.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    return status == 200


def run(args, workdir):
    args.model = os.path.abspath(args.model)
    derived = soak_files.derive_checkpoint(args.model, os.path.join(workdir, "checkpoint-b"))
    lora_b = None
    if args.lora_a:
        args.lora_a = os.path.abspath(args.lora_a)
        lora_b = os.path.abspath(args.lora_b) if args.lora_b else soak_files.derive_adapter(
            args.lora_a, os.path.join(workdir, "adapter-b"))
    command = [args.sprout, "serve", "--port", "0", "--model", args.model] + list(args.extra)
    server = Server(command, args.server_log, args.start_timeout_s)
    print("started %s at %s" % (" ".join(command), server.url), flush=True)
    host, port = split_url(server.url)
    stop = threading.Event()
    try:
        _, models, _ = get_json(host, port, "/v1/models")
        model = served_model_name(host, port)
        soak = Soak(args, host, port, model, models["data"][0].get("max_model_len") or 2048)
        soak.derived, soak.lora_b = derived, lora_b
        soak.chat = probe_chat(soak)
        if args.lora_a:
            load_adapter(soak, first=True)
            soak.lora = soak.lora_dir is not None
        print("model %s (chat: %s, adapters: %s); %d clients for %.0f s"
              % (model, soak.chat, soak.lora, args.clients, args.duration_s), flush=True)
        soak.start = time.monotonic()
        soak.deadline = soak.start + args.duration_s
        memory = threading.Thread(target=soak_memory.sampler, args=(soak, server.pid, stop),
                                  daemon=True)
        memory.start()
        clients = [threading.Thread(target=client_loop, args=(soak, c), daemon=True)
                   for c in range(args.clients)]
        coach = threading.Thread(target=trainer, args=(soak,), daemon=True)
        for t in clients + [coach]:
            t.start()
        coach.join()
        for t in clients:
            t.join()
        wall_s = soak.now()
        kv_quiet(soak, "the end")
        stop.set()
        memory.join()
        counters = serve_load.server_counters(host, port)
    finally:
        stop.set()
        code = server.stop()
    rng = random.Random(args.seed)
    chosen = rng.sample(soak.samples, min(args.score_samples, len(soak.samples)))
    checkpoints = {"weights": soak.weights, "lora": soak.lora_versions,
                   "lora_loads": soak.lora_loads, "all": [args.model, derived]}
    scored = soak_rescore.rescore(args.sprout, score_flags(args.extra), chosen, checkpoints,
                                  workdir)
    summary = summarize(soak, wall_s, counters, scored, code, server.panics)
    # What a failed re-scoring needs to be diagnosed afterwards: the samples scored and
    # the trainer's timeline.
    summary["scored_samples"] = chosen
    summary["timeline"] = {"weights": soak.weights, "lora_versions": soak.lora_versions,
                           "lora_loads": soak.lora_loads,
                           "sleep_windows": soak.sleep_windows,
                           "abort_windows": soak.abort_windows}
    return summary


def summarize(soak, wall_s, counters, scored, code, panics):
    args = soak.args
    failures = {}
    for kind, detail in soak.failures:
        failures.setdefault(kind, []).append(detail)
    for detail in scored["failures"]:
        failures.setdefault("rescore", []).append(detail)
    if args.cycle:
        windows = ((args.duration_s / 4, args.duration_s / 2), (soak.cycle_ended_at, None))
    else:
        windows = ((wall_s / 4, wall_s / 2), (3 * wall_s / 4, None))
    memory = {field: soak_memory.drift(soak.memory, field, windows)
              for field in ("rss_bytes", "gpu_memory_bytes", "gpu_memory_allocated_bytes")}
    memory_windows = [list(windows[0]), [windows[1][0], wall_s]]
    for field, d in memory.items():
        if field == "gpu_memory_bytes":
            continue  # reported, not checked (see the module docs)
        if d["drift"] is None:
            failures.setdefault("memory", []).append("%s: too few samples" % field)
        elif d["drift"] > (args.max_rss_drift if field == "rss_bytes" else args.max_drift):
            failures.setdefault("memory", []).append(
                "%s drifted %.1f%% (%.0f -> %.0f)" % (field, 100 * d["drift"],
                                                      d["second_quarter"], d["last_quarter"]))
    if scored["segments"] == 0:
        failures.setdefault("rescore", []).append("no segment was re-scored")
    if code != 0:
        failures.setdefault("server", []).append("exit code %s on SIGTERM" % code)
    for line in panics:
        failures.setdefault("server", []).append(line)
    counts = dict(sorted(soak.counts.items()))
    return {
        "wall_s": wall_s,
        "requests": counts.get("requests", 0),
        "good_completed": counts.get("good_completed", 0),
        "tokens": counts.get("tokens", 0),
        "updates": counts.get("updates", 0),
        "adapter_loads": counts.get("adapter_loads", 0),
        "pauses": {m: counts.get("pauses_" + m, 0) for m in ("keep", "wait", "abort")},
        "aborts": {"abort_calls": counts.get("abort_calls", 0),
                   "aborted_prompts": counts.get("aborted_prompts", 0),
                   "samples_ended_abort": counts.get("samples_aborted", 0),
                   "disconnects": counts.get("sent: disconnect", 0)},
        "sleeps": {"level1": counts.get("sleeps_level1", 0),
                   "level2": counts.get("sleeps_level2", 0)},
        "status_503": counts.get("status_503", 0),
        "quiet_points": counts.get("quiet_points", 0),
        "counts": counts,
        "server_counters": counters,
        "rescore": {k: v for k, v in scored.items() if k != "failures"},
        "samples_kept": len(soak.samples),
        "memory": memory,
        "memory_windows_s": memory_windows,
        "memory_samples": soak.memory,
        "server_exit_code": code,
        "failures": failures,
        "passed": not failures,
    }


def print_summary(s):
    print("requests: %d in %.1f s (%d good completed, %d tokens)"
          % (s["requests"], s["wall_s"], s["good_completed"], s["tokens"]))
    for key, value in s["counts"].items():
        if key.startswith("sent: "):
            print("  %-44s %6d" % (key[len("sent: "):], value))
    print("updates: %d, adapter loads: %d" % (s["updates"], s["adapter_loads"]))
    print("pauses: %s" % s["pauses"])
    print("aborts: %s" % s["aborts"])
    print("sleeps: %s" % s["sleeps"])
    print("503s (documented, retried): %d; KV quiet points checked: %d"
          % (s["status_503"], s["quiet_points"]))
    r = s["rescore"]
    print("re-scored: %d samples of %d kept (%d spanning an update, %d with the adapter, "
          "%d of those across an in-place load or sent before one, not scored): "
          "%d segments, %d tokens, %d mismatched; under the other checkpoint %d of %d "
          "segments matched"
          % (r["samples"], s["samples_kept"], r["spanning_samples"], r["adapter_samples"],
             r["adapter_samples_across_a_load"],
             r["segments"], r["tokens"], r["mismatched_segments"],
             r["other_checkpoint_matches"], r["other_checkpoint_segments"]))
    (a, b), (c, e) = s["memory_windows_s"]
    print("memory compared between %.1f-%.1f s and %.1f-%.1f s" % (a, b, c, e))
    for field, d in s["memory"].items():
        print("%-26s first window %s, second window %s, drift %s%s"
              % (field, d["second_quarter"], d["last_quarter"],
                 "-" if d["drift"] is None else "%.2f%%" % (100 * d["drift"]),
                 " (reported, not checked)" if field == "gpu_memory_bytes" else ""))
    print("server exit code: %s" % s["server_exit_code"])
    if s["failures"]:
        print("FAILURES:")
        for kind, details in s["failures"].items():
            print("  %s: %d" % (kind, len(details)))
            for d in details[:5]:
                print("    " + d)
    print("RESULT: %s" % ("PASS" if s["passed"] else "FAIL"))


def main():
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="sprout-soak-")
    try:
        summary = run(args, workdir)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(summary)
    if args.plot:
        soak_memory.plot(summary["memory_samples"], args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary}, f, indent=1)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
