#!/usr/bin/env python3
"""The floor of `sprout mismatch`: Hugging Face transformers' float32 log-probs of a few
sampled completions, which sprout's own float32 forward pass scores again.

    /root/.cache/sprout/venv/bin/python scripts/mismatch_floor.py [--model DIR] [--out FILE]
        [--lora DIR]

MODEL (default ~/.cache/sprout/grpo/smollm2-f32, made by `sprout export --out DIR`) is a
float32 Hugging Face directory. For each built-in prompt (rendered with the model's chat
template) transformers samples SAMPLES completions of at most MAX_NEW_TOKENS tokens
(temperature 1, nothing cut, seed 0, on the CPU), then computes in float32, teacher-forced
over prompt + completion, the log-probability of every completion token
(log_softmax(logits)[token], the trainer's figure). The fixture records, per completion,
`prompt_token_ids`, `token_ids` and `logprobs`, and in its header the versions, the dtype
and `model_sha256`: the SHA-256 of the lines `<sha256>  <name>` of the directory's regular
files in name order (as `sprout::model::open::model_sha256` computes it, and as records
name their model), so sprout applies the floor only to this very model.

With --lora DIR (a PEFT LoRA adapter; PEFT is installed beside transformers) the model
samples and scores with the adapter (its tensors in float32), and the header's `lora`
names it: `name` (the directory's), `sha256` (the SHA-256 of adapter_config.json's bytes
then adapter_model.safetensors', as `LoraAdapter::digest` computes it) and `peft` (the
version). sprout then measures the floor only for a trainer running that very adapter
(`sprout mismatch --lora DIR --floor FILE`).

The fixture is committed (tests/fixtures/mismatch_floor.json, embedded in the binary);
building and testing sprout needs no Python. Floats are the shortest decimals that
round-trip to the float32 value. About a minute on 2 CPU cores.
"""

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

PINNED = {
    "torch": "2.15.0",
    "transformers": "5.25.0",
    "numpy": "2.4.6",
}

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path(os.path.expanduser("~/.cache/sprout/grpo/smollm2-f32"))
DEFAULT_OUT = REPO / "tests" / "fixtures" / "mismatch_floor.json"
SEED = 0
SAMPLES = 2
MAX_NEW_TOKENS = 48
PROMPTS = [
    "Name three colours of the rainbow and say what each makes you think of.",
    "Explain in two sentences why the sky is blue.",
]

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

from fixture_io import (  # noqa: E402  (scripts/ is on sys.path)
    check_versions, f32_list, installed_version, model_sha256,
)


def lora_sha256(path):
    """sprout's digest of a PEFT adapter directory."""
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        h.update((Path(path) / name).read_bytes())
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--lora", type=Path, help="a PEFT LoRA adapter directory")
    args = parser.parse_args()
    check_versions(PINNED)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(SEED)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    if args.lora:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.lora).eval()
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.data = p.data.float()
    samples = []
    with torch.inference_mode():
        for prompt in PROMPTS:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            for _ in range(SAMPLES):
                out = model.generate(
                    torch.tensor([prompt_ids]),
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=MAX_NEW_TOKENS,
                    pad_token_id=tokenizer.eos_token_id,
                )
                completion = out[0, len(prompt_ids):].tolist()
                # Teacher-forced, as a trainer computes it: one forward pass over the whole
                # sequence, the log-softmax of the logits before each completion token.
                ids = torch.tensor([prompt_ids + completion])
                logits = model(ids).logits[0].float()
                logp = torch.log_softmax(logits, dim=-1)
                at = torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1)
                picked = logp[at, ids[0, at + 1]]
                samples.append({
                    "prompt_token_ids": prompt_ids,
                    "token_ids": completion,
                    "logprobs": f32_list(picked.tolist()),
                })
                print(f"sample {len(samples)}: {len(completion)} tokens", file=sys.stderr)
    fixture = {
        "what": "transformers float32 log-probs of sampled completions (sprout mismatch's floor)",
        "script": "scripts/mismatch_floor.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": "float32",
        "attn_implementation": "eager",
        "model": args.model.name,
        "model_sha256": model_sha256(args.model),
        "seed": SEED,
    }
    if args.lora:
        fixture["lora"] = {
            "name": args.lora.name,
            "sha256": lora_sha256(args.lora),
            "peft": installed_version("peft"),
        }
    fixture["samples"] = samples
    args.out.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
