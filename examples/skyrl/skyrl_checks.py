"""SkyRL's own HTTP client, `RemoteInferenceClient` (skyrl 0.3.0), driving sprout.

Every call below is one of the client's public methods, unchanged; only its constructor
arguments are ours. What each method sends (read from the installed package):

- `generate()`: `POST /inference/v1/generate {token_ids, sampling_params, model,
  cache_salt}` per prompt, reading `choices[0].token_ids`, `.finish_reason` and
  `.logprobs.content[].logprob`; then `POST /detokenize {model, tokens}` for the text.
- `sample()` (its Tinker API): `/inference/v1/generate` with `n`, `logprobs: 0`,
  `output_kind: 2` and `prompt_logprobs: k`, reading the top-level `prompt_logprobs`
  (a list, per prompt token, of `{token id: {logprob, ...}}` or null).
- `tokenize()` / `detokenize()`: `POST /tokenize {model, prompt, add_special_tokens}` ->
  `tokens`; `POST /detokenize {model, tokens}` -> `prompt`.
- `render_chat_completion()`: `POST /v1/chat/completions/render {model, messages}` ->
  `token_ids`; `chat_completion()` and `completion()`: the OpenAI routes, body as given.
- `pause(mode)` / `resume()`: `POST /pause?mode=keep|abort&clear_cache=false`,
  `POST /resume`; `reset_prefix_cache()`: `POST /reset_prefix_cache`.

The checks tie the routes together: a rollout's log-probs must come back bitwise from
`/v1/completions` with the same seed, from `prompt_logprobs` and from echo scoring; a
rollout paused in keep mode must finish as if never paused; one aborted must return a
prefix of the uninterrupted rollout, and resubmitting prompt + partial (greedy) must
complete it exactly. The pause checks run through both `generate()` and `completion()`.
"""

import asyncio
import json
import math
import time
import urllib.request

from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (
    PauseMode,
    RemoteInferenceClient,
)

from report import Failed, expect, shown

TEXT = "The quick brown fox jumps over the lazy dog."
MESSAGES = [{"role": "user", "content": "Name three colours."}]
ROLLOUT = {"max_tokens": 16, "temperature": 1.0, "seed": 1234, "logprobs": 0}


def make_client(url, model):
    return RemoteInferenceClient(
        proxy_url=url, server_urls=[url], data_parallel_size=1, model_name=model)


def check_logprobs(ids, logprobs, what):
    expect(isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids),
           f"{what}: token ids {shown(ids)}")
    expect(isinstance(logprobs, list) and len(logprobs) == len(ids),
           f"{what}: {len(ids)} tokens but log-probs {shown(logprobs)}")
    bad = [lp for lp in logprobs if not (isinstance(lp, float) and math.isfinite(lp) and lp <= 0)]
    expect(not bad, f"{what}: log-probs not finite and <= 0: {shown(bad)}")


async def tokenize_round_trip(client, shared):
    ids = (await client.tokenize([TEXT], add_special_tokens=False))[0]
    expect(ids and all(isinstance(t, int) for t in ids), f"/tokenize gave {shown(ids)}")
    if shared.text_ids is not None:
        expect(ids == shared.text_ids,
               f"/tokenize gave {shown(ids)}, /v1/completions' prompt_token_ids {shown(shared.text_ids)}")
    text = (await client.detokenize([ids]))[0]
    expect(text == TEXT, f"/detokenize gave {shown(text)}, not the text")
    return f"/tokenize: {len(ids)} ids (as /v1/completions tokenizes), /detokenize: the text back", ids


async def render_matches_chat(client, shared):
    rendered = await client.render_chat_completion({"json": {"messages": MESSAGES}})
    ids = rendered.get("token_ids")
    expect(isinstance(ids, list) and ids, f"render answered {shown(rendered, 120)}")
    chat = await client.chat_completion(
        {"json": {"messages": MESSAGES, "max_tokens": 1, "return_token_ids": True}})
    expect(ids == chat.get("prompt_token_ids"),
           f"render gave {shown(ids)}, the chat route's prompt {shown(chat.get('prompt_token_ids'))}")
    text = (await client.detokenize([ids]))[0]
    expect(MESSAGES[0]["content"] in text, f"the rendered prompt {shown(text)} lacks the message")
    return f"/v1/chat/completions/render: {len(ids)} ids, the chat route's prompt exactly", ids


async def rollout(client, shared):
    out = await client.generate({
        "prompt_token_ids": shared.prompts,
        "sampling_params": dict(ROLLOUT),
        "cache_salt": "policy-v0",
    })
    ids, logprobs, reasons = out["response_ids"], out["response_logprobs"], out["stop_reasons"]
    expect(len(ids) == len(shared.prompts), f"{len(ids)} results for {len(shared.prompts)} prompts")
    expect(logprobs is not None, "no log-probs although sampling_params.logprobs was set")
    for i, (t, lp, reason) in enumerate(zip(ids, logprobs, reasons)):
        check_logprobs(t, lp, f"rollout {i}")
        expect(len(t) <= ROLLOUT["max_tokens"], f"rollout {i}: {len(t)} tokens > max_tokens")
        expect(reason in ("stop", "length"), f"rollout {i}: finish_reason {reason!r}")
    for i, (t, text) in enumerate(zip(ids, out["responses"])):
        expect(isinstance(text, str), f"rollout {i}: text {shown(text)}")
    rollouts = list(zip(shared.prompts, ids, logprobs))
    mean = sum(sum(lp) for lp in logprobs) / sum(len(lp) for lp in logprobs)
    return (f"{len(ids)} rollouts, tokens {[len(t) for t in ids]}, finish {reasons}, "
            f"mean log-prob {mean:.3f}, text {shown(out['responses'][0], 40)}"), rollouts


async def rollout_matches_completions(client, shared):
    prompt, ids, logprobs = shared.rollouts[0]
    body = dict(ROLLOUT, prompt=prompt, return_token_ids=True)
    answer = await client.completion({"json": body})
    choice = answer["choices"][0]
    expect(choice.get("token_ids") == ids,
           f"/v1/completions drew {shown(choice.get('token_ids'))}, the rollout {shown(ids)}")
    got = choice["logprobs"]["token_logprobs"]
    expect(got == logprobs, f"log-probs differ: {shown(got)} vs {shown(logprobs)}")
    return f"/v1/completions, same seed: the same {len(ids)} tokens and log-probs, bitwise", None


async def prompt_logprobs_score(client, shared):
    prompt, ids, logprobs = shared.rollouts[0]
    full = prompt + ids
    k = 2
    answer = await client.sample({"json": {
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": full}]},
        "num_samples": 2,
        "sampling_params": {"max_tokens": 4, "temperature": 1.0, "seed": 9},
        "include_prompt_logprobs": True,
        "topk_prompt_logprobs": k,
    }})
    seqs = answer["sequences"]
    expect(len(seqs) == 2, f"num_samples 2 gave {len(seqs)} sequences")
    for s in seqs:
        check_logprobs(s["tokens"], s["logprobs"], "sample")
    scored = answer["prompt_logprobs"]
    expect(isinstance(scored, list) and len(scored) == len(full),
           f"prompt_logprobs {shown(scored)} for {len(full)} prompt tokens")
    expect(scored[0] is None, f"the first prompt token has log-prob {scored[0]!r}, not None")
    expect(scored[len(prompt):] == logprobs,
           f"teacher-forced {shown(scored[len(prompt):])} vs the rollout's {shown(logprobs)}")
    for i, top in enumerate(answer["topk_prompt_logprobs"][1:], start=1):
        expect(top and len(top) <= k and top[0][1] >= scored[i],
               f"position {i}: top-{k} {shown(top)} against the token's {scored[i]}")
    return (f"prompt_logprobs of prompt + rollout ({len(full)} tokens): the rollout's "
            f"{len(ids)} log-probs bitwise; top-{k} lists consistent"), None


async def echo_score(client, shared):
    prompt, ids, logprobs = shared.rollouts[0]
    full = prompt + ids
    answer = await client.completion({"json": {
        "prompt": full, "echo": True, "logprobs": 1, "max_tokens": 0}})
    lp = answer["choices"][0]["logprobs"]["token_logprobs"]
    expect(len(lp) == len(full), f"echo scored {len(lp)} tokens of {len(full)}")
    expect(lp[0] is None, f"the first token's log-prob is {lp[0]!r}, not None")
    expect(lp[len(prompt):] == logprobs,
           f"echo scored {shown(lp[len(prompt):])}, the rollout drew {shown(logprobs)}")
    return f"echo + logprobs + max_tokens 0: the rollout's {len(ids)} log-probs bitwise", None


def greedy(tokens):
    return {"max_tokens": tokens, "temperature": 0.0, "logprobs": 0, "ignore_eos": True}


async def one(client, route, prompt, tokens):
    """One greedy rollout through the client's `generate()` (/inference/v1/generate) or
    its `completion()` (/v1/completions): (token ids, log-probs, finish reason)."""
    if route == "generate":
        out = await client.generate(
            {"prompt_token_ids": [prompt], "sampling_params": greedy(tokens)})
        return out["response_ids"][0], out["response_logprobs"][0], out["stop_reasons"][0]
    body = dict(greedy(tokens), prompt=prompt, return_token_ids=True)
    choice = (await client.completion({"json": body}))["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"], choice["finish_reason"]


def is_paused(url):
    with urllib.request.urlopen(f"{url}/is_paused", timeout=30) as r:
        return json.loads(r.read())["is_paused"]


async def reference_rollout(client, shared, route):
    start = time.monotonic()
    ids, logprobs, reason = await one(client, route, shared.prompts[0], shared.pause_tokens)
    elapsed = time.monotonic() - start
    check_logprobs(ids, logprobs, "greedy rollout")
    expect(len(ids) == shared.pause_tokens and reason == "length",
           f"{len(ids)} tokens, finish {reason!r}: expected {shared.pause_tokens}, length")
    return f"greedy, {len(ids)} tokens in {elapsed:.2f}s", (ids, logprobs, elapsed)


async def paused_mid_rollout(client, shared, route, mode):
    """Starts the greedy rollout, pauses in `mode` a third of the way in, then resumes;
    returns the rollout's answer, whether the server said it was paused, and (keep mode)
    whether the rollout was still unfinished after a while paused."""
    elapsed = shared.reference[route][2]
    task = asyncio.create_task(one(client, route, shared.prompts[0], shared.pause_tokens))
    await asyncio.sleep(elapsed / 3)
    try:
        await client.pause(mode=mode)
        paused = await asyncio.to_thread(is_paused, shared.url)
        frozen = None
        if mode == PauseMode.KEEP:
            await asyncio.sleep(min(1.0, elapsed / 3))
            frozen = not task.done()
    finally:
        await client.resume()
    return await task, paused, frozen


async def keep_pause(client, shared, route):
    ids, logprobs, _ = shared.reference[route]
    (got, got_lp, reason), paused, frozen = await paused_mid_rollout(
        client, shared, route, PauseMode.KEEP)
    expect(paused, "GET /is_paused said false after /pause?mode=keep")
    expect(frozen, "the rollout finished while the server was paused in keep mode")
    expect(got == ids and got_lp == logprobs and reason == "length",
           f"after keep + resume: {shown(got)} ({reason!r}), uninterrupted {shown(ids)}")
    return "pause(keep) froze the rollout; after resume() it finished bitwise as uninterrupted", None


async def abort_and_resubmit(client, shared, route):
    ids, logprobs, _ = shared.reference[route]
    (part, part_lp, reason), paused, _ = await paused_mid_rollout(
        client, shared, route, PauseMode.ABORT)
    expect(paused, "GET /is_paused said false after /pause?mode=abort")
    if reason != "abort":
        raise Failed(f"finish_reason {reason!r} with {len(part)} tokens, not 'abort' "
                     f"(a rollout that ends before the pause: raise --pause-tokens)")
    n = len(part)
    expect(n < len(ids) and part == ids[:n] and part_lp == logprobs[:n],
           f"the partial {shown(part)} is not a prefix of {shown(ids)}")
    rest, rest_lp, _ = await one(client, route, shared.prompts[0] + part, len(ids) - n)
    expect(part + rest == ids and part_lp + rest_lp == logprobs,
           f"prompt + partial resubmitted gave {shown(rest)}, expected {shown(ids[n:])}")
    return (f"pause(abort): finish 'abort' after {n} of {len(ids)} tokens; prompt + partial "
            f"resubmitted completed it bitwise"), None


async def pause_checks(report, client, shared, route):
    name = f"skyrl {route}()"
    reference = await report.run_async(
        f"{name} greedy reference", reference_rollout, client, shared, route)
    if reference is None:
        report.skip(f"{name} pause keep/resume", "needs the greedy reference rollout")
        report.skip(f"{name} pause abort/resubmit", "needs the greedy reference rollout")
        return
    shared.reference[route] = reference
    await report.run_async(f"{name} pause keep/resume", keep_pause, client, shared, route)
    await report.run_async(f"{name} pause abort/resubmit", abort_and_resubmit, client, shared, route)


async def reset_prefix_cache(client, shared):
    answers = await client.reset_prefix_cache()
    statuses = [a["status"] for a in answers.values()]
    expect(statuses == [200], f"statuses {statuses}")
    return f"answered {shown(list(answers.values())[0]['body'])}", None


async def run_all(report, url, model, shared):
    client = make_client(url, model)
    shared.url = url
    try:
        await report.run_async("skyrl tokenize/detokenize", tokenize_round_trip, client, shared)
        await report.run_async("skyrl render_chat_completion", render_matches_chat, client, shared)
        shared.rollouts = await report.run_async("skyrl generate (rollout)", rollout, client, shared)
        if shared.rollouts:
            for name, check in (("skyrl completion, same seed", rollout_matches_completions),
                                ("skyrl sample prompt_logprobs", prompt_logprobs_score),
                                ("skyrl completion echo scoring", echo_score)):
                await report.run_async(name, check, client, shared)
        else:
            for name in ("skyrl completion, same seed", "skyrl sample prompt_logprobs",
                         "skyrl completion echo scoring"):
                report.skip(name, "needs the rollout")
        shared.reference = {}
        for route in ("generate", "completion"):
            await pause_checks(report, client, shared, route)
        await report.run_async("skyrl reset_prefix_cache", reset_prefix_cache, client, shared)
    finally:
        await client.teardown()
