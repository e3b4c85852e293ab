#!/usr/bin/env python3
"""Multi-turn tool-use episodes against `sprout serve` through the `openai` SDK, written
as trajectories a trainer can use.

The environment is a calculator over integers. Each task is a small arithmetic question;
an episode runs up to --turns model turns. After each turn the environment reads the
model's tool calls (`message.tool_calls` when the server parses them; else, see below,
Hermes-style `<tool_call>{...}</tool_call>` blocks in the text), takes each call's JSON
arguments (`op` in add/sub/mul, integers `a` and `b`, each at most 10**12 in size) and
answers with a `tool` message. Nothing the model wrote is ever executed: arguments are
parsed as JSON and checked field by field; anything else is an error the tool reports
back. An episode ends when the model answers without a tool call, or after --turns.

Exact tokens (NeMo Gym's convention, which sprout's chat route speaks): every request
asks for `return_token_ids`, each response's message carries `prompt_token_ids`,
`generation_token_ids` and `generation_log_probs`, and the history sent back carries them
on its assistant messages, so the server starts the next prompt with exactly those
tokens instead of re-tokenizing the text. The loop checks it: each turn's prompt starts
with the previous turn's prompt and generation, so the trajectory is one token sequence
with a loss mask (1 on sampled tokens) and the sampled tokens' log-probs.

Tool calls: the request always passes `tools=` (OpenAI's shape) and also describes the
tool in the system message (a template without a tools block, such as the default
model's, shows the model nothing otherwise). When the server answers with
`message.tool_calls`, those are the calls; when it refuses `tools` (a server without tool
calling) the loop retries without it and reads the calls from the text, and the
trajectory records which (`tool_calls_from`: "message" or "text").

Reward components, recorded apart: `correct` (the final answer, the last integer of the
last turn's text, equals the truth), `tool_used` (at least one valid calculator call),
`tool_errors` (calls the tool refused). reward = correct + 0.1 * tool_used
- 0.1 * min(tool_errors, 3).

Output (--out, JSONL): the first line is the run's provenance (model, sprout's version,
grader version, openai's version, the arguments, the tool-call mode); then one line per
rollout: the task, the group and sample index, every turn (prompt and generation ids,
log-probs, text, tool calls, tool results, finish reason, cached prompt tokens), the
reward and its components, and the whole trajectory (`token_ids`, `loss_mask`,
`logprobs`, 0.0 where not sampled).

Run against a live server:
    sprout serve --port 8000 &
    ~/.cache/sprout/clients-venv/bin/python examples/agent/episode_loop.py \\
        --url http://127.0.0.1:8000 --group 4 --out /tmp/agent.jsonl
or let it start one (--sprout target/release/sprout [--model PATH]).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sprout_server import Server  # noqa: E402

GRADER_VERSION = "calculator-v1"
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
LIMIT = 10**12

TASKS = [
    {"question": "What is 17 + 25?", "answer": 42},
    {"question": "What is 12 * 13?", "answer": 156},
    {"question": "What is 100 - 37?", "answer": 63},
    {"question": "What is (6 + 9) * 4?", "answer": 60},
]

TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Computes a op b over integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": ["add", "sub", "mul"]},
                "a": {"type": "integer"},
                "b": {"type": "integer"},
            },
            "required": ["op", "a", "b"],
        },
    },
}

SYSTEM = (
    "You can use a calculator. To call it, write\n"
    '<tool_call>\n{"name": "calculator", "arguments": {"op": "add", "a": 2, "b": 3}}\n'
    "</tool_call>\n"
    "(op is add, sub or mul). Its result comes back in a tool message. When you know "
    "the answer, reply with the number alone."
)

# Worked examples, in the text form every template renders (a small model does not call a
# tool it was only told about; the default model calls it greedily after three).
def _call_text(op, a, b):
    arguments = json.dumps({"op": op, "a": a, "b": b})
    return '<tool_call>\n{"name": "calculator", "arguments": %s}\n</tool_call>' % arguments


FEW_SHOT = []
for _q, _op, _a, _b, _r in [("What is 8 * 7?", "mul", 8, 7, 56),
                            ("What is 30 - 12?", "sub", 30, 12, 18),
                            ("What is 5 + 9?", "add", 5, 9, 14)]:
    FEW_SHOT += [
        {"role": "user", "content": _q},
        {"role": "assistant", "content": _call_text(_op, _a, _b)},
        {"role": "tool", "tool_call_id": "example", "content": str(_r)},
        {"role": "assistant", "content": str(_r)},
    ]

CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def calculator(arguments):
    """The tool: `arguments` is the call's JSON text (or an already parsed object).
    Returns (result text, error or None). Only parses and checks; never executes text."""
    if isinstance(arguments, str):
        if len(arguments) > 1000:
            return None, "arguments too long"
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return None, "arguments are not JSON: %s" % e.msg
    if not isinstance(arguments, dict):
        return None, "arguments must be an object"
    op, a, b = arguments.get("op"), arguments.get("a"), arguments.get("b")
    if op not in ("add", "sub", "mul"):
        return None, "op must be add, sub or mul"
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (a, b))
    if not ints or abs(a) > LIMIT or abs(b) > LIMIT:
        return None, "a and b must be integers of at most 10**12 in size"
    return str({"add": a + b, "sub": a - b, "mul": a * b}[op]), None


def calls_from_text(text):
    """Hermes-style calls in `text`: (name, arguments text) per well-formed block."""
    out = []
    for block in CALL_RE.findall(text or "")[:8]:
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            out.append((None, block))
            continue
        if isinstance(call, dict):
            out.append((call.get("name"), json.dumps(call.get("arguments"))))
        else:
            out.append((None, block))
    return out


def last_int(text):
    found = re.findall(r"-?\d+", text or "")
    return int(found[-1]) if found else None


class Episode:
    """One rollout of one task."""

    def __init__(self, client, args, task, group, sample, mode):
        self.client, self.args, self.task = client, args, task
        self.group, self.sample, self.mode = group, sample, mode
        self.messages = [{"role": "system", "content": SYSTEM}]
        if args.few_shot:
            self.messages += FEW_SHOT
        self.messages.append({"role": "user", "content": task["question"]})
        self.turns = []

    def ask(self, turn):
        kwargs = dict(
            model=self.args.served_model,
            messages=self.messages,
            max_tokens=self.args.max_tokens,
            temperature=self.args.temperature,
            seed=self.args.seed + 1000 * self.sample + turn,
            extra_body={"return_token_ids": True},
        )
        if self.mode["tools"]:
            try:
                return self.client.chat.completions.create(tools=[TOOL], **kwargs)
            except openai.BadRequestError as e:
                if "tools" not in str(e):
                    raise
                self.mode["tools"] = False
        return self.client.chat.completions.create(**kwargs)

    def run(self):
        for turn in range(self.args.turns):
            response = self.ask(turn)
            choice = response.choices[0]
            message = choice.message
            extra = message.model_extra or {}
            tokens = {name: extra.get(name) for name in TOKEN_FIELDS}
            if tokens["generation_token_ids"] is None:
                raise RuntimeError("the server returned no token fields on the message")
            if message.tool_calls:
                source = "message"
                calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
            else:
                source = "text"
                calls = [("call_%d_%d" % (turn, i), name, arguments)
                         for i, (name, arguments) in enumerate(calls_from_text(message.content))]
            reply = {"role": "assistant", "content": message.content or ""}
            if message.tool_calls:
                reply["tool_calls"] = [c.model_dump() for c in message.tool_calls]
            reply.update(tokens)
            self.messages.append(reply)
            results = []
            for call_id, name, arguments in calls:
                if name == "calculator":
                    result, error = calculator(arguments)
                else:
                    result, error = None, "unknown tool %r" % (name,)
                content = result if error is None else "error: " + error
                results.append({"tool_call_id": call_id, "name": name, "arguments": arguments,
                                "result": result, "error": error})
                self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            usage = response.usage
            details = usage.prompt_tokens_details if usage else None
            self.turns.append({
                "prompt_token_ids": tokens["prompt_token_ids"],
                "generation_token_ids": tokens["generation_token_ids"],
                "generation_log_probs": tokens["generation_log_probs"],
                "text": message.content,
                "finish_reason": choice.finish_reason,
                "tool_calls_from": source,
                "tool_calls": results,
                "cached_prompt_tokens": details.cached_tokens if details else None,
            })
            if not calls:
                break
        return self.record()

    def record(self):
        """The rollout as a trainer reads it. With exact prefixes (every prompt starts
        with the previous prompt and generation) the episode is one sequence: each turn's
        prompt delta (mask 0, the template's and the environment's tokens) then its
        sampled tokens (mask 1, with their log-probs). Otherwise `token_ids` is None and
        only the turns hold tokens."""
        ids, mask, logprobs, exact = [], [], [], True
        for t in self.turns:
            prompt, generated = t["prompt_token_ids"], t["generation_token_ids"]
            exact = exact and prompt[: len(ids)] == ids
            delta = prompt[len(ids):]
            ids += delta + generated
            mask += [0] * len(delta) + [1] * len(generated)
            logprobs += [0.0] * len(delta) + list(t["generation_log_probs"])
        if not exact:
            ids = mask = logprobs = None
        calls = [c for t in self.turns for c in t["tool_calls"]]
        components = {
            "correct": float(last_int(self.turns[-1]["text"]) == self.task["answer"]),
            "tool_used": float(any(c["error"] is None for c in calls)),
            "tool_errors": sum(c["error"] is not None for c in calls),
        }
        reward = (components["correct"] + 0.1 * components["tool_used"]
                  - 0.1 * min(components["tool_errors"], 3))
        return {
            "task": self.task, "group": self.group, "sample": self.sample,
            "turns": self.turns, "reward": reward, "reward_components": components,
            "exact_prefix": exact, "token_ids": ids, "loss_mask": mask, "logprobs": logprobs,
        }


def sprout_version(path):
    if not path:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True)
    return out.stdout.strip() or None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", help="a live server (else one is started with --sprout)")
    p.add_argument("--sprout", default="target/release/sprout")
    p.add_argument("--model", help="--model for the server this script starts")
    p.add_argument("--group", type=int, default=4, help="rollouts per task (G)")
    p.add_argument("--tasks", type=int, default=len(TASKS))
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--no-few-shot", dest="few_shot", action="store_false",
                   help="leave out the worked example of a call")
    p.add_argument("--out", default="agent_trajectories.jsonl")
    args = p.parse_args()

    server = None
    url = args.url
    if url is None:
        command = [args.sprout, "serve", "--port", "0"]
        if args.model:
            command += ["--model", args.model]
        server = Server(command, None, 600)
        url = server.url
    try:
        client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key="none")
        models = client.models.list().data
        args.served_model = models[0].id
        mode = {"tools": True}
        episodes = [Episode(client, args, task, g, g * args.group + s, mode)
                    for g, task in enumerate(TASKS[: args.tasks]) for s in range(args.group)]
        # One episode first: it settles whether the server takes `tools`.
        started = time.time()
        records = [episodes[0].run()]
        with ThreadPoolExecutor(args.parallel) as pool:
            records += list(pool.map(Episode.run, episodes[1:]))
        seconds = time.time() - started
    finally:
        if server is not None:
            server.stop()

    provenance = {
        "provenance": {
            "model": args.served_model,
            "sprout_version": sprout_version(args.sprout if os.path.exists(args.sprout) else None),
            "grader_version": GRADER_VERSION,
            "openai_version": openai.__version__,
            "tools_passed": mode["tools"],
            "args": {k: v for k, v in vars(args).items()},
            "seconds": round(seconds, 2),
        }
    }
    with open(args.out, "w") as f:
        f.write(json.dumps(provenance) + "\n")
        for r in records:
            f.write(json.dumps(r) + "\n")
    exact = sum(r["exact_prefix"] for r in records)
    turns = sum(len(r["turns"]) for r in records)
    mean = sum(r["reward"] for r in records) / len(records)
    print("%d rollouts, %d turns, %d with every prompt extending the last exactly; "
          "mean reward %.3f; %.1f s; written to %s"
          % (len(records), turns, exact, mean, seconds, args.out))


if __name__ == "__main__":
    main()
