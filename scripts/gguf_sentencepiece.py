"""Google's sentencepiece library on a GGUF file's SentencePiece vocabulary, the reference
sprout's GGUF SentencePiece tokenizer (src/tokenizer/gguf_spm.rs) is checked against.

Used by make_fixtures.py (the prompt ids of tests/fixtures/gemma3_270m.json) and
make_tokenizer_fixtures.py (tests/fixtures/gemma3_tokenizer.json). Needs gguf,
sentencepiece and protobuf (scripts/README.md lists the venv).
"""


class GgufSentencePiece:
    """Google's sentencepiece library run on a GGUF's SentencePiece vocabulary
    (`tokenizer.ggml.model = llama`): a BPE ModelProto of its pieces, scores and types, as
    Gemma's own tokenizer.model is, with the file's space rule (add_space_prefix). Control
    and user-defined pieces (Gemma's turn markers, its runs of spaces, tabs and newlines)
    are matched in the raw text first, longest first, as Hugging Face's and llama.cpp's
    tokenizers do; the text between them goes through sentencepiece.

    transformers' own GGUF tokenizer for Gemma builds a Unigram model over these scores,
    which are BPE ranks, and splits " capital" into four pieces; this is the reference
    sprout's tokenizer is checked against instead (the hub's tokenizer.json, a BPE, agrees
    with it)."""

    def __init__(self, path):
        from gguf import GGUFReader
        from sentencepiece import SentencePieceProcessor
        from sentencepiece import sentencepiece_model_pb2 as pb
        f = GGUFReader(str(path)).fields
        assert f["tokenizer.ggml.model"].contents() == "llama"
        tokens = f["tokenizer.ggml.tokens"].contents()
        scores = f["tokenizer.ggml.scores"].contents()
        types = f["tokenizer.ggml.token_type"].contents()
        unk = f["tokenizer.ggml.unknown_token_id"].contents()
        self.bos = f["tokenizer.ggml.bos_token_id"].contents()
        self.add_bos = f["tokenizer.ggml.add_bos_token"].contents()
        prefix = f["tokenizer.ggml.add_space_prefix"].contents() \
            if "tokenizer.ggml.add_space_prefix" in f else True
        m = pb.ModelProto()
        m.trainer_spec.model_type = pb.TrainerSpec.BPE
        m.trainer_spec.byte_fallback = True
        m.trainer_spec.split_by_whitespace = False
        m.normalizer_spec.name = "identity"
        m.normalizer_spec.add_dummy_prefix = bool(prefix)
        m.normalizer_spec.remove_extra_whitespaces = False
        m.normalizer_spec.escape_whitespaces = True
        kinds = {1: "NORMAL", 2: "UNKNOWN", 3: "CONTROL", 4: "USER_DEFINED", 5: "UNUSED",
                 6: "BYTE"}
        for i, (t, sc, ty) in enumerate(zip(tokens, scores, types)):
            p = m.pieces.add()
            p.piece, p.score = t, sc
            p.type = getattr(pb.ModelProto.SentencePiece, "UNKNOWN" if i == unk else kinds[ty])
        self.sp = SentencePieceProcessor(model_proto=m.SerializeToString())
        self.specials = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)}
        self.controls = {i: t for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3}
        self.longest = max(len(t) for t in self.specials)

    def encode(self, text, add_special_tokens=True):
        ids, plain, i = [], "", 0
        while i < len(text):
            for n in range(min(self.longest, len(text) - i), 0, -1):
                if text[i:i + n] in self.specials:
                    break
            else:
                plain += text[i]
                i += 1
                continue
            ids += self.sp.encode(plain) if plain else []
            ids.append(self.specials[text[i:i + n]])
            plain, i = "", i + n
        ids += self.sp.encode(plain) if plain else []
        return ([self.bos] if add_special_tokens and self.add_bos else []) + ids

    def decode(self, ids):
        """The text of `ids`, control tokens written out (sentencepiece drops them)."""
        out, run = [], []
        for i in ids:
            if i in self.controls:
                out += [self.sp.decode(run), self.controls[i]] if run else [self.controls[i]]
                run = []
            else:
                run.append(i)
        return "".join(out) + (self.sp.decode(run) if run else "")
