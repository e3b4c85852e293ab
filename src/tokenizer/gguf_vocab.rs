//! A `tokenizers` tokenizer built from a GGUF file's own vocabulary.
//!
//! `tokenizer.ggml.model == "llama"` (SentencePiece) is [`crate::tokenizer::gguf_spm`]'s.
//! Here: `tokenizer.ggml.model == "gpt2"`, byte-level BPE from `tokenizer.ggml.tokens`
//! and `tokenizer.ggml.merges` (ids are positions in the token list). Tokens whose
//! `tokenizer.ggml.token_type` is control (3) become special added tokens, and user-defined
//! ones (4) plain added tokens, so that `<|im_start|>` in the text encodes to its one id
//! (llama.cpp does the same). BOS is added only when `tokenizer.ggml.add_bos_token` is true
//! and EOS only when `tokenizer.ggml.add_eos_token` is; both default to false for BPE.
//!
//! The pre-tokenizer is chosen by `tokenizer.ggml.pre` and is the one in the model's own
//! `tokenizer.json` (which llama.cpp's regexes reproduce):
//!
//! | `pre`                                  | pre-tokenizer                                     |
//! |----------------------------------------|---------------------------------------------------|
//! | `smollm`                               | each digit alone, then GPT-2's byte-level regex   |
//! | `llama-bpe`, `llama3`, `smaug-bpe`, `dbrx` | Llama 3 regex (digits in runs of 1-3), BPE with `ignore_merges` |
//! | `qwen2`, `deepseek-r1-qwen`            | NFC, then Qwen2's regex (each digit alone)        |
//! | `gpt2`, `gpt-2`, `default`, absent     | GPT-2's byte-level regex                          |
//!
//! Any other `pre` is an error, not a silent guess: token ids must be exactly the model's.
//! Note that transformers' own GGUF loader ignores `pre` and uses the GPT-2 regex for every
//! llama-architecture BPE vocabulary; for SmolLM2 both give the same ids on the texts in
//! tests/fixtures/tokenizer_smollm2.json.

use std::collections::HashMap;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::{SpecialToken, TemplateProcessing};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::error::SproutError;
use crate::formats::gguf::GgufMetadata;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
pub(crate) const TOKEN_TYPE_CONTROL: i64 = 3;
pub(crate) const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Llama 3's split regex (from its tokenizer.json).
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split regex (from its tokenizer.json).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer families sprout knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pre {
    Gpt2,
    SmolLm,
    Llama3,
    Qwen2,
}

impl Pre {
    fn from_name(name: Option<&str>) -> Result<Pre, SproutError> {
        Ok(match name.unwrap_or("default") {
            "gpt2" | "gpt-2" | "default" => Pre::Gpt2,
            "smollm" => Pre::SmolLm,
            "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" | "dbrx" => Pre::Llama3,
            "qwen2" | "deepseek-r1-qwen" => Pre::Qwen2,
            other => {
                return Err(SproutError::Tokenizer(format!(
                    "the GGUF pre-tokenizer `{other}` (tokenizer.ggml.pre) is not supported yet \
                     (supported: smollm, llama-bpe, qwen2, gpt2, default); load the model's \
                     tokenizer.json instead"
                )));
            }
        })
    }

    fn pre_tokenizer(self) -> Result<PreTokenizerWrapper, SproutError> {
        // `trim_offsets` only changes offsets, never ids.
        let byte_level = |use_regex| ByteLevel::new(false, true, use_regex).into();
        let split = |pattern: &str| -> Result<PreTokenizerWrapper, SproutError> {
            let split = Split::new(
                SplitPattern::Regex(pattern.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| SproutError::Tokenizer(format!("bad pre-tokenizer regex: {e}")))?;
            Ok(split.into())
        };
        Ok(match self {
            Pre::Gpt2 => byte_level(true),
            Pre::SmolLm => Sequence::new(vec![Digits::new(true).into(), byte_level(true)]).into(),
            Pre::Llama3 => Sequence::new(vec![split(LLAMA3_PATTERN)?, byte_level(false)]).into(),
            Pre::Qwen2 => Sequence::new(vec![split(QWEN2_PATTERN)?, byte_level(false)]).into(),
        })
    }
}

pub(crate) fn missing(key: &str) -> SproutError {
    SproutError::Tokenizer(format!("the GGUF file has no `{key}`"))
}

/// Which of the GGUF vocabularies the metadata holds: `gpt2` (byte-level BPE, this
/// module's) or `llama` (SentencePiece, `tokenizer::gguf_spm`'s); any other is an error
/// naming it.
pub fn model_kind(meta: &GgufMetadata) -> Result<&str, SproutError> {
    let model = meta
        .str("tokenizer.ggml.model")?
        .ok_or_else(|| missing("tokenizer.ggml.model"))?;
    match model {
        "gpt2" | "llama" => Ok(model),
        _ => Err(SproutError::Tokenizer(format!(
            "GGUF tokenizer model `{model}` is not supported yet (only `gpt2`, byte-level \
             BPE, and `llama`, SentencePiece); load the model's tokenizer.json instead"
        ))),
    }
}

/// Builds the byte-level BPE tokenizer a `tokenizer.ggml.model = gpt2` vocabulary
/// describes.
pub fn build(meta: &GgufMetadata) -> Result<tokenizers::Tokenizer, SproutError> {
    let tokens = meta
        .strings("tokenizer.ggml.tokens")?
        .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
    let merges = meta
        .strings("tokenizer.ggml.merges")?
        .ok_or_else(|| missing("tokenizer.ggml.merges"))?;
    let types = meta.integers("tokenizer.ggml.token_type")?;
    if let Some(types) = &types
        && types.len() != tokens.len()
    {
        return Err(SproutError::Tokenizer(format!(
            "tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    let pre = Pre::from_name(meta.str("tokenizer.ggml.pre")?)?;

    // A token listed twice keeps its last id, as transformers' converter does.
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.to_string(), id as u32))
        .collect();
    let merges = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| SproutError::Tokenizer(format!("merge `{m}` has no space")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre == Pre::Llama3)
        .build()
        .map_err(|e| SproutError::Tokenizer(format!("cannot build the BPE model: {e}")))?;

    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    if pre == Pre::Qwen2 {
        tokenizer.with_normalizer(Some(NFC));
    }
    tokenizer.with_pre_tokenizer(Some(pre.pre_tokenizer()?));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

    add_specials(&mut tokenizer, meta, &tokens, types.as_deref())?;
    Ok(tokenizer)
}

/// What every GGUF vocabulary adds to its model: control tokens (type 3) as special added
/// tokens and user-defined ones (type 4) as plain added tokens, both matched in the raw
/// text; then BOS/EOS around each text when the metadata asks for them.
pub(crate) fn add_specials(
    tokenizer: &mut tokenizers::Tokenizer,
    meta: &GgufMetadata,
    tokens: &[&str],
    types: Option<&[i64]>,
) -> Result<(), SproutError> {
    if let Some(types) = types {
        let added = |ty: i64| -> Vec<AddedToken> {
            tokens
                .iter()
                .zip(types)
                .filter(|&(_, &t)| t == ty)
                .map(|(tok, _)| {
                    AddedToken::from(tok.to_string(), ty == TOKEN_TYPE_CONTROL).normalized(false)
                })
                .collect()
        };
        tokenizer.add_special_tokens(&added(TOKEN_TYPE_CONTROL));
        tokenizer.add_tokens(&added(TOKEN_TYPE_USER_DEFINED));
    }
    if let Some(post) = post_processor(meta, tokens)? {
        tokenizer.with_post_processor(Some(post));
    }
    Ok(())
}

/// BOS/EOS added around each encoded text, when the metadata asks for them.
fn post_processor(
    meta: &GgufMetadata,
    tokens: &[&str],
) -> Result<Option<TemplateProcessing>, SproutError> {
    let mut specials: HashMap<&str, (u32, String)> = HashMap::new();
    for (name, flag, id_key) in [
        (
            "BOS",
            "tokenizer.ggml.add_bos_token",
            "tokenizer.ggml.bos_token_id",
        ),
        (
            "EOS",
            "tokenizer.ggml.add_eos_token",
            "tokenizer.ggml.eos_token_id",
        ),
    ] {
        if meta.bool(flag)?.unwrap_or(false) {
            let id = meta.u64(id_key)?.ok_or_else(|| missing(id_key))?;
            let token = tokens.get(id as usize).ok_or_else(|| {
                SproutError::Tokenizer(format!("`{id_key}` {id} is outside the vocabulary"))
            })?;
            specials.insert(name, (id as u32, token.to_string()));
        }
    }
    if specials.is_empty() {
        return Ok(None);
    }
    let (bos, eos) = (specials.contains_key("BOS"), specials.contains_key("EOS"));
    let wrap = |seq: &str| {
        let mut pieces = Vec::new();
        if bos {
            pieces.push("BOS".to_string());
        }
        pieces.push(seq.to_string());
        if eos {
            pieces.push("EOS".to_string());
        }
        pieces.join(" ")
    };
    let single = wrap("$A");
    let pair = format!("{} {}", wrap("$A"), wrap("$B:1"));
    let special_tokens: Vec<SpecialToken> = specials
        .into_iter()
        .map(|(name, (id, token))| SpecialToken::new(name.to_string(), vec![id], vec![token]))
        .collect::<Result<_, _>>()
        .map_err(|e| SproutError::Tokenizer(format!("bad BOS/EOS token: {e}")))?;
    let bad = |e: String| SproutError::Tokenizer(format!("bad BOS/EOS template: {e}"));
    let processor = TemplateProcessing::builder()
        .try_single(single.as_str())
        .map_err(bad)?
        .try_pair(pair.as_str())
        .map_err(bad)?
        .special_tokens(special_tokens)
        .build()
        .map_err(|e| bad(e.to_string()))?;
    Ok(Some(processor))
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::formats::gguf::{GgufFile, GgufValue};
    use crate::tokenizer::Tokenizer;

    /// GPT-2's byte-to-character map.
    fn byte_chars() -> Vec<char> {
        let kept = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let mut extra = 0;
        (0..256u32)
            .map(|b| {
                if kept(b) {
                    char::from_u32(b).unwrap()
                } else {
                    extra += 1;
                    char::from_u32(255 + extra).unwrap()
                }
            })
            .collect()
    }

    /// Specials, the 256 byte tokens, then merged tokens.
    fn vocab_gguf(pre: &str) -> GgufWriter {
        let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
            .map(String::from)
            .to_vec();
        let mut types = vec![3, 3, 3];
        tokens.extend(byte_chars().iter().map(|c| c.to_string()));
        types.extend([1; 256]);
        let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "1 2"];
        for m in merges {
            tokens.push(m.replace(' ', ""));
            types.push(1);
        }
        let strings =
            |v: Vec<String>| GgufValue::Array(v.into_iter().map(GgufValue::String).collect());
        GgufWriter::new()
            .metadata("tokenizer.ggml.model", GgufValue::String("gpt2".into()))
            .metadata("tokenizer.ggml.pre", GgufValue::String(pre.into()))
            .metadata("tokenizer.ggml.tokens", strings(tokens))
            .metadata(
                "tokenizer.ggml.token_type",
                GgufValue::Array(types.into_iter().map(GgufValue::I32).collect()),
            )
            .metadata(
                "tokenizer.ggml.merges",
                strings(merges.map(String::from).to_vec()),
            )
            .metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(1))
            .metadata("tokenizer.ggml.eos_token_id", GgufValue::U32(2))
    }

    fn tokenizer(w: &GgufWriter) -> Result<Tokenizer, SproutError> {
        let file = GgufFile::from_reader(Cursor::new(w.to_bytes()))?;
        Tokenizer::from_gguf(file.metadata())
    }

    #[test]
    fn special_tokens_and_merges() {
        let t = tokenizer(&vocab_gguf("smollm")).unwrap();
        let hello = t.token_to_id("hello").unwrap();
        let ids = t.encode("<|im_start|>hello<|im_end|>").unwrap();
        assert_eq!(ids, vec![1, hello, 2]);
        assert_eq!(t.decode(&ids).unwrap(), "<|im_start|>hello<|im_end|>");
        assert_eq!(t.decode_with(&ids, true).unwrap(), "hello");
        let text = "hello wörld  12\n";
        assert_eq!(t.decode(&t.encode(text).unwrap()).unwrap(), text);
    }

    #[test]
    fn digits_split_by_pre_tokenizer() {
        let one_two = |pre: &str| {
            let t = tokenizer(&vocab_gguf(pre)).unwrap();
            t.encode("12")
                .unwrap()
                .contains(&t.token_to_id("12").unwrap())
        };
        // smollm and qwen2 split digits one by one; gpt2 and llama3 keep "12" together.
        assert!(!one_two("smollm"));
        assert!(!one_two("qwen2"));
        assert!(one_two("gpt2"));
        assert!(one_two("llama-bpe"));
    }

    #[test]
    fn bos_only_when_asked() {
        let t = tokenizer(&vocab_gguf("gpt2")).unwrap();
        assert_eq!(t.encode("a").unwrap().len(), 1);
        let w = vocab_gguf("gpt2").metadata("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
        let t = tokenizer(&w).unwrap();
        let ids = t.encode("a").unwrap();
        assert_eq!(ids[0], 1);
        assert_eq!(ids.len(), 2);
        assert_eq!(t.encode_with("a", false).unwrap().len(), 1);
    }

    #[test]
    fn unsupported_vocabularies_are_named() {
        let err = |w: GgufWriter| tokenizer(&w).err().unwrap().to_string();
        let e = err(vocab_gguf("jais"));
        assert!(
            e.contains("`jais`") && e.contains("tokenizer.ggml.pre"),
            "{e}"
        );
        let e =
            err(vocab_gguf("gpt2")
                .metadata("tokenizer.ggml.model", GgufValue::String("wpm".into())));
        assert!(e.contains("`wpm`"), "{e}");
        let e = err(vocab_gguf("gpt2").without_metadata("tokenizer.ggml.merges"));
        assert!(e.contains("tokenizer.ggml.merges"), "{e}");
    }

    #[test]
    fn the_stream_emits_whole_characters() {
        let t = tokenizer(&vocab_gguf("gpt2")).unwrap();
        let text = "hé🌱 hello";
        let ids = t.encode(text).unwrap();
        let mut stream = t.stream(false);
        let mut out = String::new();
        let mut pieces = 0;
        for &id in &ids {
            if let Some(piece) = stream.push(&t, id).unwrap() {
                assert!(!piece.contains('\u{fffd}'), "{piece:?}");
                out.push_str(&piece);
                pieces += 1;
            }
        }
        out.push_str(&stream.finish(&t).unwrap());
        assert_eq!(out, text);
        assert!(
            pieces < ids.len(),
            "multi-byte characters wait for their last byte"
        );
        // A stream cut inside a character shows the rest as U+FFFD.
        let mut stream = t.stream(false);
        let cut = t.encode("🌱").unwrap();
        for &id in &cut[..cut.len() - 1] {
            assert_eq!(stream.push(&t, id).unwrap(), None);
        }
        assert!(stream.finish(&t).unwrap().contains('\u{fffd}'));
    }
}
