#!/usr/bin/env python3
"""Check that Hugging Face transformers loads what `sprout export` writes, and record what
it computes there as a fixture for sprout's own test (tests/export.rs).

1. Exports the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) to f32 and to bf16 with
   the release binary (target/release/sprout; build it first), and the tiny fixtures
   (tests/fixtures/tiny-llama, tiny-llama-tied, tiny-qwen2) to f32.
2. Loads each with AutoModelForCausalLM and AutoTokenizer and fails on any missing,
   unexpected or mismatched weight, on a tokenizer class other than the generic fast one,
   or on a config that transformers reads differently from sprout's export.
3. Cross-checks the f32 export of SmolLM2 against tests/fixtures/smollm2.json (transformers
   on the GGUF itself, which undoes llama.cpp's q/k permutation on its own): the prompt ids
   and greedy tokens must be equal and the log-probs within 1e-4; and each tiny export
   against its reference.json logits (within 1e-5).
4. Writes tests/fixtures/export_smollm2.json (a few KB): for each of the SmolLM2 fixture's
   prompts, the prompt ids transformers' tokenizer gives on the exported tokenizer.json,
   the top-5 logits (ids and values) at every prompt position, and 16 greedy tokens with
   their log-probs; plus a chat rendered by the exported chat template
   (apply_chat_template) and its ids.

The venv (exact versions; the script warns when the installed ones differ):
  python3 -m venv /root/.cache/sprout/venv
  /root/.cache/sprout/venv/bin/pip install torch==2.15.0 transformers==4.57.6 \\
      safetensors==0.8.0 tokenizers==0.22.2 numpy==2.4.6
(torch 2.15.0 from PyPI is the CUDA build; the script runs it on the CPU.)

Run from the repository root, after `cargo build --release`:
  /root/.cache/sprout/venv/bin/python scripts/check_export.py [--out tests/fixtures]
It takes about a minute on 2 cores and is deterministic (CPU, float32, fixed prompts).
"""

import argparse
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (its helpers; importing it runs nothing)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

PINNED = {
    "torch": "2.15.0",
    "transformers": "4.57.6",
    "safetensors": "0.8.0",
    "tokenizers": "0.22.2",
    "numpy": "2.4.6",
}
SPROUT = mf.REPO / "target" / "release" / "sprout"
N_GREEDY = 16
TOP_K = 5
CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Name three primary colours."},
]


def check_versions():
    for pkg, want in PINNED.items():
        have = importlib.metadata.version(pkg)
        if have.split("+")[0] != want:
            print(f"WARNING: {pkg} {have} installed, {want} pinned; figures may differ",
                  file=sys.stderr)


def export(model, out, dtype="f32"):
    cmd = [str(SPROUT), "export", "--out", str(out), "--dtype", dtype]
    if model is not None:
        cmd += ["--model", str(model)]
    subprocess.run(cmd, check=True)


def load(directory, dtype=torch.float32):
    """The exported model, checked to load whole: no weight missing, unexpected or resized."""
    model, info = AutoModelForCausalLM.from_pretrained(
        directory, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info[kind], f"{directory}: {kind} {info[kind]}"
    tok = AutoTokenizer.from_pretrained(directory)
    assert isinstance(tok, PreTrainedTokenizerFast), type(tok)
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model.eval(), tok


def check_tiny(work):
    for name in ("tiny-llama", "tiny-llama-tied", "tiny-qwen2"):
        src = mf.REPO / "tests" / "fixtures" / name
        out = work / name
        export(src, out)
        model, tok = load(out)
        reference = json.loads((src / "reference.json").read_text())
        logits = mf.logits_of(model, reference["input_ids"])
        diff = float((logits - torch.tensor(reference["logits"])).abs().max())
        ids = tok(reference["text"], add_special_tokens=False).input_ids
        assert ids == reference["text_ids"], f"{name}: {ids}"
        print(f"{name}: transformers on the export vs reference.json, logits max |diff| {diff:.2e}")
        assert diff <= 1e-5, f"{name}: logits differ by {diff}"


def smollm2_case(model, tok, name, text, gguf_case):
    ids = tok(text).input_ids
    assert ids == gguf_case["prompt_ids"], f"{name}: {ids} != {gguf_case['prompt_ids']}"
    greedy = mf.greedy_cached(model, ids, N_GREEDY)
    _, _, lp, _ = mf.teacher_forced(model, ids, greedy)
    assert greedy == gguf_case["greedy_ids"][:N_GREEDY], f"{name}: greedy {greedy}"
    lp_diff = float((lp - torch.tensor(gguf_case["greedy_logprobs"][:N_GREEDY])).abs().max())
    logits = mf.logits_of(model, ids)
    top = torch.topk(logits, TOP_K, dim=-1)
    print(f"  {name}: {len(ids)} prompt ids, greedy {N_GREEDY}/{N_GREEDY} as on the GGUF, "
          f"log-probs max |diff| {lp_diff:.2e} against transformers on the GGUF")
    assert lp_diff <= 1e-4, f"{name}: log-probs differ from the GGUF's by {lp_diff}"
    return {
        "name": name,
        "text": text,
        "prompt_ids": ids,
        "top_ids": top.indices.tolist(),
        "top_logits": [mf.f32_list(row) for row in top.values],
        "greedy_ids": greedy,
        "greedy_logprobs": mf.f32_list(lp),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(mf.REPO / "tests" / "fixtures"), help="fixture folder")
    args = ap.parse_args()
    check_versions()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    if not SPROUT.exists():
        sys.exit(f"no {SPROUT}: run `cargo build --release` first")
    gguf = json.loads((mf.REPO / "tests" / "fixtures" / "smollm2.json").read_text())
    cases = {p["name"]: p for p in gguf["prompts"]}

    with tempfile.TemporaryDirectory(prefix="sprout-check-export-") as tmp:
        work = Path(tmp)
        check_tiny(work)

        bf16 = work / "smollm2-bf16"
        export(None, bf16, "bf16")
        model, _ = load(bf16, dtype="auto")
        assert model.dtype == torch.bfloat16, model.dtype
        print(f"smollm2 bf16: loads as {model.dtype}, every weight present")
        del model

        f32 = work / "smollm2-f32"
        export(None, f32)
        model, tok = load(f32)
        print("smollm2 f32: every weight present; against transformers on the GGUF:")
        prompts = [smollm2_case(model, tok, name, text, cases[name])
                   for name, text in mf.SMOLLM2_PROMPTS]
        chat_text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
        chat_ids = tok(chat_text).input_ids

    fixture = {
        "model": gguf["model"],
        "gguf_sha256": gguf["gguf_sha256"],
        **mf.versions(),
        "export": "sprout export --dtype f32 of the default model; transformers in float32 "
                  "(eager attention) on the CPU",
        "top_k": TOP_K,
        "top": "top_ids/top_logits: the TOP_K largest logits at every prompt position, "
               "largest first",
        "greedy": f"{N_GREEDY} argmax tokens with a KV cache, no EOS stopping; log-probs "
                  "teacher forced over prompt_ids + greedy_ids",
        "prompts": prompts,
        "chat": {"messages": CHAT, "text": chat_text, "ids": chat_ids},
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out) / "export_smollm2.json"
    mf.write_json(out, fixture)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
