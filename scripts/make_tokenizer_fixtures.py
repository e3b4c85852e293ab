#!/usr/bin/env python3
"""Make tests/fixtures/gemma3_tokenizer.json: the token ids Google's sentencepiece library
gives for Gemma 3 270M's SentencePiece vocabulary, read from its GGUF file.

sprout builds its tokenizer from the same GGUF vocabulary (src/tokenizer/gguf_spm.rs);
tests/tokenizer_gguf.rs asserts that it gives exactly these ids and decodes them back.

The reference is scripts/gguf_sentencepiece.py: sentencepiece 0.2.1 run on a BPE
ModelProto built from the file's pieces, scores and types (Gemma's own tokenizer.model is a
SentencePiece BPE; the scores are merge priorities), with control and user-defined pieces
(turn markers, runs of spaces, tabs and newlines) matched in the raw text first, longest
first. Each case holds:

- `ids`, `ids_with_bos`: sentencepiece's ids without and with BOS (the file says
  add_bos_token = true): what sprout must give;
- `decoded`: sentencepiece's decoding of `ids`, control tokens written out; the script
  asserts it is the text;
- `transformers_ids`, `transformers_differs`: for information, the ids of transformers'
  own GGUF tokenizer (`AutoTokenizer.from_pretrained(dir, gguf_file=name)`,
  GGUFGemmaConverter: a Unigram over the scores, with only pad, eos, bos and unk as added
  tokens), and whether they differ from `ids`.

Run from the repository root with the venv described in scripts/README.md (about 40 s):
  /root/.cache/sprout/venv/bin/python scripts/make_tokenizer_fixtures.py [--gguf PATH] [--out FILE]
Without --gguf the file is $SPROUT_GEMMA3_GGUF, else sprout's cached copy
(~/.cache/sprout/models/gemma-3-270m-q4_k_m.gguf, which `sprout model-path gemma3-270m`
fetches). Output is deterministic.
"""

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path

from gguf_sentencepiece import GgufSentencePiece  # scripts/ is on sys.path

REPO = Path(__file__).resolve().parent.parent
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PINNED = {
    "sentencepiece": "0.2.1",
    "protobuf": "7.36.2",
    "gguf": "0.19.0",
    "transformers": "4.57.6",
    "tokenizers": "0.22.2",
}

TEXTS = [
    ("empty", ""),
    ("english", "Hello, world! How are you doing today?"),
    ("digits", "0 12 345 6789 3.14159 1,000,000 2024-06-01"),
    ("leading_trailing_spaces", "  leading and trailing  "),
    ("single_space", " "),
    ("space_runs", "a b  c   d    e" + " " * 17 + "f"),
    ("tab_runs", "\tx\t\ty\t\t\tz\t\t\t\t"),
    ("newline_runs", "line1\nline2\n\nline3\n\n\n\nend\r\n"),
    ("mixed_whitespace", " \t \n \n\t  x\u00a0y\u3000z "),
    ("code", "def f(x):\n    return {'a': x ** 2}  # square\n\nfor i in range(10):\n\tprint(i)\n"),
    ("json_code", '{"key": [1, 2.5, null], "nested": {"ok": true}}'),
    ("emoji", "\U0001f331\U0001f680 \U0001f469\u200d\U0001f4bb \U0001f44d\U0001f3fd \u2764\ufe0f"),
    ("cjk", "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002\ud55c\uad6d\uc5b4"),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u0436\u0438\u043a"),
    ("accents", "h\u00e9llo w\u00f6rld na\u00efve caf\u00e9 \u00c5ngstr\u00f6m"),
    ("byte_fallback", "\ue000\U000f0000\x00\x7f"),
    (
        "chat_turns",
        "<start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\n",
    ),
    ("specials_adjacent", "<bos><start_of_turn><end_of_turn><eos><pad>x<unk>"),
    ("specials_spaced", " <start_of_turn> user <end_of_turn> "),
    ("control_beside_markup", "><mask>< and ><unused0>< <unused6241>"),
    ("user_defined", "<table><tr><td>1</td></tr></table> [multimodal]<start_of_image>"),
    ("special_lookalike", "<start_of_turn <end_of_turn> > <unused99999>"),
    # A byte token's name in the text is plain text, not that byte.
    ("byte_token_lookalike", "<0x41><0x0A>"),
    ("capital", "The capital of France is"),
    ("german", "Die Hauptstadt von Deutschland ist gr\u00f6\u00dfer als M\u00fcnchen; \u00c4pfel und \u00d6l."),
    (
        "code_indented",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
        "    def push(self, x):\n        if x is not None:\n            self.items.append(x)\n",
    ),
    ("chat_markup", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
]


def find_gguf(arg):
    if arg:
        return Path(arg)
    if os.environ.get("SPROUT_GEMMA3_GGUF"):
        return Path(os.environ["SPROUT_GEMMA3_GGUF"])
    cache = Path(os.environ.get("SPROUT_CACHE_DIR") or Path.home() / ".cache/sprout")
    path = cache / "models" / GGUF_NAME
    if not path.is_file():
        sys.exit(f"no {path}: run `sprout model-path gemma3-270m`, or pass --gguf PATH")
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf")
    parser.add_argument("--out", default=str(REPO / "tests/fixtures/gemma3_tokenizer.json"))
    args = parser.parse_args()
    versions = {name: importlib.metadata.version(name) for name in PINNED}
    if versions != PINNED:
        print(f"warning: versions {versions} differ from the pinned {PINNED}", file=sys.stderr)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from transformers import AutoTokenizer

    gguf = find_gguf(args.gguf)
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert sha == GGUF_SHA256, f"{gguf} has sha256 {sha}, expected {GGUF_SHA256}"
    ref = GgufSentencePiece(gguf)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert type(tok).__name__ == "GemmaTokenizerFast", type(tok)
    cases = []
    for name, text in TEXTS:
        ids = ref.encode(text, add_special_tokens=False)
        hf_ids = tok.encode(text, add_special_tokens=False)
        decoded = ref.decode(ids)
        assert decoded == text, (name, decoded, text)
        cases.append(
            {
                "name": name,
                "text": text,
                "ids": ids,
                "ids_with_bos": ref.encode(text),
                "decoded": decoded,
                "transformers_ids": hf_ids,
                "transformers_differs": ids != hf_ids,
            }
        )
    fixture = {
        "model": "Gemma 3 270M (base), Q4_K_M GGUF",
        "gguf_file": GGUF_NAME,
        "gguf_sha256": sha,
        "vocab_size": ref.sp.get_piece_size(),
        "versions": versions,
        "made_by": "scripts/make_tokenizer_fixtures.py",
        "ids": "sentencepiece (scripts/gguf_sentencepiece.py: a BPE ModelProto of the file's "
        "pieces, scores and types; control and user-defined pieces matched in the raw text "
        "first, longest first), no BOS",
        "ids_with_bos": "the same with BOS first, as the file's tokenizer.ggml.add_bos_token = "
        "true says",
        "decoded": "sentencepiece's decoding of ids, control tokens written out; equals the text",
        "transformers_ids": "for information: transformers' GGUF tokenizer "
        "(AutoTokenizer.from_pretrained(dir, gguf_file=...), a Unigram over the scores, only "
        "pad, eos, bos and unk added), add_special_tokens=False",
        "transformers_differs": "whether transformers_ids differs from ids",
        "cases": cases,
    }
    # One line per case, so that a diff shows which text changed.
    head = json.dumps({k: v for k, v in fixture.items() if k != "cases"}, indent=1, ensure_ascii=False)
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    text = head[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
    json.loads(text)
    Path(args.out).write_text(text)
    differ = [c["name"] for c in cases if c["transformers_differs"]]
    print(f"wrote {args.out}: {len(cases)} texts; transformers' GGUF tokenizer differs on "
          f"{len(differ)}: {differ}")


if __name__ == "__main__":
    main()
