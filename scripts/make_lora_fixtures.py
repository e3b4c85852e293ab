#!/usr/bin/env python3
"""Make sprout's LoRA adapter fixtures with PEFT, on the tiny models of make_fixtures.py and
on the exported default model.

Writes tests/fixtures/lora/<model>/ for each spec below:
  adapter_config.json, adapter_model.safetensors   PEFT's save_pretrained of a seeded random
      adapter (A and B both random: PEFT's own init sets B to zero, a no-op adapter), with
      target_modules sorted (PEFT writes a set, whose order varies between runs);
  reference.json   transformers + PEFT in float32 on the CPU, with the adapter and without:
      the log-prob of each next token of the model's reference input_ids (teacher forced),
      and 16 greedy tokens (no EOS stopping, each step recomputing the whole sequence) from
      the model's reference greedy prompt, with their log-probs and top1-top2 logit gaps;
      the ranks each layer's fused sites get (q|k|v, o, gate|up, down: the sum of the
      ranks of the site's targeted projections), counted on PEFT's own modules, and the
      factor PEFT multiplies each module's B (A x) by (`scales`, a float64).

`smollm2-135m-export` is the default model (SmolLM2-135M-Instruct Q4_1) as `sprout export
--out DIR` writes it (float32; the script runs target/release/sprout, so build it first),
exported afresh into a temporary directory: its reference.json also holds the directory's
`model_sha256` (as sprout computes it), which the test checks its own export against, and
its inputs are text through the exported tokenizer (a sentence teacher forced; a chat-template
prompt for the greedy tokens). Its adapter is kept small, since it is committed: rank 2 on
q_proj, v_proj and down_proj of every layer, BF16 tensors (about 0.5 MB).

The adapters differ in what they exercise (see SPECS): every projection of every layer,
F32, F16 and BF16 tensors, a regex target_modules with exclude_modules, layers_to_transform
with layers_pattern, rank_pattern and alpha_pattern, rsLoRA. Each must move the log-probs by
more than 0.1 and change the greedy tokens, and every greedy step (with the adapter) must
have a top1-top2 logit gap of at least MIN_GAP, or the script fails.

The venv is make_fixtures.py's (torch 2.15.0, transformers 4.57.6, safetensors 0.8.0,
numpy 2.4.6) plus PEFT, pinned here:
  /root/.cache/sprout/venv/bin/pip install peft==0.21.2

Run from the repository root (after make_fixtures.py has made the tiny models, and
`cargo build --release`), all of them or the ones named:
  /root/.cache/sprout/venv/bin/python scripts/make_lora_fixtures.py [MODEL...]

Deterministic: running it twice gives byte-identical files. Floats in reference.json are
the shortest decimal strings that round-trip to the float32 value (parse them as f32).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PINNED = {
    "peft": "0.21.2",
    "torch": "2.15.0",
    "transformers": "4.57.6",
    "safetensors": "0.8.0",
    "numpy": "2.4.6",
}

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from fixture_io import (  # noqa: E402  (scripts/ is on sys.path)
    check_versions, f32, f32_list, installed_version, model_sha256, write_json,
)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SPROUT = REPO / "target" / "release" / "sprout"
EXPORT = "smollm2-135m-export"
# The exported default model's inputs: a sentence scored teacher forced, and a question
# whose answer is drawn greedily (rendered with the model's chat template).
EXPORT_TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening, lit the "
               "lamp, and watched the ships pass")
EXPORT_QUESTION = "Name three colours of the rainbow."
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
N_GREEDY = 16
MIN_GAP = 0.05        # least top1-top2 logit gap on every greedy step with the adapter
MIN_DELTA = 0.1       # least max |log-prob change| the adapter must make
A_STD = 0.1
B_STD = 0.1

SPECS = [
    # Every projection of every layer, F32.
    dict(model="tiny-llama", seed=11, dtype=torch.float32,
         lora=dict(r=8, lora_alpha=16, target_modules=ALL)),
    # Every projection, F16 tensors; Qwen2's q/k/v biases stay the base's.
    dict(model="tiny-qwen2", seed=12, dtype=torch.float16,
         lora=dict(r=8, lora_alpha=16, target_modules=ALL)),
    # Every projection, BF16 tensors; q (128 rows) wider than the hidden size (64).
    dict(model="tiny-qwen3", seed=13, dtype=torch.bfloat16,
         lora=dict(r=8, lora_alpha=16, target_modules=ALL)),
    # A subset of projections on three of four layers (one without RoPE), per-module ranks
    # and alphas where the first matching key wins (layer 3's o_proj gets rank 2, not 4;
    # layer 0's up_proj alpha 32, not 4), rsLoRA. PEFT writes adapter_config.json with
    # sorted keys, so patterns whose order matters are given sorted here: the saved adapter
    # then means what was drawn (make() checks that it gives the same log-probs).
    dict(model="tiny-smollm3", seed=14, dtype=torch.float32,
         lora=dict(r=8, lora_alpha=16, use_rslora=True,
                   target_modules=["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"],
                   layers_to_transform=[0, 1, 3], layers_pattern="layers",
                   rank_pattern={"down_proj": 12, r"layers\.3\.self_attn\.o_proj": 2,
                                 "o_proj": 4},
                   alpha_pattern={r"layers\.0\..*": 32, "up_proj": 4})),
    # A regex target_modules (k and v, gate and up: no q, o or down), one module excluded.
    dict(model="tiny-gemma3", seed=15, dtype=torch.bfloat16,
         lora=dict(r=4, lora_alpha=8,
                   target_modules=r"model\.layers\.\d+\.(self_attn\.[kv]_proj|mlp\.(gate|up)_proj)",
                   exclude_modules=["model.layers.2.mlp.gate_proj"])),
    # The exported default model (30 layers, hidden 576): rank 2 on q (the q|k|v site with
    # k left out), v and down of every layer, BF16: committed, so small.
    dict(model=EXPORT, seed=16, dtype=torch.bfloat16, max_bytes=1_000_000,
         lora=dict(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj", "down_proj"])),
]


def base_model(path):
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager").eval()


def export_default_model(out):
    """The default model exported by sprout (float32) into `out`; sprout's version."""
    if not SPROUT.is_file():
        raise SystemExit(f"{SPROUT} is missing: run cargo build --release first")
    subprocess.run([str(SPROUT), "export", "--out", str(out)], check=True)
    version = subprocess.run([str(SPROUT), "--version"], check=True, capture_output=True,
                             text=True).stdout.strip()
    return version


def export_inputs(model_dir):
    """The exported model's teacher-forced ids and greedy prompt, through its tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    input_ids = tokenizer(EXPORT_TEXT, add_special_tokens=False)["input_ids"]
    text = tokenizer.apply_chat_template([{"role": "user", "content": EXPORT_QUESTION}],
                                         tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return input_ids, prompt_ids


@torch.no_grad()
def logits_of(model, ids):
    return model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0].float()


def next_token_logprobs(model, ids):
    """log p(ids[t + 1] | ids[:t + 1]) for each t: len(ids) - 1 values."""
    logp = torch.log_softmax(logits_of(model, ids), dim=-1)
    return logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


@torch.no_grad()
def greedy(model, prompt_ids, n):
    """n greedy tokens, each step recomputing the whole sequence; their log-probs and gaps."""
    ids = list(prompt_ids)
    for _ in range(n):
        ids.append(int(torch.argmax(logits_of(model, ids)[-1])))
    new = ids[len(prompt_ids):]
    steps = logits_of(model, ids)[len(prompt_ids) - 1:-1]
    assert torch.argmax(steps, -1).tolist() == new, "teacher-forced argmax differs"
    lp = torch.log_softmax(steps, -1).gather(1, torch.tensor(new)[:, None])[:, 0]
    top2 = torch.topk(steps, 2, dim=-1).values
    return new, lp, top2[:, 0] - top2[:, 1]


def randomize(peft_model, seed, dtype, b_std):
    """A and B of every LoRA layer drawn N(0, A_STD) and N(0, b_std), in name order, rounded
    to the dtype the adapter is saved in (so the float32 reference sees the stored values)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(peft_model.named_parameters()):
            if ".lora_A." in name or ".lora_B." in name:
                std = A_STD if ".lora_A." in name else b_std
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
                p.copy_((std * noise).to(dtype).float())


def lora_layers(peft_model):
    return [m for m in peft_model.modules()
            if hasattr(m, "lora_A") and "default" in getattr(m, "lora_A", {})]


def site_ranks(peft_model, n_layers):
    """Per layer [q|k|v, o, gate|up, down]: the sum of the ranks PEFT gave each projection."""
    sites = {"q_proj": 0, "k_proj": 0, "v_proj": 0, "o_proj": 1, "gate_proj": 2, "up_proj": 2,
             "down_proj": 3}
    ranks = [[0, 0, 0, 0] for _ in range(n_layers)]
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            parts = name.split(".")
            layer = int(parts[parts.index("layers") + 1])
            ranks[layer][sites[parts[-1]]] += module.lora_A["default"].weight.shape[0]
    return ranks


def save_adapter(peft_model, d, dtype, base_name):
    """save_pretrained with the LoRA weights in `dtype`, then target_modules sorted."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, p in peft_model.named_parameters():
            if ".lora_" in name:
                p.data = p.data.to(dtype)
        peft_model.save_pretrained(tmp)
        config = json.loads((Path(tmp) / "adapter_config.json").read_text(encoding="utf-8"))
        if isinstance(config["target_modules"], list):
            config["target_modules"] = sorted(config["target_modules"])
        if isinstance(config.get("exclude_modules"), list):
            config["exclude_modules"] = sorted(config["exclude_modules"])
        config["base_model_name_or_path"] = base_name
        text = json.dumps(config, indent=2, sort_keys=True) + "\n"
        (d / "adapter_config.json").write_text(text, encoding="utf-8")
        shutil.copyfile(Path(tmp) / "adapter_model.safetensors", d / "adapter_model.safetensors")


def make(spec):
    name = spec["model"]
    d = FIXTURES / "lora" / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if name != EXPORT:
        base_ref = json.loads((FIXTURES / name / "reference.json").read_text(encoding="utf-8"))
        inputs = base_ref["input_ids"], base_ref["greedy"]["prompt_ids"]
        make_in(spec, d, FIXTURES / name, inputs, base_ref["greedy"]["token_ids"], {})
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "smollm2-f32"
        version = export_default_model(model_dir)
        header = {"exported_by": version, "model_sha256": model_sha256(model_dir)}
        make_in(spec, d, model_dir, export_inputs(model_dir), None, header)


def make_in(spec, d, model_dir, inputs, want_base_greedy, header):
    """The fixture of `spec` into `d`, on the model at `model_dir` with `inputs` (teacher
    forced ids, greedy prompt); `want_base_greedy`: the base's greedy tokens as recorded,
    if they are; `header`: more fields for reference.json, after the model's name."""
    name = spec["model"]
    input_ids, prompt_ids = inputs
    base = base_model(model_dir)
    base_lp = next_token_logprobs(base, input_ids)
    base_greedy, base_glp, _ = greedy(base, prompt_ids, N_GREEDY)
    if want_base_greedy is not None:
        assert base_greedy == want_base_greedy, f"{name}: base greedy moved"

    # Seeds seed * 1000, + 1, ...: the first whose adapter moves the log-probs by more than
    # MIN_DELTA, changes the greedy tokens, and leaves every greedy step a gap of MIN_GAP.
    for field in ("rank_pattern", "alpha_pattern"):
        keys = list(spec["lora"].get(field, {}))
        assert keys == sorted(keys), f"{name}: {field}'s keys must be sorted, as PEFT saves them"
    model = get_peft_model(base_model(model_dir), LoraConfig(task_type="CAUSAL_LM", **spec["lora"]))
    model.eval()
    for seed in range(spec["seed"] * 1000, spec["seed"] * 1000 + 100):
        randomize(model, seed, spec["dtype"], spec.get("b_std", B_STD))
        lp = next_token_logprobs(model, input_ids)
        new, glp, gaps = greedy(model, prompt_ids, N_GREEDY)
        delta = float((lp - base_lp).abs().max())
        if delta > MIN_DELTA and new != base_greedy and float(gaps.min()) >= MIN_GAP:
            break
    else:
        raise SystemExit(f"{name}: no seed makes an adapter that matters with gaps >= {MIN_GAP}")
    ranks = site_ranks(model, model.config.num_hidden_layers)
    max_r = max(m.lora_A["default"].weight.shape[0] for m in lora_layers(model))
    # PEFT's own factor per module (alpha / r, or alpha / sqrt(r)), as a Python float.
    scales = {n: m.scaling["default"] for n, m in sorted(model.base_model.model.named_modules())
              if m in lora_layers(model)}

    save_adapter(model, d, spec["dtype"], name)
    # What was saved, loaded back by PEFT, gives the same log-probs.
    loaded = PeftModel.from_pretrained(base_model(model_dir), d).eval()
    for n, p in loaded.named_parameters():
        if ".lora_" in n:
            p.data = p.data.float()
    again = next_token_logprobs(loaded, input_ids)
    assert torch.equal(again, lp), f"{name}: the saved adapter gives other log-probs"

    reference = {
        "peft": installed_version("peft"),
        "transformers": installed_version("transformers"),
        "torch": installed_version("torch"),
        "model": name,
        **header,
        "seed": seed,
        "adapter": {
            "dtype": str(spec["dtype"]).removeprefix("torch."),
            "max_r": max_r,
            "site_ranks": ranks,
            "scales": scales,
        },
        "input_ids": input_ids,
        "logprobs": f32_list(lp),
        "base_logprobs": f32_list(base_lp),
        "max_abs_logprob_delta": f32(delta),
        "greedy": {
            "prompt_ids": prompt_ids,
            "token_ids": new,
            "logprobs": f32_list(glp),
            "top2_gaps": f32_list(gaps),
            "min_top2_gap": f32(gaps.min()),
            "base_token_ids": base_greedy,
            "base_logprobs": f32_list(base_glp),
        },
    }
    # Each layer's site ranks on a line of their own, however few the layers.
    write_json(d / "reference.json", reference, min_rows=1)
    sizes = {f.name: f.stat().st_size for f in sorted(d.iterdir())}
    assert all(s < spec.get("max_bytes", 200_000) for s in sizes.values()), sizes
    print(f"{name}: site ranks {ranks}, max |log-prob delta| {delta:.3f}, greedy {new} "
          f"(base {base_greedy}), min gap {float(gaps.min()):.3f}, files {sizes}")


def main():
    check_versions(PINNED)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    only = sys.argv[1:]
    for spec in SPECS:
        if not only or spec["model"] in only:
            make(spec)


if __name__ == "__main__":
    main()
