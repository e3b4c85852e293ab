#!/usr/bin/env python3
"""TRL's GRPOTrainer, in its vLLM server mode, rolling out on `sprout serve`.

TRL's trainer reaches its rollout server through `VLLMClient`; here that client is
`SproutClient` (sprout_client.py): the same `/generate/` requests, and weights pushed as a
safetensors checkpoint to `/update_weights` instead of over NCCL. TRL refuses server mode
when the `vllm` package is not importable, although server mode only talks HTTP, so this
script tells TRL's two modules that vLLM is there; nothing of vLLM is imported or run.

Run (torch, transformers, trl and datasets in the venv; the model exported to f32):
    sprout serve --model ~/.cache/sprout/grpo/smollm2-f32 --quantize q8_0 --port 8000 &
    ~/.cache/sprout/venv/bin/python examples/trl/grpo_trl.py \\
        --model-dir ~/.cache/sprout/grpo/smollm2-f32 --url http://127.0.0.1:8000 --steps 3

The reward is the same as examples/grpo/grpo.py's (the last number of the completion
against the true sum); the completion is only pattern-matched, never run.
"""

import argparse
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trl.generation.vllm_client as vllm_client  # noqa: E402
import trl.generation.vllm_generation as vllm_generation  # noqa: E402

# Server mode only talks HTTP; TRL checks for the vllm package all the same.
vllm_client.is_vllm_available = lambda: True
vllm_generation.is_vllm_available = lambda: True

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from sprout_client import SproutClient  # noqa: E402

ANSWER = re.compile(r"-?\d+")


def sums(count, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({
            "prompt": [{"role": "system", "content": "You answer arithmetic questions with a number."},
                       {"role": "user", "content": f"What is {a} + {b}? Reply with only the number."}],
            "answer": a + b,
        })
    return Dataset.from_list(rows)


def correct(completions, answer, **_):
    rewards = []
    for completion, truth in zip(completions, answer):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        numbers = ANSWER.findall(text)
        rewards.append(1.0 if numbers and int(numbers[-1]) == truth else 0.0)
    return rewards


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default="/tmp/sprout-trl-grpo")
    args = p.parse_args()

    def client(**kwargs):
        return SproutClient(source_dir=args.model_dir, **kwargs)

    vllm_generation.VLLMClient = client
    config = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, learning_rate=1e-5,
        per_device_train_batch_size=8, num_generations=8, max_completion_length=8,
        use_vllm=True, vllm_mode="server", vllm_server_base_url=args.url,
        logging_steps=1, report_to=[], use_cpu=True, bf16=False, save_strategy="no")
    trainer = GRPOTrainer(model=args.model_dir, reward_funcs=[correct], args=config,
                          train_dataset=sums(64, 0))
    trainer.train()
    for row in trainer.state.log_history:
        print(row, flush=True)


if __name__ == "__main__":
    main()
