//! A `tokenizers` tokenizer built from a GGUF file's SentencePiece vocabulary
//! (`tokenizer.ggml.model == "llama"`): `tokenizer.ggml.tokens`, `.scores` and
//! `.token_type`, byte fallback through the `<0xNN>` tokens.
//!
//! What transformers builds from such a file depends on `general.architecture`; sprout
//! builds the same, and refuses by name what it does not match:
//!
//! | architecture       | tokenizer (transformers' `GGUFGemmaConverter`) |
//! |--------------------|--------------------------------------------------|
//! | `gemma2`, `gemma3` | a Unigram model over (token, score) with byte fallback, unknown id `tokenizer.ggml.unknown_token_id`; `<0x09>` renamed `\t` and every all-whitespace piece with a space renamed to that many `▁`; normalizer Replace(" ", "▁"); pre-tokenizer Split(" ", merged with previous); decoder Replace("▁", " "), ByteFallback, Fuse. Needs `tokenizer.ggml.add_space_prefix = false`: with it true or absent transformers strips a leading space on decoding that encoding never added |
//!
//! Any other architecture (Llama 2's `GGUFLlamaConverter`, a BPE whose merges transformers
//! derives from the scores) is refused, naming it.
//!
//! Special tokens: control tokens (token_type 3, e.g. `<start_of_turn>`, `<unused0>`)
//! become special added tokens and user-defined ones (4, e.g. `<table>`) plain added
//! tokens, matched in the raw text, so each encodes to its one id wherever it stands (as
//! the model's own tokenizer and llama.cpp do). transformers' GGUF loader adds only pad,
//! eos, bos and unk, leaving the rest to the Unigram, which takes them whole in most text
//! but splits a few beside markup (`><mask><` gives `><`, `mask`, `><`);
//! tests/fixtures/gemma3_tokenizer.json records both. User-defined tokens made only of
//! whitespace (`\n\n`, runs of spaces or tabs) are left to the Unigram: no ordinary piece
//! holds those characters, so it takes the same pieces, and registering them would change
//! how a longer run splits. BOS/EOS are added as `tokenizer.ggml.add_bos_token` and
//! `add_eos_token` say (the BPE path's rule).
//!
//! Input is hostile: the token, score and type arrays must have one entry per token
//! (checked before anything is built from them), every score must be a finite number, and
//! the unknown id must be a token; each error names the field.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::{AddedToken, DecoderWrapper, SplitDelimiterBehavior};

use crate::error::SproutError;
use crate::formats::gguf::GgufMetadata;
use crate::tokenizer::gguf_vocab::{
    TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED, missing, post_processor,
};

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
    if meta.bool("tokenizer.ggml.add_space_prefix")? != Some(false) {
        return Err(bad(format!(
            "a {arch} SentencePiece vocabulary needs tokenizer.ggml.add_space_prefix = false \
             (transformers' tokenizer for it strips a leading space on decoding that encoding \
             never adds); this file has {:?}",
            meta.bool("tokenizer.ggml.add_space_prefix")?
        )));
    }
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
        id => id.map(|id| id as usize),
    };

    let vocab: Vec<(String, f64)> = tokens
        .iter()
        .zip(scores)
        .map(|(t, s)| (piece(t), s))
        .collect();
    let unigram = Unigram::from(vocab, unk, true)
        .map_err(|e| bad(format!("cannot build the Unigram model: {e}")))?;
    let mut tokenizer = tokenizers::Tokenizer::new(unigram);
    let replace = Replace::new(" ", SPACE_MARK).map_err(|e| bad(format!("bad normalizer: {e}")))?;
    tokenizer.with_normalizer(Some(replace));
    let split = Split::new(" ", SplitDelimiterBehavior::MergedWithPrevious, false)
        .map_err(|e| bad(format!("bad pre-tokenizer: {e}")))?;
    tokenizer.with_pre_tokenizer(Some(split));
    let decoders: Vec<DecoderWrapper> = vec![
        // The normalizer's Replace is also the decoder's.
        Replace::new(SPACE_MARK, " ")
            .map_err(|e| bad(format!("bad decoder: {e}")))?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));

    let added = |ty: i64| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(&types)
            .filter(|&(t, &k)| k == ty && !t.chars().all(char::is_whitespace))
            .map(|(t, _)| {
                AddedToken::from(t.to_string(), ty == TOKEN_TYPE_CONTROL).normalized(false)
            })
            .collect()
    };
    tokenizer.add_special_tokens(&added(TOKEN_TYPE_CONTROL));
    tokenizer.add_tokens(&added(TOKEN_TYPE_USER_DEFINED));
    if let Some(post) = post_processor(meta, &tokens)? {
        tokenizer.with_post_processor(Some(post));
    }
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

/// The Unigram piece for GGUF token `token`, renamed as transformers' Gemma converter
/// renames it: the tab byte token is the tab itself, and an all-whitespace token holding a
/// space is that many `▁` (one per character, whatever the others were).
fn piece(token: &str) -> String {
    if token == "<0x09>" {
        return "\t".into();
    }
    if token.contains(' ') && token.chars().all(python_isspace) {
        return SPACE_MARK.repeat(token.chars().count());
    }
    token.to_string()
}

/// Python's `str.isspace` for one character (what `strip()` removes): Unicode White_Space
/// and the four information separators U+001C..U+001F.
fn python_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::formats::gguf::{GgufFile, GgufValue};
    use crate::tokenizer::Tokenizer;

    /// A tiny Gemma-style vocabulary: specials, whitespace runs, markup, the 256 byte
    /// tokens, then pieces scored as merge ranks.
    fn vocab_gguf() -> GgufWriter {
        let mut entries: Vec<(String, f32, i32)> = vec![
            ("<pad>".into(), -1000.0, 3),
            ("<eos>".into(), -1000.0, 3),
            ("<bos>".into(), -1000.0, 3),
            ("<unk>".into(), -1000.0, 3),
            ("<start_of_turn>".into(), -1000.0, 3),
            ("<end_of_turn>".into(), -1000.0, 3),
            ("\n".into(), -1000.0, 4),
            ("  ".into(), -1000.0, 4),
            ("<table>".into(), -1000.0, 4),
        ];
        entries.extend((0..=255).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
        let pieces = [
            "▁", "h", "e", "l", "o", "w", "r", "d", "he", "llo", "hello", "▁w", "or",
        ];
        // A lone ▁ scores below half of ▁▁, so two spaces are one piece.
        let score = |i: usize, p: &str| if p == "▁" { -600.0 } else { -(i as f32) };
        entries.extend(
            pieces
                .iter()
                .enumerate()
                .map(|(i, p)| (p.to_string(), score(i, p), 1)),
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

    fn tokenizer(w: &GgufWriter) -> Result<Tokenizer, SproutError> {
        let file = GgufFile::from_reader(Cursor::new(w.to_bytes()))?;
        Tokenizer::from_gguf(file.metadata())
    }

    #[test]
    fn specials_spaces_and_bytes() {
        let t = tokenizer(&vocab_gguf()).unwrap();
        let id = |s: &str| t.token_to_id(s).unwrap();
        // The all-space piece is renamed as transformers renames it.
        assert_eq!(t.id_to_token(7).as_deref(), Some("▁▁"));
        let ids = t.encode("<start_of_turn>hello  he<end_of_turn>").unwrap();
        assert_eq!(ids[..3], [2, 4, id("hello")]);
        assert!(ids.contains(&7), "two spaces are the one ▁▁ piece: {ids:?}");
        assert_eq!(*ids.last().unwrap(), 5);
        assert_eq!(t.encode_with("h<table>", false).unwrap(), [id("h"), 8]);
        // No piece for é: its two bytes.
        assert_eq!(
            t.encode_with("é", false).unwrap(),
            [id("<0xC3>"), id("<0xA9>")]
        );
        for text in [
            "<start_of_turn>hello  world<end_of_turn>\n",
            " é\t<table>",
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
    fn what_cannot_be_matched_is_refused_by_name() {
        let err = |w: GgufWriter| tokenizer(&w).err().unwrap().to_string();
        let e =
            err(vocab_gguf().metadata("general.architecture", GgufValue::String("llama".into())));
        assert!(
            e.contains("`llama`") && e.contains("general.architecture"),
            "{e}"
        );
        let e = err(vocab_gguf().without_metadata("tokenizer.ggml.add_space_prefix"));
        assert!(e.contains("tokenizer.ggml.add_space_prefix"), "{e}");
        let e = err(vocab_gguf().metadata(
            "tokenizer.ggml.scores",
            GgufValue::Array(vec![GgufValue::F32(0.0)]),
        ));
        assert!(e.contains("tokenizer.ggml.scores has 1 entries"), "{e}");
        let mut scores = vec![GgufValue::F32(0.0); 278];
        scores[5] = GgufValue::F32(f32::NAN);
        let e = err(vocab_gguf().metadata("tokenizer.ggml.scores", GgufValue::Array(scores)));
        assert!(e.contains("tokenizer.ggml.scores[5]"), "{e}");
        let e = err(vocab_gguf().metadata("tokenizer.ggml.unknown_token_id", GgufValue::U32(9999)));
        assert!(e.contains("tokenizer.ggml.unknown_token_id 9999"), "{e}");
        let e = err(vocab_gguf().without_metadata("tokenizer.ggml.token_type"));
        assert!(e.contains("tokenizer.ggml.token_type"), "{e}");
        let e = err(vocab_gguf().metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(9999)));
        assert!(e.contains("tokenizer.ggml.bos_token_id"), "{e}");
    }
}
