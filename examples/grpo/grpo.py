#!/usr/bin/env python3
"""A minimal GRPO loop on one CPU machine: sprout rolls out, torch trains, and the new
weights go back to sprout every step.

Each step:
  1. asks `sprout serve` for G completions of each of P prompts (chat, with token ids
     and sprout's per-token `sampling_logprobs`);
  2. grades each completion with a verifiable reward: short sums, the last number in the
     completion checked against the true sum (`correct`), plus a small bonus for
     answering with the number alone (`format`). The completion is untrusted text: it is
     only matched against regular expressions, never run;
  3. normalises rewards within each group (advantage = (r - mean) / (std + eps));
  4. computes the trainer's log-probs of the completion tokens (transformers, f32) and a
     token-level policy-gradient loss weighted by truncated importance sampling,
     min(p_train / p_rollout, 2), with p_rollout from sprout's sampling log-probs;
  5. takes an AdamW step, saves the weights as safetensors and calls `/update_weights`
     with the step number as the weights version.

On a CPU the backward pass is the cost: by default only the top --train-layers layers
(and the final norm) learn; the embedding (tied to the output projection) and the layers
below stay as they were.

--colocate puts the server to sleep while the trainer steps, so that the two share one
device's memory in turn (as colocated trainers do with vLLM): after the rollout,
`POST /sleep?level=L&mode=wait` (--sleep-level L, 2 by default); then the trainer's step
and checkpoint; then, at level 2 (the weights were discarded), `POST /wake_up?tags=weights`,
`/update_weights`, `POST /wake_up?tags=kv_cache`; at level 1 (the weights were kept in host
memory), `POST /wake_up`, then `/update_weights`. An error from /sleep or /wake_up, or a
server that does not end up awake with its weights on the device, stops the run.

Logged per step (JSONL, --log): reward and each component, the rollout-vs-trainer KL
(k3 estimator), the fraction of tokens whose importance weight was truncated, the
weights version every completion reports, rollout, train and update seconds (update:
saving the checkpoint, /update_weights, removing the checkpoint before). Memory, in bytes:
the peak resident set size (/proc/<pid>/status VmRSS, sampled every 50 ms while the
trainer steps) of the trainer, of the server (None when --url names a server this script
did not start) and of their sum at the same instant (`*_rss_train_peak_bytes`), and the
trainer's peak since it started (`trainer_max_rss_bytes`, getrusage). With --colocate also
sleep and wake seconds, the server's device memory before and after sleeping and what it
freed for the KV cache and for the weights (from /sleep's reply), and its device memory
once awake (from the last /wake_up's); without it these are None. Raw
trajectories (prompt, completion text and ids, every reward component, versions) go to
--trajectories. The run's provenance (model, sprout's version, grader version, torch and
transformers versions, whether it colocated and at which sleep level, arguments) is the
first line of both files. --plot writes a PNG of reward per step.

Run (the default model exported to f32 first; the venv has torch and transformers):
    sprout export --out ~/.cache/sprout/grpo/smollm2-f32
    ~/.cache/sprout/venv/bin/python examples/grpo/grpo.py \\
        --model-dir ~/.cache/sprout/grpo/smollm2-f32 --sprout target/release/sprout \\
        --steps 30 --log /tmp/grpo.jsonl --plot /tmp/grpo.png
(add --colocate to sleep the server while training; results/colocate.md compares the two.)

--lora trains a LoRA adapter instead (peft, on every projection of the top --train-layers
layers, the f32 base frozen) and pushes only the adapter: sprout serves the q8_0 base plus the adapter,
loaded once under --lora-name and then reloaded in place each step
(`POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace: true}`, vLLM's route),
which bumps the adapter's version; requests name the adapter in `model`, and each
completion reports the adapter version that drew it. The push (update_s) is saving the
adapter and that call. Merging the adapter into a q8_0 base could not work: one step's
change is far below a q8_0 rounding step. results/lora.md compares the two modes.
--lora needs peft (0.21.2 was used) and --plot matplotlib (3.11.2) in the venv.

It starts `sprout serve` itself (`--quantize q8_0` by default: rollouts run quantized, the
trainer keeps f32, and the importance weights correct for the difference) and stops it at
the end.
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import torch
import transformers
from safetensors.torch import save_file

try:
    import peft
except ImportError:  # only --lora needs it
    peft = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sprout_server import Server  # noqa: E402
from rss import RssSampler, max_rss_bytes  # noqa: E402

GRADER_VERSION = "sums-v1"
ANSWER = re.compile(r"-?\d+")


# ---------------------------------------------------------------------------------------
# The task and its reward


def make_prompt(rng):
    """A short sum and its answer."""
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    question = f"What is {a} + {b}? Reply with only the number."
    return question, a + b


def grade(completion, answer):
    """Every reward component of one completion; the text is only pattern-matched. The
    answer is the completion's last number ("8 + 7 is 15" answers 15)."""
    text = completion.strip()
    numbers = ANSWER.findall(text)
    correct = 1.0 if numbers and int(numbers[-1]) == answer else 0.0
    alone = 1.0 if re.fullmatch(r"-?\d+\.?", text) else 0.0
    components = {"correct": correct, "format": 0.5 * alone}
    return components, sum(components.values())


# ---------------------------------------------------------------------------------------
# Talking to sprout


def post(url, path, body, timeout=600):
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{path} answered {e.code}: {e.read().decode(errors='replace')}")


SYSTEM = "You answer arithmetic questions with a number."


def rollout(url, question, group, max_tokens, seed, model=None):
    """G completions of one question, with everything the trainer needs; `model` names a
    LoRA adapter to draw them with (None: the base model)."""
    body = {
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": question}],
        "n": group, "max_tokens": max_tokens, "temperature": 1.0, "seed": seed,
        "return_token_ids": True,
    }
    if model is not None:
        body["model"] = model
    out = post(url, "/v1/chat/completions", body)
    prompt_ids = out["prompt_token_ids"]
    samples = []
    for choice in out["choices"]:
        samples.append({
            "text": choice["message"]["content"],
            "token_ids": choice["token_ids"],
            "sampling_logprobs": choice["sprout"]["sampling_logprobs"],
            "weights_version": choice["sprout"]["weights_version"],
            "finish_reason": choice["finish_reason"],
        })
    return prompt_ids, samples


def load_adapter(url, name, path, inplace):
    """`POST /v1/load_lora_adapter` (vLLM's route; a plain-text answer on success); the
    adapter's version in force afterwards, from /health."""
    request = urllib.request.Request(
        url + "/v1/load_lora_adapter",
        data=json.dumps({"lora_name": name, "lora_path": path,
                         "load_inplace": inplace}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"/v1/load_lora_adapter answered {e.code}: "
                           f"{e.read().decode(errors='replace')}")
    health = json.loads(urllib.request.urlopen(url + "/health").read())
    adapter = health.get("lora_adapter") or {}
    if adapter.get("name") != name:
        raise RuntimeError(f"the server does not report adapter {name} in force: {health}")
    return adapter["version"]


def sleep(url, level):
    """Puts the server to sleep once the rollout is over (nothing is in flight, so `wait`
    returns at once); the reply has its device memory before and after."""
    reply = post(url, f"/sleep?level={level}&mode=wait", {})
    if reply.get("is_sleeping") is not True:
        raise RuntimeError(f"/sleep?level={level} answered, but not asleep: {reply}")
    return reply


def wake_up(url, tag=None):
    """Wakes what `tag` names (weights, kv_cache), or everything."""
    return post(url, "/wake_up" + (f"?tags={tag}" if tag else ""), {})


# ---------------------------------------------------------------------------------------
# The trainer


def completion_logprobs(model, rows):
    """The trainer's log-prob of each completion token, per row (prompt ids, completion
    ids), computed in one right-padded batch."""
    longest = max(len(p) + len(c) for p, c in rows)
    ids = torch.zeros((len(rows), longest), dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        seq = p + c
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    out = []
    for i, (p, c) in enumerate(rows):
        # The token at position t is predicted by the logits at t - 1.
        positions = torch.arange(len(p) - 1, len(p) + len(c) - 1)
        out.append(logprobs[i, positions, torch.tensor(c)])
    return out


def train_step(model, optimizer, batch, clip):
    """One policy-gradient step over every sampled token; returns its statistics."""
    rows = [(s["prompt_ids"], s["token_ids"]) for s in batch]
    trainer = completion_logprobs(model, rows)
    total_tokens = sum(len(s["token_ids"]) for s in batch)
    loss = torch.zeros(())
    k3_sum, clipped, tokens = 0.0, 0, 0
    w_sum, w2_sum = 0.0, 0.0
    for s, logp in zip(batch, trainer):
        rollout_logp = torch.tensor(s["sampling_logprobs"])
        log_ratio = logp.detach() - rollout_logp
        ratio = torch.exp(log_ratio)
        weight = torch.clamp(ratio, max=clip)
        loss = loss - (weight * s["advantage"] * logp).sum() / total_tokens
        # k3 estimate of KL(trainer || rollout) from rollout samples: r - 1 - log r,
        # with r = p_train / p_rollout.
        k3_sum += float((ratio - 1 - log_ratio).sum())
        clipped += int((ratio > clip).sum())
        w_sum += float(ratio.sum())
        w2_sum += float((ratio * ratio).sum())
        tokens += len(s["token_ids"])
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    # Effective sample size of the (untruncated) importance weights over the step's
    # tokens, as a fraction: (sum w)^2 / (n sum w^2); 1 when trainer and rollout agree.
    ess = (w_sum * w_sum) / (tokens * w2_sum) if tokens and w2_sum > 0 else None
    return {"loss": float(loss.detach()), "kl_k3": k3_sum / max(tokens, 1),
            "ess": ess, "clip_fraction": clipped / max(tokens, 1), "tokens": tokens}


def lora_model(model, args):
    """`model` wrapped with a fresh LoRA adapter on every projection of the top
    --train-layers layers, the same layers the full fine-tune trains (B starts at zero, so
    version 1 draws exactly what the base model draws); only the adapter learns."""
    layers = model.config.num_hidden_layers
    config = peft.LoraConfig(
        r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"],
        layers_to_transform=list(range(layers - min(args.train_layers, layers), layers)))
    model = peft.get_peft_model(model, config)
    return model, [p for p in model.parameters() if p.requires_grad]


def save_adapter(model, out_dir):
    """PEFT's adapter directory (adapter_config.json, adapter_model.safetensors)."""
    model.save_pretrained(out_dir)


def pushed_bytes(directory):
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))


def save_checkpoint(model, source_dir, out_dir):
    """The weights as one safetensors file, with the source's config and tokenizer files
    (tied embeddings: lm_head is the embedding and is not saved twice)."""
    os.makedirs(out_dir, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, os.path.join(out_dir, "model.safetensors"))
    for name in os.listdir(source_dir):
        if name != "model.safetensors":
            shutil.copy(os.path.join(source_dir, name), os.path.join(out_dir, name))


# ---------------------------------------------------------------------------------------
# The loop


def provenance(args, url):
    model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]
    version = subprocess.run([args.sprout, "--version"], capture_output=True, text=True)
    return {"kind": "provenance", "model_dir": os.path.abspath(args.model_dir),
            "served_model": model["id"], "sprout": version.stdout.strip(),
            "grader": GRADER_VERSION, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__ if args.lora else None, "lora": args.lora,
            "colocate": args.colocate,
            "sleep_level": args.sleep_level if args.colocate else None, "args": vars(args)}


def trainable(model, layers):
    """The parameters that learn: the top `layers` decoder layers and the final norm."""
    for p in model.parameters():
        p.requires_grad_(False)
    blocks = model.model.layers
    learn = list(blocks[len(blocks) - min(layers, len(blocks)):]) + [model.model.norm]
    params = [p for module in learn for p in module.parameters()]
    for p in params:
        p.requires_grad_(True)
    return params


def rollout_step(url, args, rng, step, model):
    """Every prompt's group, requested at once so that sprout batches them together."""
    questions = [make_prompt(rng) for _ in range(args.prompts)]
    seeds = [args.seed * 1_000_003 + step * 1_000 + p for p in range(args.prompts)]
    with ThreadPoolExecutor(max_workers=args.prompts) as pool:
        futures = [pool.submit(rollout, url, q, args.group, args.max_tokens, seed, model)
                   for (q, _), seed in zip(questions, seeds)]
        results = [f.result() for f in futures]
    return [(q, a, prompt_ids, samples)
            for (q, a), (prompt_ids, samples) in zip(questions, results)]


def run(args, url, server_pid, log, trajectories):
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.float32)
    model.train()
    served = None
    if args.lora:
        model, params = lora_model(model, args)
        # Version 1: the untrained adapter (B = 0), so step 1 rolls out with it in force.
        first = os.path.join(args.work_dir, "step-0")
        save_adapter(model, first)
        load_adapter(url, args.lora_name, first, inplace=False)
        served = args.lora_name
    else:
        params = trainable(model, args.train_layers)
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    header = provenance(args, url)
    header["trainable_parameters"] = sum(p.numel() for p in params)
    for f in (log, trajectories):
        f.write(json.dumps(header) + "\n")
    for step in range(1, args.steps + 1):
        started = time.time()
        batch, rewards, components = [], [], {"correct": [], "format": []}
        versions = set()
        for question, answer, prompt_ids, samples in rollout_step(url, args, rng, step,
                                                                  served):
            group = []
            for s in samples:
                parts, reward = grade(s["text"], answer)
                s.update(prompt_ids=prompt_ids, reward=reward, components=parts,
                         question=question, answer=answer)
                group.append(s)
                versions.add(s["weights_version"])
            mean = sum(s["reward"] for s in group) / len(group)
            std = math.sqrt(sum((s["reward"] - mean) ** 2 for s in group) / len(group))
            for s in group:
                s["advantage"] = (s["reward"] - mean) / (std + 1e-4)
                rewards.append(s["reward"])
                for k, v in s["components"].items():
                    components[k].append(v)
                trajectories.write(json.dumps({
                    "step": step, "question": question, "answer": answer,
                    "prompt_ids": prompt_ids, "completion": s["text"],
                    "token_ids": s["token_ids"], "sampling_logprobs": s["sampling_logprobs"],
                    "finish_reason": s["finish_reason"], "reward": s["reward"],
                    "components": s["components"], "advantage": s["advantage"],
                    "weights_version": s["weights_version"]}) + "\n")
            batch.extend(group)
        rollout_s = time.time() - started

        slept, sleep_s = None, None
        if args.colocate:
            started = time.time()
            slept = sleep(url, args.sleep_level)
            sleep_s = time.time() - started

        # The server's memory is sampled while the trainer steps: with --colocate it sleeps
        # meanwhile. Unknown (None) for a server this script did not start.
        with RssSampler({"trainer": "self", "server": server_pid}) as rss:
            started = time.time()
            stats = train_step(model, optimizer, batch, args.clip)
            train_s = time.time() - started

        # update_s: saving the checkpoint, /update_weights and removing the checkpoint
        # before; wake_s: the /wake_up calls around the update.
        update_s, wake_s, woken = 0.0, None, None
        started = time.time()
        checkpoint = os.path.join(args.work_dir, f"step-{step}")
        if args.lora:
            save_adapter(model, checkpoint)
        else:
            save_checkpoint(model, args.model_dir, checkpoint)
        pushed = pushed_bytes(checkpoint)
        update_s += time.time() - started
        if args.colocate:
            # Level 2 wakes the weights alone first (they were discarded: the update brings
            # them); level 1 wakes everything, the weights kept in host memory included.
            started = time.time()
            woken = wake_up(url, "weights" if args.sleep_level == 2 else None)
            wake_s = time.time() - started
        started = time.time()
        if args.lora:
            # In place: the adapter's version goes one up (step + 1: version 1 was the
            # untrained adapter).
            updated = {"weights_version": load_adapter(url, args.lora_name, checkpoint,
                                                       inplace=True), "load_s": None}
        else:
            updated = post(url, "/update_weights", {"weight_dir": checkpoint,
                                                    "weights_version": step})
        update_s += time.time() - started
        if args.colocate:
            if args.sleep_level == 2:
                started = time.time()
                woken = wake_up(url, "kv_cache")
                wake_s += time.time() - started
            if woken.get("is_sleeping") is not False or woken.get("weights") != "device":
                raise RuntimeError(f"the server did not wake with its weights: {woken}")
        started = time.time()
        # Only the checkpoint in force is needed; the one before can go.
        previous = os.path.join(args.work_dir, f"step-{step - 1}")
        if os.path.isdir(previous):
            shutil.rmtree(previous)
        update_s += time.time() - started

        row = {"kind": "step", "step": step,
               "reward": sum(rewards) / len(rewards),
               "correct": sum(components["correct"]) / len(rewards),
               "format": sum(components["format"]) / len(rewards),
               "rollout_weights_versions": sorted(versions),
               "weights_version": updated["weights_version"], **stats,
               "rollout_s": round(rollout_s, 2), "train_s": round(train_s, 2),
               "update_s": round(update_s, 2),
               "load_s": None if updated["load_s"] is None else round(updated["load_s"], 2),
               "pushed_bytes": pushed,
               "sleep_s": None if sleep_s is None else round(sleep_s, 2),
               "wake_s": None if wake_s is None else round(wake_s, 2),
               "server_gpu_memory_bytes_before_sleep":
                   slept and slept["gpu_memory_bytes_before"],
               "server_gpu_memory_bytes_asleep": slept and slept["gpu_memory_bytes"],
               "server_freed_kv_cache_bytes": slept and slept.get("freed_kv_cache_bytes"),
               "server_freed_weights_bytes": slept and slept.get("freed_weights_bytes"),
               "server_gpu_memory_bytes_woken": woken and woken["gpu_memory_bytes"],
               "server_rss_train_peak_bytes": rss.peak["server"],
               "trainer_rss_train_peak_bytes": rss.peak["trainer"],
               "total_rss_train_peak_bytes": rss.peak_total,
               "rss_samples": rss.samples,
               "trainer_max_rss_bytes": max_rss_bytes()}
        log.write(json.dumps(row) + "\n")
        log.flush()
        trajectories.flush()
        print(f"step {step:3d}  reward {row['reward']:.3f}  correct {row['correct']:.3f}  "
              f"format {row['format']:.3f}  kl {row['kl_k3']:.5f}  ess {row['ess'] or 0:.4f}  "
              f"clip {row['clip_fraction']:.3f}  rolled out under {row['rollout_weights_versions']} "
              f"-> {row['weights_version']}  "
              f"({rollout_s:.1f} s rollout, {train_s:.1f} s train, {update_s:.1f} s update"
              + (f", {sleep_s:.1f} s sleep, {wake_s:.1f} s wake" if args.colocate else "")
              + f"; trainer {mib(rss.peak['trainer'])}, server {mib(rss.peak['server'])} "
              f"while training)", flush=True)


def mib(value):
    return "?" if value is None else f"{value / 2**20:.0f} MiB"


def plot(log_path, png_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [json.loads(line) for line in open(log_path)]
    steps = [r for r in rows if r.get("kind") == "step"]
    x = [r["step"] for r in steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, [r["reward"] for r in steps], label="reward (total)")
    ax.plot(x, [r["correct"] for r in steps], label="correct")
    ax.plot(x, [r["format"] for r in steps], label="format (0.5 max)")
    ax.set_xlabel("step (= weights version)")
    ax.set_ylabel("mean over the step's completions")
    lora = rows[0].get("lora") if rows and rows[0].get("kind") == "provenance" else False
    ax.set_title("GRPO on sprout rollouts: SmolLM2-135M-Instruct, sums"
                 + (", LoRA" if lora else ""))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True,
                   help="the model as a Hugging Face f32 directory (sprout export)")
    p.add_argument("--sprout", default="target/release/sprout", help="the sprout binary")
    p.add_argument("--url", help="a running sprout serve (default: start one)")
    p.add_argument("--quantize", default="q8_0",
                   help="how the started server holds the weights (q8_0, q4_1, none)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prompts", type=int, default=4, help="prompts per step (P)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--lr", type=float,
                   help="AdamW's learning rate (default 2e-5, or 2e-4 with --lora: LoRA "
                        "wants about 10x the full fine-tune's)")
    p.add_argument("--train-layers", type=int, default=10,
                   help="how many of the top decoder layers learn (the rest stay frozen); "
                        "with --lora, the layers the adapter covers")
    p.add_argument("--clip", type=float, default=2.0,
                   help="the importance weight's upper bound")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="/tmp/sprout-grpo",
                   help="where checkpoints are written")
    p.add_argument("--log", default="grpo.jsonl")
    p.add_argument("--trajectories", default="grpo-trajectories.jsonl")
    p.add_argument("--plot", help="write a PNG of reward per step")
    p.add_argument("--server-log", help="keep the server's stderr here")
    p.add_argument("--colocate", action="store_true",
                   help="put the server to sleep (/sleep) while the trainer steps, and wake it "
                        "for the update (see the module docstring)")
    p.add_argument("--sleep-level", type=int, choices=(1, 2), default=2,
                   help="with --colocate: 1 keeps the server's weights in host memory, 2 "
                        "discards them (the update brings new ones)")
    p.add_argument("--lora", action="store_true",
                   help="train a LoRA adapter (peft) and push it in place each step "
                        "(see the module docstring)")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=float, default=32.0)
    p.add_argument("--lora-name", default="policy",
                   help="the adapter's name on the server (requests' `model`)")
    args = p.parse_args()
    if args.lora:
        if peft is None:
            p.error("--lora needs peft (pip install peft)")
        if args.colocate:
            p.error("--lora with --colocate is not supported: the adapter route has no "
                    "sleeping counterpart here; run one or the other")
    if args.lr is None:
        args.lr = 2e-4 if args.lora else 2e-5
    return args


def main():
    args = parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    server = None
    url = args.url
    if url is None:
        command = [args.sprout, "serve", "--port", "0", "--model", args.model_dir,
                   "--quantize", args.quantize]
        if args.lora:
            command += ["--max-lora-rank", str(args.lora_rank)]
        server = Server(command, args.server_log, 600)
        url = server.url
        print(f"started {' '.join(command)} at {url}", flush=True)
    try:
        with open(args.log, "w") as log, open(args.trajectories, "w") as trajectories:
            run(args, url, server and server.pid, log, trajectories)
    finally:
        if server is not None:
            print(f"server exit code: {server.stop()}", flush=True)
    if args.plot:
        plot(args.log, args.plot)
        print(f"wrote {args.plot}", flush=True)


if __name__ == "__main__":
    main()
