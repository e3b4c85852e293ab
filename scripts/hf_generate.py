#!/usr/bin/env python3
"""Hugging Face transformers' generation speed on sprout's bench workload (the baseline).

    python3 scripts/hf_generate.py MODEL PP TG G [G ...]

MODEL is a Hugging Face model directory, or `smollm2-135m`: SmolLM2-135M's architecture as
a LlamaConfig with random weights (fixed seed), so no model file is needed. One prompt of
PP random token ids is sampled G times (num_return_sequences) for exactly TG new tokens
(temperature 1, nothing cut), in bfloat16 under torch.inference_mode(), on CUDA when torch
sees it, else on the CPU. Per G: one warm-up run, then 3 timed runs (synchronized), and one
JSON line on stdout:

    {"engine": "transformers", "transformers": ..., "torch": ..., "device": ...,
     "dtype": "bfloat16", "g": G, "tokens_per_s_median": ..., "tokens_per_s_best": ...,
     "runs_s": [...]}

tokens/s counts generated tokens (G x TG) over a run's wall time, prefill included, as
`sprout bench` does. Progress goes to stderr.
"""

import json
import statistics
import sys
import time

USAGE = "usage: hf_generate.py MODEL PP TG G [G ...]  (MODEL: a directory or smollm2-135m)"
SEED = 0
TIMED_RUNS = 3


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def smollm2_135m_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        vocab_size=49152,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        hidden_act="silu",
    )


def load_model(name, device, dtype):
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    torch.manual_seed(SEED)
    if name == "smollm2-135m":
        model = LlamaForCausalLM(smollm2_135m_config())
    else:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    return model.to(device=device, dtype=dtype).eval()


def special_ids(config):
    ids = set()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = getattr(config, key, None)
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(i for i in v if isinstance(i, int))
    return ids


def prompt_ids(config, length, device):
    """`length` random token ids that are none of the model's special tokens."""
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    avoid = special_ids(config)
    ids = []
    while len(ids) < length:
        for t in torch.randint(0, config.vocab_size, (length,), generator=g).tolist():
            if t not in avoid and len(ids) < length:
                ids.append(t)
    return torch.tensor([ids], dtype=torch.long, device=device)


def main(argv):
    if len(argv) < 4:
        sys.exit(USAGE)
    name = argv[0]
    pp, tg = int(argv[1]), int(argv[2])
    gs = [int(g) for g in argv[3:]]
    if pp < 1 or tg < 1 or any(g < 1 for g in gs):
        sys.exit("PP, TG and every G must be at least 1")

    import torch
    import transformers

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    dtype = torch.bfloat16
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, {device_name}")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    model = load_model(name, device, dtype)
    config = model.config
    eos = config.eos_token_id
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    ids = prompt_ids(config, pp, device)
    mask = torch.ones_like(ids)

    for g in gs:

        def run():
            out = model.generate(
                ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                num_return_sequences=g,
                max_new_tokens=tg,
                min_new_tokens=tg,
                pad_token_id=eos,
            )
            new = out.shape[1] - pp
            if new != tg:
                raise RuntimeError(f"generated {new} tokens per sequence, expected {tg}")

        runs = []
        with torch.inference_mode():
            torch.manual_seed(SEED + 2)
            run()  # warm-up
            for _ in range(TIMED_RUNS):
                sync()
                t0 = time.perf_counter()
                run()
                sync()
                runs.append(time.perf_counter() - t0)
        rates = [g * tg / s for s in runs]
        log(f"G={g}: " + ", ".join(f"{r:.1f}" for r in rates) + " tokens/s")
        print(
            json.dumps(
                {
                    "engine": "transformers",
                    "transformers": transformers.__version__,
                    "torch": torch.__version__,
                    "device": device_name,
                    "dtype": "bfloat16",
                    "model": name,
                    "prompt_tokens": pp,
                    "max_tokens": tg,
                    "g": g,
                    "tokens_per_s_median": statistics.median(rates),
                    "tokens_per_s_best": max(rates),
                    "runs_s": runs,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
