"""The `openai` Python SDK against sprout: a completion with a token-id prompt and
log-probs, a chat completion, and the same chat streamed, with vLLM's fields passed
through `extra_body` (return_token_ids, add_special_tokens, cache_salt, prompt_logprobs)
and read back from the response's extra fields.

The streamed chat must be the seeded whole one cut in pieces: its deltas join to the
same text, its token ids and log-probs to the same lists. A cache salt must not change
what is drawn, and the prompt's log-probs (teacher forcing) must equal, bitwise, the
log-probs the completion drew for those tokens.
"""

import math

from openai import OpenAI

from report import expect, shown
from skyrl_checks import MESSAGES, TEXT

PROMPTS = ["Once upon a time", "The capital of France is"]
COMPLETION = {"max_tokens": 12, "temperature": 1.0, "seed": 11, "logprobs": 2}
CHAT = {"max_tokens": 24, "temperature": 0.8, "seed": 5, "logprobs": True, "top_logprobs": 2}


def extra(obj, name):
    """A field the OpenAI types do not declare (vLLM's), kept by the SDK as an extra."""
    return (obj.model_extra or {}).get(name)


def make_client(url):
    return OpenAI(base_url=f"{url}/v1", api_key="sprout", max_retries=0, timeout=600)


def prompt_ids(client, model, shared):
    """Token ids for the prompts, from /v1/completions' own tokenization."""
    ids = []
    for text in PROMPTS + [TEXT]:
        r = client.completions.create(
            model=model, prompt=text, max_tokens=1,
            extra_body={"return_token_ids": True, "add_special_tokens": False})
        got = extra(r.choices[0], "prompt_token_ids")
        expect(isinstance(got, list) and got, f"no prompt_token_ids for {text!r}")
        ids.append(got)
    shared.prompts, shared.text_ids = ids[:-1], ids[-1]
    return f"return_token_ids: prompts of {[len(i) for i in ids]} tokens", None


def token_prompt_completion(client, model, shared):
    prompt = shared.prompts[1]
    r = client.completions.create(
        model=model, prompt=prompt, **COMPLETION, extra_body={"return_token_ids": True})
    c = r.choices[0]
    ids, lp = extra(c, "token_ids"), c.logprobs
    expect(extra(c, "prompt_token_ids") == prompt, "prompt_token_ids is not the prompt sent")
    expect(ids and len(ids) == len(lp.tokens) == len(lp.token_logprobs),
           f"{shown(ids)} token ids against {len(lp.tokens)} log-prob tokens")
    for i, (sampled, top) in enumerate(zip(lp.token_logprobs, lp.top_logprobs)):
        expect(math.isfinite(sampled) and sampled <= 0, f"token {i}: log-prob {sampled}")
        expect(0 < len(top) <= COMPLETION["logprobs"] + 1 and max(top.values()) >= sampled,
               f"token {i}: top {shown(top)} against the sampled {sampled}")
    expect(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason!r}")
    shared.completion = (prompt, ids, lp.token_logprobs)
    return (f"{len(ids)} tokens, finish {c.finish_reason}, top-{COMPLETION['logprobs']} "
            f"log-probs, text {shown(c.text, 40)}"), None


def cache_salt(client, model, shared):
    prompt, ids, logprobs = shared.completion
    for salt in ("policy-v1", "policy-v2"):
        r = client.completions.create(
            model=model, prompt=prompt, **COMPLETION,
            extra_body={"return_token_ids": True, "cache_salt": salt})
        c = r.choices[0]
        expect(extra(c, "token_ids") == ids and c.logprobs.token_logprobs == logprobs,
               f"salt {salt!r} drew {shown(extra(c, 'token_ids'))}, unsalted {shown(ids)}")
    return "two salts: the unsalted tokens and log-probs, bitwise", None


def prompt_logprobs(client, model, shared):
    prompt, ids, logprobs = shared.completion
    full = prompt + ids
    r = client.completions.create(
        model=model, prompt=full, max_tokens=1, temperature=1.0, seed=3,
        extra_body={"prompt_logprobs": 1})
    scored = extra(r.choices[0], "prompt_logprobs")
    expect(isinstance(scored, list) and len(scored) == len(full),
           f"prompt_logprobs {shown(scored)} for {len(full)} tokens")
    expect(scored[0] is None, f"the first position has {shown(scored[0])}, not None")
    got = []
    for i, (token, entries) in enumerate(zip(full[1:], scored[1:]), start=1):
        entry = entries.get(str(token)) if isinstance(entries, dict) else None
        expect(entry is not None, f"position {i}: no entry for token {token} in {shown(entries)}")
        rank = entry.get("rank")
        expect(isinstance(rank, int) and rank >= 1, f"position {i}: rank {rank!r}")
        expect(len(entries) <= 2, f"position {i}: {len(entries)} entries for prompt_logprobs 1")
        got.append(entry["logprob"])
    expect(got[len(prompt) - 1:] == logprobs,
           f"teacher-forced {shown(got[len(prompt) - 1:])}, drawn {shown(logprobs)}")
    return f"{len(full)} positions; the drawn tokens' {len(ids)} log-probs bitwise", None


def chat_whole(client, model, shared):
    r = client.chat.completions.create(
        model=model, messages=MESSAGES, **CHAT, extra_body={"return_token_ids": True})
    c = r.choices[0]
    text, ids = c.message.content, extra(c, "token_ids")
    expect(isinstance(text, str) and text, f"content {shown(text)}")
    expect(ids and len(ids) == len(c.logprobs.content),
           f"{shown(ids)} token ids against {len(c.logprobs.content)} log-probs")
    expect(r.usage.completion_tokens == len(ids), f"usage {r.usage}")
    shared.chat = (text, ids, [(t.token, t.logprob) for t in c.logprobs.content], c.finish_reason)
    return f"{len(ids)} tokens, finish {c.finish_reason}, content {shown(text, 40)}", None


def stream_chat(client, model, logprobs):
    """The seeded chat streamed: (joined text, token ids, log-probs, finish reasons,
    usage, number of content deltas)."""
    params = dict(CHAT) if logprobs else {k: v for k, v in CHAT.items() if "logprobs" not in k}
    stream = client.chat.completions.create(
        model=model, messages=MESSAGES, **params, stream=True,
        stream_options={"include_usage": True}, extra_body={"return_token_ids": True})
    pieces, ids, lps, reasons, usage = [], [], [], [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            ids += extra(c, "token_ids") or []
            if c.logprobs and c.logprobs.content:
                lps += [(t.token, t.logprob) for t in c.logprobs.content]
            if c.finish_reason:
                reasons.append(c.finish_reason)
    return "".join(pieces), ids, lps, reasons, usage, len(pieces)


def check_stream(shared, got):
    text, ids, _, finish = shared.chat
    joined, got_ids, _, reasons, usage, _ = got
    expect(joined == text, f"the deltas join to {shown(joined)}, the whole run said {shown(text)}")
    expect(got_ids == ids, f"streamed token ids {shown(got_ids)}, whole {shown(ids)}")
    expect(reasons == [finish], f"finish reasons {reasons}, whole {finish!r}")
    expect(usage is not None and usage.completion_tokens == len(ids), f"usage {usage}")


def chat_streamed(client, model, shared):
    got = stream_chat(client, model, logprobs=False)
    check_stream(shared, got)
    deltas, ids = got[5], shared.chat[1]
    expect(deltas >= min(len(ids), 2), f"{len(ids)} tokens came in {deltas} delta(s)")
    return f"{deltas} deltas for {len(ids)} tokens: the whole message and token ids", None


def chat_streamed_logprobs(client, model, shared):
    got = stream_chat(client, model, logprobs=True)
    check_stream(shared, got)
    expect(got[2] == shared.chat[2], f"streamed log-probs {shown(got[2])}, whole {shown(shared.chat[2])}")
    return (f"{got[5]} delta(s) for {len(shared.chat[1])} tokens: the whole message, ids "
            f"and log-probs"), None


def run_all(report, url, model, shared):
    client = make_client(url)
    report.run("openai completions return_token_ids", prompt_ids, client, model, shared)
    if shared.prompts is None:
        return False
    report.run("openai completion, token-id prompt", token_prompt_completion, client, model, shared)
    if shared.completion:
        report.run("openai completion cache_salt", cache_salt, client, model, shared)
        report.run("openai completion prompt_logprobs", prompt_logprobs, client, model, shared)
    else:
        report.skip("openai completion cache_salt", "needs the completion")
        report.skip("openai completion prompt_logprobs", "needs the completion")
    report.run("openai chat completion", chat_whole, client, model, shared)
    if shared.chat:
        report.run("openai chat completion, streamed", chat_streamed, client, model, shared)
        report.run("openai chat completion, streamed with log-probs",
                   chat_streamed_logprobs, client, model, shared)
    else:
        report.skip("openai chat completion, streamed", "needs the whole chat completion")
        report.skip("openai chat completion, streamed with log-probs", "needs the whole chat")
    return True
