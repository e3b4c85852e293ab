#!/usr/bin/env python3
"""Make sprout's K-quant GGUF fixtures: tiny random models written as the GGUF files people
download (Q4_K_M's mix of Q4_K, Q6_K and Q5_0; Q5_K with Q5_1), with transformers' results on
those files.

Writes (under tests/fixtures/ unless --out says otherwise), each NAME.gguf + NAME.json:
  tiny-qwen3-q4_k_m   qwen3: q/k RMSNorms, head_dim 128 (q 512 rows, hidden 256), GQA 4/1,
                      tied embedding (Q6_K, as llama.cpp keeps a tied output), attention and
                      MLP Q4_K except v and down in layer 0 (Q6_K, llama.cpp's "more bits"
                      layers), so both the fused q|k|v of one format and of mixed ones run
  tiny-llama3-q4_k_m  llama with Llama 3.1 rope scaling given as `rope_freqs.weight`, q and
                      k permuted as llama.cpp's converter does, untied output Q6_K
  tiny-qwen2-q5_0     qwen2 (q/k/v biases) with hidden 160, not a multiple of 256: every
                      matrix whose rows are 160 values is Q5_0 (as Q4_K_M files of
                      Qwen2.5-0.5B, hidden 896, fall back), down (rows of 256) Q4_K / Q6_K
  tiny-llama-q5_1-q5_k
                      llama (q and k permuted, no rope scaling), attention, MLP and the
                      untied output Q5_K, the embedding and layer 0's q, v and down Q5_1, so
                      q|k|v of mixed formats and of Q5_K alone both run
  NAME.json: the prompt text and ids, 16 greedy tokens, their teacher-forced log-probs and
  every step's top1-top2 logit gap (tests compare tokens up to the first near-tie), and a
  chat (system, user, an assistant turn with a think block, user) as transformers renders
  it with the file's chat template (the family's own: tests/fixtures/chat_templates/).

The reference is transformers loading the GGUF file (`gguf_file=`; it dequantizes through
the `gguf` package). transformers' GGUF reader does not read two things these files say, so
they are passed as config overrides, from the same values the file holds: qwen3's head_dim
(`qwen3.attention.key_length`) and llama's rope scaling (the script writes rope_freqs.weight
from the same llama3 parameters and checks the divisors transformers computes equal them).

Venv: the one scripts/make_fixtures.py pins (torch, transformers, gguf, ...). Run from the
repository root:
  /root/.cache/sprout/venv/bin/python scripts/make_gguf_fixtures.py
Deterministic: twice gives byte-identical files.
"""

import argparse
import copy
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_fixtures as mf  # noqa: E402  (sets the environment, pins, helpers)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as Q, GGUFWriter, TokenType  # noqa: E402
from gguf_kquants import encode  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "tests" / "fixtures" / "chat_templates"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
N_GREEDY = 16
MAX_BYTES = 1_200_000

LLAMA3_SCALING = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=64)

SPECS = [
    dict(
        name="tiny-qwen3-q4_k_m",
        seed=11,
        arch="qwen3",
        vocab_size=352,
        template="qwen3.jinja",
        config=dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=1, head_dim=128,
                    intermediate_size=256, num_hidden_layers=2, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=512,
                    attention_bias=False, use_sliding_window=False, sliding_window=None,
                    max_window_layers=2),
        types=dict(embed=Q.Q6_K, output=None, default=Q.Q4_K, more_bits={0: ("v", "down")},
                   high=Q.Q6_K),
    ),
    dict(
        name="tiny-llama3-q4_k_m",
        seed=12,
        arch="llama",
        vocab_size=320,
        template="llama3.jinja",
        config=dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    intermediate_size=256, num_hidden_layers=2, rope_theta=500000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=512,
                    rope_scaling=LLAMA3_SCALING),
        types=dict(embed=Q.Q4_K, output=Q.Q6_K, default=Q.Q4_K, more_bits={1: ("v", "down")},
                   high=Q.Q6_K),
    ),
    dict(
        name="tiny-qwen2-q5_0",
        seed=13,
        arch="qwen2",
        vocab_size=352,
        template="qwen2.jinja",
        config=dict(hidden_size=160, num_attention_heads=5, num_key_value_heads=1, head_dim=32,
                    intermediate_size=256, num_hidden_layers=2, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=512,
                    use_sliding_window=False, sliding_window=None, max_window_layers=2),
        # Rows of 160 values cannot be K-quants: Q5_0 there, as llama.cpp falls back.
        types=dict(embed=Q.Q5_0, output=Q.Q5_0, default=Q.Q5_0, down=Q.Q4_K,
                   more_bits={0: ("down",)}, high=Q.Q6_K),
    ),
    dict(
        name="tiny-llama-q5_1-q5_k",
        seed=14,
        arch="llama",
        vocab_size=320,
        template="llama3.jinja",
        config=dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=512),
        types=dict(embed=Q.Q5_1, output=Q.Q5_K, default=Q.Q5_K,
                   more_bits={0: ("q", "v", "down")}, high=Q.Q5_1),
    ),
]

# Long enough that positions run past the llama3 model's original context (64).
TEXT = ("<|im_start|>user\nThe old lighthouse keeper climbed the spiral stairs every evening at "
        "dusk. He wound the clock, trimmed the wick, and polished the great lens.<|im_end|>\n"
        "<|im_start|>assistant\n")


def build(spec, common, seed):
    cfg = dict(**common, **spec["config"])
    if spec["arch"] == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**cfg))
    elif spec["arch"] == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**cfg))
    else:
        model = LlamaForCausalLM(LlamaConfig(**cfg, attention_bias=False, mlp_bias=False))
    model = model.float().eval()
    mf.init_weights(model, seed)
    return model


def llama_permute(w, n_head):
    """llama.cpp's converter order for q and k rows: the pairs (i, i + half) of each head
    become adjacent rows (2i, 2i + 1)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_divisors(config):
    """rope_freqs.weight: each pair's frequency divisor under Llama 3.1's scaling, as
    llama.cpp's converter writes it (the base frequency over the scaled one)."""
    s, dim, theta = config["rope_scaling"], config["head_dim"], config["rope_theta"]
    orig = s["original_max_position_embeddings"]
    low_wavelen = orig / s["low_freq_factor"]
    high_wavelen = orig / s["high_freq_factor"]
    out = []
    for i in range(dim // 2):
        freq = 1.0 / theta ** (2 * i / dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(s["factor"])
        else:
            smooth = (orig / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / s["factor"] + smooth))
    bands = [sum(d == 1.0 for d in out), sum(1.0 < d < s["factor"] for d in out),
             sum(d == s["factor"] for d in out)]
    assert all(bands), f"rope bands (kept, smoothed, divided) hold {bands} pairs"
    return np.asarray(out, dtype=np.float32)


def tensor_type(spec, layer, kind):
    t = spec["types"]
    if kind in t.get("more_bits", {}).get(layer, ()):
        return t["high"]
    return t.get(kind, t["default"])


def write_gguf(spec, model, tok, path):
    c, arch = spec["config"], spec["arch"]
    w = GGUFWriter(str(path), arch)
    w.add_name(spec["name"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    if arch == "llama":
        w.add_rope_dimension_count(c["head_dim"])

    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert len(tokens) == spec["vocab_size"]
    merges = [" ".join(m) if isinstance(m, (list, tuple)) else m
              for m in json.loads(tok.to_str())["model"]["merges"]]
    specials = {tok.token_to_id(s) for s in SPECIALS if tok.token_to_id(s) is not None}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([TokenType.CONTROL if i in specials else TokenType.NORMAL
                       for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.token_to_id("<|endoftext|>"))
    w.add_eos_token_id(tok.token_to_id("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template((TEMPLATES / spec["template"]).read_text(encoding="utf-8"))

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}

    def matrix(name, values, qtype):
        w.add_tensor(name, encode(values, qtype), raw_dtype=qtype)

    def vector(name, values):
        w.add_tensor(name, np.ascontiguousarray(values, dtype=np.float32))

    t = spec["types"]
    matrix("token_embd.weight", sd["model.embed_tokens.weight"], t["embed"])
    vector("output_norm.weight", sd["model.norm.weight"])
    if not c["tie_word_embeddings"]:
        matrix("output.weight", sd["lm_head.weight"], t["output"])
    if "rope_scaling" in c:
        vector("rope_freqs.weight", llama3_divisors(c))
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    for i in range(c["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = llama_permute(q, heads), llama_permute(k, kv_heads)
        vector(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        matrix(b + "attn_q.weight", q, tensor_type(spec, i, "q"))
        matrix(b + "attn_k.weight", k, tensor_type(spec, i, "k"))
        matrix(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"], tensor_type(spec, i, "v"))
        if arch == "qwen2":
            for x in "qkv":
                vector(b + f"attn_{x}.bias", sd[p + f"self_attn.{x}_proj.bias"])
        if arch == "qwen3":
            vector(b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"])
            vector(b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"])
        matrix(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"], tensor_type(spec, i, "o"))
        vector(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        matrix(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], tensor_type(spec, i, "gate"))
        matrix(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"], tensor_type(spec, i, "up"))
        matrix(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"], tensor_type(spec, i, "down"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load_reference(spec, path):
    """transformers on the GGUF file, with what its GGUF reader leaves out passed in."""
    c = spec["config"]
    overrides = dict(head_dim=c["head_dim"]) if spec["arch"] == "qwen3" else {}
    if "rope_scaling" in c:
        overrides["rope_scaling"] = c["rope_scaling"]
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager",
        **overrides).eval()
    got = model.config
    head_dim = getattr(got, "head_dim", None) or got.hidden_size // got.num_attention_heads
    assert head_dim == c["head_dim"] and got.tie_word_embeddings == c["tie_word_embeddings"]
    if "rope_scaling" in c:
        plain = 1.0 / (c["rope_theta"] ** (torch.arange(0, c["head_dim"], 2).double() / c["head_dim"]))
        divisors = (plain / model.model.rotary_emb.inv_freq.double()).numpy()
        want = llama3_divisors(c).astype(np.float64)
        assert np.allclose(divisors, want, rtol=1e-5), f"rope divisors {divisors} != {want}"
    return model


def check_same_model(name, model, ref, ids):
    """The file holds the model it was written from, only rounded, and transformers runs it
    as that model: every tensor within a fraction of its range of the float one (a row
    permuted or a tensor misnamed is off by its whole range), and the float model given the
    file's weights computes the file's logits (the config overrides are right)."""
    want, got = model.state_dict(), ref.state_dict()
    assert want.keys() == got.keys(), f"{name}: tensors {set(want) ^ set(got)}"
    for key, w in want.items():
        diff = float((w - got[key]).abs().max())
        assert diff <= 0.15 * float(w.abs().max()), f"{name}: {key} is off by {diff}"
    same = copy.deepcopy(model)
    same.load_state_dict(got)
    diff = float((mf.logits_of(same, ids) - mf.logits_of(ref, ids)).abs().max())
    assert diff < 1e-3, f"{name}: the float model with the file's weights differs by {diff}"


CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "<think>\nThe sky.\n</think>\n\nBlue."},
    {"role": "user", "content": "Another?"},
]


def render_chat(spec, tok):
    """The chat as transformers renders it with the family's template (jinja2)."""
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|im_end|>")
    fast.chat_template = (TEMPLATES / spec["template"]).read_text(encoding="utf-8")
    return fast.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)


def make(spec, out_dir):
    name = spec["name"]
    tok = mf.train_tokenizer(spec["vocab_size"], SPECIALS, True, None)
    common = dict(vocab_size=spec["vocab_size"], bos_token_id=tok.token_to_id("<|endoftext|>"),
                  eos_token_id=tok.token_to_id("<|im_end|>"), hidden_act="silu",
                  attention_dropout=0.0, initializer_range=0.02, use_cache=True)
    prompt_ids = tok.encode(TEXT, add_special_tokens=False).ids
    assert tok.decode(prompt_ids, skip_special_tokens=False) == TEXT
    path = out_dir / f"{name}.gguf"
    for seed in range(spec["seed"] * 1000, spec["seed"] * 1000 + 40):
        torch.manual_seed(seed)
        model = build(spec, common, seed)
        write_gguf(spec, model, tok, path)
        ref = load_reference(spec, path)
        check_same_model(name, model, ref, prompt_ids)
        new_ids = mf.greedy_full_recompute(ref, prompt_ids, N_GREEDY)
        _, _, lp, gaps = mf.teacher_forced(ref, prompt_ids, new_ids)
        if float(gaps.min()) >= mf.MIN_GAP:
            break
    else:
        raise SystemExit(f"{name}: no seed gives a min logit gap >= {mf.MIN_GAP}")
    fixture = {
        **mf.versions(),
        "gguf": mf.installed_version("gguf"),
        "file": path.name,
        "seed": seed,
        "text": TEXT,
        "prompt_ids": prompt_ids,
        "greedy": {
            "token_ids": new_ids,
            "logprobs": mf.f32_list(lp),
            "top2_gaps": mf.f32_list(gaps),
        },
        "chat": {"messages": CHAT, "rendered": render_chat(spec, tok)},
    }
    mf.write_json(out_dir / f"{name}.json", fixture)
    size = path.stat().st_size
    assert size <= MAX_BYTES, f"{path} is {size} bytes"
    print(f"{name}: {size} bytes, prompt {len(prompt_ids)} ids, greedy {new_ids}, "
          f"min gap {float(gaps.min()):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures"), help="output folder")
    ap.add_argument("--only", action="append", help="just this fixture (repeatable)")
    args = ap.parse_args()
    mf.check_versions()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        if not args.only or spec["name"] in args.only:
            make(spec, out_dir)


if __name__ == "__main__":
    main()
