#!/usr/bin/env python3
"""Write a random PEFT LoRA adapter directory for a model's shapes (for `sprout bench
--lora` and manual runs; the PEFT-checked fixtures come from make_lora_fixtures.py).

  python3 scripts/make_random_adapter.py --shape smollm2-135m --rank 16 --out /tmp/lora16

Every projection (q, k, v, o, gate, up, down) of every layer gets A [r, in] and B [out, r]
in float32, drawn from a seeded normal distribution (A scaled by 1/sqrt(in), B by 0.01,
so the adapter moves the model a little, as a trained one does). Needs numpy and
safetensors (the versions pinned in make_fixtures.py); no torch.
"""

import argparse
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

# hidden, q_dim, kv_dim, intermediate, layers
SHAPES = {
    "smollm2-135m": (576, 576, 192, 1536, 30),
    "tiny-llama": None,  # read from tests/fixtures/tiny-llama/config.json
}


def shape_of(name):
    if SHAPES.get(name):
        return SHAPES[name]
    config = json.loads((Path(__file__).parent.parent / "tests" / "fixtures" / name /
                         "config.json").read_text())
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return (config["hidden_size"], heads * head_dim, kv * head_dim,
            config["intermediate_size"], config["num_hidden_layers"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="smollm2-135m",
                    help="smollm2-135m, or a tiny fixture's name under tests/fixtures")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    hidden, q_dim, kv_dim, inter, layers = shape_of(args.shape)
    io = {
        "self_attn.q_proj": (hidden, q_dim), "self_attn.k_proj": (hidden, kv_dim),
        "self_attn.v_proj": (hidden, kv_dim), "self_attn.o_proj": (q_dim, hidden),
        "mlp.gate_proj": (hidden, inter), "mlp.up_proj": (hidden, inter),
        "mlp.down_proj": (inter, hidden),
    }
    rng = np.random.default_rng(args.seed)
    r = args.rank
    tensors = {}
    for layer in range(layers):
        for module, (fan_in, fan_out) in io.items():
            name = f"base_model.model.model.layers.{layer}.{module}"
            a = rng.standard_normal((r, fan_in)) / np.sqrt(fan_in)
            b = rng.standard_normal((fan_out, r)) * 0.01
            tensors[f"{name}.lora_A.weight"] = a.astype(np.float32)
            tensors[f"{name}.lora_B.weight"] = b.astype(np.float32)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA", "r": r, "lora_alpha": args.alpha, "use_rslora": False,
        "target_modules": sorted(m.split(".")[1] for m in io), "bias": "none",
        "lora_dropout": 0.0, "fan_in_fan_out": False, "modules_to_save": None,
        "task_type": "CAUSAL_LM",
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    print(f"{out}: rank {r} on {len(io)} projections x {layers} layers")


if __name__ == "__main__":
    main()
