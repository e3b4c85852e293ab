//! A `tokenizers` tokenizer built from a GGUF file's SentencePiece vocabulary
//! (`tokenizer.ggml.model == "llama"`): `tokenizer.ggml.tokens`, `.scores` and
//! `.token_type`. It encodes as the model's own SentencePiece BPE tokenizer
//! (`tokenizer.model`) does, which is what the model was trained on.
//!
//! The scores of such a file are BPE merge priorities (Gemma's are minus the rank), so the
//! model is a `tokenizers` BPE whose merges come from them ([`crate::tokenizer::spm_merges`]),
//! with byte fallback: a character no piece holds becomes its UTF-8 bytes' `<0xNN>` tokens.
//! The normalizer writes each space as `▁`, after a leading `▁` when
//! `tokenizer.ggml.add_space_prefix` is true or absent (SentencePiece's add_dummy_prefix);
//! there is no pre-tokenizer (pieces may hold `▁` anywhere). Each stretch of text between
//! added tokens (below) is normalized alone, so each gets the prefix, as SentencePiece run
//! on each stretch and llama.cpp do. The decoder turns `▁` back
//! into spaces, joins byte tokens into characters, and strips the one leading space the
//! prefix added. (transformers' GGUF loader builds a Unigram over these scores instead,
//! which splits `▁capital` into `▁c ap it al`; tests/fixtures/gemma3_tokenizer.json counts
//! where it differs.)
//!
//! Control tokens (token_type 3, e.g. `<start_of_turn>`, `<unused0>`) become special added
//! tokens and user-defined ones (4: `<table>`, and Gemma's runs of spaces, tabs and
//! newlines, stored with literal whitespace) plain added tokens, all matched in the raw
//! text before normalization, longest first, so each encodes to its one id wherever it
//! stands and a run of whitespace takes the longest run token (as the model's own tokenizer
//! and llama.cpp do). BOS/EOS are added as `tokenizer.ggml.add_bos_token` and
//! `add_eos_token` say.
//!
//! Only `general.architecture` gemma2 and gemma3 are built: they are what sprout checks
//! against SentencePiece itself (tests/tokenizer_gguf.rs). Another architecture (Llama 2's
//! SentencePiece files) is refused, naming it.
//!
//! Input is hostile: the token, score and type arrays must have one entry per token
//! (checked before anything is built from them), every score must be a finite number, no
//! token may be listed twice, normal pieces are bounded in length, and the unknown id must
//! be a token; each error names the field.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::utils::Sequence as NormalizerSequence;
use tokenizers::{DecoderWrapper, NormalizerWrapper};

use crate::error::SproutError;
use crate::formats::gguf::GgufMetadata;
use crate::tokenizer::gguf_vocab::{add_specials, missing};
use crate::tokenizer::spm_merges::merges;

/// SentencePiece's word-boundary mark, which stands for a space in pieces.
const SPACE_MARK: &str = "\u{2581}";

fn bad(message: String) -> SproutError {
    SproutError::Tokenizer(message)
}

/// Builds the tokenizer a `tokenizer.ggml.model = llama` vocabulary describes.
pub fn build(meta: &GgufMetadata) -> Result<tokenizers::Tokenizer, SproutError> {
    let arch = meta.str("general.architecture")?.unwrap_or("(absent)");
    if !matches!(arch, "gemma2" | "gemma3") {
        return Err(bad(format!(
            "a SentencePiece GGUF vocabulary (tokenizer.ggml.model = llama) is supported for \
             general.architecture gemma2 and gemma3, not `{arch}`; load the model's \
             tokenizer.json instead"
        )));
    }
    let space_prefix = meta
        .bool("tokenizer.ggml.add_space_prefix")?
        .unwrap_or(true);
    let tokens = meta
        .strings("tokenizer.ggml.tokens")?
        .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
    let scores = scores(meta, tokens.len())?;
    let types = meta
        .integers("tokenizer.ggml.token_type")?
        .ok_or_else(|| missing("tokenizer.ggml.token_type"))?;
    if types.len() != tokens.len() {
        return Err(bad(format!(
            "tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    let unk = match meta.u64("tokenizer.ggml.unknown_token_id")? {
        Some(id) if id >= tokens.len() as u64 => {
            return Err(bad(format!(
                "tokenizer.ggml.unknown_token_id {id} is outside the vocabulary of {} tokens",
                tokens.len()
            )));
        }
        id => id.map(|id| tokens[id as usize].to_string()),
    };

    let mut vocab = Vocab::with_capacity(tokens.len());
    for (id, &token) in tokens.iter().enumerate() {
        if let Some(first) = vocab.insert(token.to_string(), id as u32) {
            return Err(bad(format!(
                "tokenizer.ggml.tokens[{id}] repeats tokens[{first}] ({token:?})"
            )));
        }
    }
    let merges = merges(&tokens, &scores, &types)?;
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true);
    if let Some(unk) = unk {
        bpe = bpe.unk_token(unk);
    }
    let bpe = bpe
        .build()
        .map_err(|e| bad(format!("cannot build the BPE model: {e}")))?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);

    let replace = Replace::new(" ", SPACE_MARK).map_err(|e| bad(format!("bad normalizer: {e}")))?;
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if space_prefix {
        normalizers.push(Prepend::new(SPACE_MARK.into()).into());
    }
    normalizers.push(replace.into());
    tokenizer.with_normalizer(Some(NormalizerSequence::new(normalizers)));
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE_MARK, " ")
            .map_err(|e| bad(format!("bad decoder: {e}")))?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));

    add_specials(&mut tokenizer, meta, &tokens, Some(&types))?;
    Ok(tokenizer)
}

/// `tokenizer.ggml.scores`: one finite number per token.
fn scores(meta: &GgufMetadata, n_tokens: usize) -> Result<Vec<f64>, SproutError> {
    const KEY: &str = "tokenizer.ggml.scores";
    let values = meta.array(KEY)?.ok_or_else(|| missing(KEY))?;
    if values.len() != n_tokens {
        return Err(bad(format!(
            "{KEY} has {} entries for {n_tokens} tokens",
            values.len()
        )));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_f64() {
            Some(s) if s.is_finite() => Ok(s),
            _ => Err(bad(format!("{KEY}[{i}] is {v:?}, not a finite number"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::formats::gguf::{GgufFile, GgufValue};
    use crate::tokenizer::Tokenizer;

    /// A tiny Gemma-style vocabulary: specials, whitespace runs, markup, the 256 byte
    /// tokens, then pieces scored as merge ranks (minus the rank).
    fn vocab_gguf() -> GgufWriter {
        let mut entries: Vec<(String, f32, i32)> = vec![
            ("<pad>".into(), -1000.0, 3),
            ("<eos>".into(), -1000.0, 3),
            ("<bos>".into(), -1000.0, 3),
            ("<unk>".into(), -1000.0, 2),
            ("<start_of_turn>".into(), -1000.0, 3),
            ("<end_of_turn>".into(), -1000.0, 3),
            ("\n".into(), -1000.0, 4),
            ("  ".into(), -1000.0, 4),
            ("<table>".into(), -1000.0, 4),
            ("   ".into(), -1000.0, 4),
        ];
        entries.extend((0..=255).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
        let pieces = [
            "▁", "h", "e", "l", "o", "w", "r", "d", "a", "b", "c", "he", "ll", "llo", "hello",
            "▁w", "or", "bc", "ab",
        ];
        entries.extend(
            pieces
                .iter()
                .enumerate()
                .map(|(i, p)| (p.to_string(), -(i as f32), 1)),
        );
        let (tokens, rest): (Vec<_>, Vec<_>) =
            entries.into_iter().map(|(t, s, k)| (t, (s, k))).unzip();
        let (scores, types): (Vec<_>, Vec<_>) = rest.into_iter().unzip();
        GgufWriter::new()
            .metadata("general.architecture", GgufValue::String("gemma3".into()))
            .metadata("tokenizer.ggml.model", GgufValue::String("llama".into()))
            .metadata(
                "tokenizer.ggml.tokens",
                GgufValue::Array(tokens.into_iter().map(GgufValue::String).collect()),
            )
            .metadata(
                "tokenizer.ggml.scores",
                GgufValue::Array(scores.into_iter().map(GgufValue::F32).collect()),
            )
            .metadata(
                "tokenizer.ggml.token_type",
                GgufValue::Array(types.into_iter().map(GgufValue::I32).collect()),
            )
            .metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(2))
            .metadata("tokenizer.ggml.eos_token_id", GgufValue::U32(1))
            .metadata("tokenizer.ggml.unknown_token_id", GgufValue::U32(3))
            .metadata("tokenizer.ggml.add_bos_token", GgufValue::Bool(true))
            .metadata("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false))
    }

    /// The vocabulary's size: 10 specials, 256 bytes, 19 pieces.
    const N_TOKENS: usize = 285;

    fn tokenizer(w: &GgufWriter) -> Result<Tokenizer, SproutError> {
        let file = GgufFile::from_reader(Cursor::new(w.to_bytes()))?;
        Tokenizer::from_gguf(file.metadata())
    }

    fn pieces(t: &Tokenizer, text: &str) -> Vec<String> {
        let ids = t.encode_with(text, false).unwrap();
        ids.iter().map(|&id| t.id_to_token(id).unwrap()).collect()
    }

    #[test]
    fn merges_by_score_then_leftmost() {
        let t = tokenizer(&vocab_gguf()).unwrap();
        assert_eq!(t.vocab_size(), N_TOKENS);
        assert_eq!(pieces(&t, "hello"), ["hello"]);
        // bc outranks ab wherever it stands; equal pairs join from the left.
        assert_eq!(pieces(&t, "abc"), ["a", "bc"]);
        assert_eq!(pieces(&t, "abab"), ["ab", "ab"]);
        assert_eq!(pieces(&t, "lll"), ["ll", "l"]);
        assert_eq!(pieces(&t, "hell"), ["he", "ll"]);
        assert_eq!(pieces(&t, " wor"), ["▁w", "or"]);
    }

    #[test]
    fn specials_whitespace_runs_and_bytes() {
        let t = tokenizer(&vocab_gguf()).unwrap();
        let id = |s: &str| t.token_to_id(s).unwrap();
        let ids = t.encode("<start_of_turn>hello  he<end_of_turn>").unwrap();
        assert_eq!(
            ids,
            [2, 4, id("hello"), id("  "), id("he"), 5],
            "two spaces are the user-defined run token"
        );
        // The longest run first, then what is left of the run as text.
        assert_eq!(pieces(&t, "h       w"), ["h", "   ", "   ", "▁w"]);
        assert_eq!(pieces(&t, "h    w"), ["h", "   ", "▁w"]);
        assert_eq!(pieces(&t, "h\n\n"), ["h", "\n", "\n"]);
        assert_eq!(t.encode_with("h<table>", false).unwrap(), [id("h"), 8]);
        // No piece for é: its two bytes.
        assert_eq!(pieces(&t, "é"), ["<0xC3>", "<0xA9>"]);
        for text in [
            "<start_of_turn>hello  world<end_of_turn>\n",
            " é\t<table>   x",
            "",
        ] {
            let ids = t.encode_with(text, false).unwrap();
            assert_eq!(t.decode(&ids).unwrap(), text);
        }
        assert_eq!(
            t.decode_with(&t.encode("<start_of_turn>he").unwrap(), true)
                .unwrap(),
            "he"
        );
        let w = vocab_gguf().metadata("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
        assert_eq!(
            tokenizer(&w).unwrap().encode("hello").unwrap(),
            [id("hello")]
        );
    }

    #[test]
    fn the_space_prefix_is_added_and_stripped() {
        for w in [
            vocab_gguf().metadata("tokenizer.ggml.add_space_prefix", GgufValue::Bool(true)),
            vocab_gguf().without_metadata("tokenizer.ggml.add_space_prefix"),
        ] {
            let t = tokenizer(&w).unwrap();
            assert_eq!(pieces(&t, "wor"), ["▁w", "or"]);
            assert_eq!(pieces(&t, ""), Vec::<String>::new());
            let ids = t.encode_with("wor hello", false).unwrap();
            assert_eq!(t.decode(&ids).unwrap(), "wor hello");
            // Each stretch of text between added tokens gets its own prefix.
            assert_eq!(
                pieces(&t, "wor<table>wor"),
                ["▁w", "or", "<table>", "▁w", "or"]
            );
        }
    }

    #[test]
    fn what_cannot_be_matched_is_refused_by_name() {
        let err = |w: GgufWriter| tokenizer(&w).err().unwrap().to_string();
        let e =
            err(vocab_gguf().metadata("general.architecture", GgufValue::String("llama".into())));
        assert!(
            e.contains("`llama`") && e.contains("general.architecture"),
            "{e}"
        );
        let e = err(vocab_gguf().metadata(
            "tokenizer.ggml.scores",
            GgufValue::Array(vec![GgufValue::F32(0.0)]),
        ));
        assert!(e.contains("tokenizer.ggml.scores has 1 entries"), "{e}");
        let mut scores = vec![GgufValue::F32(0.0); N_TOKENS];
        scores[5] = GgufValue::F32(f32::NAN);
        let e = err(vocab_gguf().metadata("tokenizer.ggml.scores", GgufValue::Array(scores)));
        assert!(e.contains("tokenizer.ggml.scores[5]"), "{e}");
        let e = err(vocab_gguf().metadata("tokenizer.ggml.unknown_token_id", GgufValue::U32(9999)));
        assert!(e.contains("tokenizer.ggml.unknown_token_id 9999"), "{e}");
        let e = err(vocab_gguf().without_metadata("tokenizer.ggml.token_type"));
        assert!(e.contains("tokenizer.ggml.token_type"), "{e}");
        let e = err(vocab_gguf().metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(9999)));
        assert!(e.contains("tokenizer.ggml.bos_token_id"), "{e}");
        let mut tokens: Vec<GgufValue> = (0..N_TOKENS)
            .map(|i| GgufValue::String(format!("t{i}")))
            .collect();
        tokens[7] = GgufValue::String("t3".into());
        let e = err(vocab_gguf().metadata("tokenizer.ggml.tokens", GgufValue::Array(tokens)));
        assert!(
            e.contains("tokenizer.ggml.tokens[7] repeats tokens[3]"),
            "{e}"
        );
    }
}
