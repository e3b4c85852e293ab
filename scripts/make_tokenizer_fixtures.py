#!/usr/bin/env python3
"""Make tests/fixtures/gemma3_tokenizer.json: the token ids Hugging Face transformers gives
for Gemma 3 270M's SentencePiece vocabulary, loaded from its GGUF file.

sprout builds its tokenizer from the same GGUF vocabulary (src/tokenizer/gguf_spm.rs);
tests/tokenizer_gguf.rs asserts that it gives exactly these ids and decodes them back.

transformers' GGUF loader (`AutoTokenizer.from_pretrained(dir, gguf_file=name)`,
GGUFGemmaConverter) registers only pad, eos, bos and unk as added tokens; every other
control or user-defined token (`<start_of_turn>`, `<unused0>`, `<table>`) is left to the
Unigram model, which takes it whole in most text but not beside some markup. sprout
registers them as added tokens, as the model's own tokenizer and llama.cpp do. So each case
holds:

- `ids`, `ids_with_special`: transformers' GGUF tokenizer with the file's control tokens
  (token_type 3) registered as special added tokens and its user-defined ones (4, except
  those made only of whitespace) as plain added tokens, all unnormalized: what sprout must
  give, without and with BOS;
- `transformers_ids`, `transformers_ids_with_special`: transformers' GGUF tokenizer as it
  loads;
- `added_tokens_differ`: whether the two differ (only where a control or user-defined
  token stands beside text the Unigram would join it to);
- `decoded`: transformers' `decode(ids)`, special tokens included; the script asserts it
  is the text, except for `byte_token_lookalike` (`<0x41>` written out is the byte token,
  which decodes to `A`).

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

REPO = Path(__file__).resolve().parent.parent
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PINNED = {"transformers": "4.57.6", "tokenizers": "0.22.2", "gguf": "0.19.0"}

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
    # A byte token's name in the text is that piece, which decodes to its byte: the one
    # text here that does not round-trip (in transformers as in sprout).
    ("byte_token_lookalike", "<0x41><0x0A>"),
]
NOT_ROUND_TRIPS = {"byte_token_lookalike"}


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


def token_types(gguf_path):
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields["tokenizer.ggml.token_type"]
    return [
        (bytes(tokens.parts[t]).decode("utf-8"), int(types.parts[k][0]))
        for t, k in zip(tokens.data, types.data)
    ]


def with_added_tokens(tok, gguf_path):
    """transformers' backend tokenizer with the file's control and user-defined tokens
    registered as added tokens (their ids are the vocabulary's)."""
    from tokenizers import AddedToken, Tokenizer

    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    typed = token_types(gguf_path)
    kept = lambda ty: [t for t, k in typed if k == ty and not t.isspace()]
    before = backend.get_vocab_size(with_added_tokens=True)
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in kept(3)])
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t in kept(4)])
    assert backend.get_vocab_size(with_added_tokens=True) == before, "an added token got a new id"
    return backend


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf")
    parser.add_argument("--out", default=str(REPO / "tests/fixtures/gemma3_tokenizer.json"))
    args = parser.parse_args()
    versions = {name: importlib.metadata.version(name) for name in PINNED}
    if versions != PINNED:
        print(f"warning: versions {versions} differ from the pinned {PINNED}", file=sys.stderr)

    from transformers import AutoTokenizer

    gguf = find_gguf(args.gguf)
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert sha == GGUF_SHA256, f"{gguf} has sha256 {sha}, expected {GGUF_SHA256}"
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert type(tok).__name__ == "GemmaTokenizerFast", type(tok)
    ref = with_added_tokens(tok, gguf)
    cases = []
    for name, text in TEXTS:
        ids = ref.encode(text, add_special_tokens=False).ids
        hf_ids = tok.encode(text, add_special_tokens=False)
        decoded = tok.decode(ids)
        assert (decoded == text) != (name in NOT_ROUND_TRIPS), (name, decoded, text)
        cases.append(
            {
                "name": name,
                "text": text,
                "ids": ids,
                "ids_with_special": ref.encode(text).ids,
                "transformers_ids": hf_ids,
                "transformers_ids_with_special": tok.encode(text),
                "added_tokens_differ": ids != hf_ids,
                "decoded": decoded,
            }
        )
    fixture = {
        "model": "Gemma 3 270M (base), Q4_K_M GGUF",
        "gguf_file": GGUF_NAME,
        "gguf_sha256": sha,
        "vocab_size": tok.backend_tokenizer.get_vocab_size(with_added_tokens=True),
        "versions": versions,
        "made_by": "scripts/make_tokenizer_fixtures.py",
        "ids": "transformers' GGUF tokenizer (AutoTokenizer.from_pretrained(dir, gguf_file=...)) "
        "with the file's control tokens registered as special added tokens and its "
        "non-whitespace user-defined tokens as plain added tokens; add_special_tokens=False",
        "ids_with_special": "the same with add_special_tokens=True (BOS first, as the file's "
        "tokenizer.ggml.add_bos_token = true says)",
        "transformers_ids": "transformers' GGUF tokenizer as it loads (only pad, eos, bos and "
        "unk added), add_special_tokens=False; differs from ids only where "
        "added_tokens_differ",
        "decoded": "transformers' decode(ids), special tokens kept; equals the text except in "
        "byte_token_lookalike",
        "cases": cases,
    }
    # One line per case, so that a diff shows which text changed.
    head = json.dumps({k: v for k, v in fixture.items() if k != "cases"}, indent=1, ensure_ascii=False)
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    text = head[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
    json.loads(text)
    Path(args.out).write_text(text)
    differ = [c["name"] for c in cases if c["added_tokens_differ"]]
    print(f"wrote {args.out}: {len(cases)} texts; added tokens change the ids of {differ}")


if __name__ == "__main__":
    main()
