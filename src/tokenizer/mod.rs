//! Text to token ids and back, on the Hugging Face `tokenizers` library: loaded from a
//! `tokenizer.json`, or built from a GGUF file's own vocabulary
//! ([`crate::tokenizer::gguf_vocab`] for BPE, [`crate::tokenizer::gguf_spm`] for
//! SentencePiece).
//!
//! [`Tokenizer::encode`] adds exactly the special tokens the model's tokenizer adds on its
//! own (a `tokenizer.json`'s post-processor; for GGUF, BOS only when
//! `tokenizer.ggml.add_bos_token` is true: SmolLM2 adds none). Special tokens written in the
//! text, such as `<|im_start|>`, encode to their single ids. [`IncrementalDecoder`] turns a
//! stream of ids into text pieces that are always complete UTF-8.
//!
//! Chat templates ([`chat_template`]) turn messages into the prompt text a model was
//! trained on; [`vocabulary`] checks that a trainer model can score the token ids of the
//! model that rolled out. This module reads GGUF metadata (`crate::formats`) but not the
//! model readers: they import it, never the other way round.

pub mod chat_template;
pub mod gguf_spm;
pub mod gguf_vocab;
pub mod spm_merges;
pub mod template_functions;
pub mod template_json;
pub mod template_limits;
pub mod vocabulary;

use std::path::Path;

use crate::error::SproutError;
use crate::formats::gguf::GgufMetadata;

/// A model's tokenizer.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

fn tk_error(what: &str, e: tokenizers::Error) -> SproutError {
    SproutError::Tokenizer(format!("{what}: {e}"))
}

impl Tokenizer {
    /// Loads a `tokenizer.json` from its bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, SproutError> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| tk_error("cannot read tokenizer.json", e))?;
        Ok(Tokenizer { inner })
    }

    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, SproutError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| SproutError::Tokenizer(format!("cannot read {}: {e}", path.display())))?;
        Self::from_json(&bytes).map_err(|e| match e {
            SproutError::Tokenizer(m) => SproutError::Tokenizer(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Builds the tokenizer a GGUF file describes: byte-level BPE
    /// ([`crate::tokenizer::gguf_vocab`]) or SentencePiece ([`crate::tokenizer::gguf_spm`]).
    pub fn from_gguf(metadata: &GgufMetadata) -> Result<Self, SproutError> {
        let inner = match crate::tokenizer::gguf_vocab::model_kind(metadata)? {
            "llama" => crate::tokenizer::gguf_spm::build(metadata)?,
            _ => crate::tokenizer::gguf_vocab::build(metadata)?,
        };
        Ok(Tokenizer { inner })
    }

    /// Wraps a tokenizer built some other way.
    pub fn from_inner(inner: tokenizers::Tokenizer) -> Self {
        Tokenizer { inner }
    }

    /// SHA-256 (hex) of the tokenizer's canonical JSON: two tokenizers with the same hash
    /// map text to the same ids.
    pub fn sha256(&self) -> Result<String, SproutError> {
        use sha2::Digest;
        let json = self.to_json(false)?;
        Ok(crate::formats::hex(&sha2::Sha256::digest(json.as_bytes())))
    }

    /// The tokenizer as a `tokenizer.json` (the `tokenizers` library's own serialization,
    /// which transformers' fast tokenizers load).
    pub fn to_json(&self, pretty: bool) -> Result<String, SproutError> {
        self.inner
            .to_string(pretty)
            .map_err(|e| SproutError::Tokenizer(format!("cannot write tokenizer.json: {e}")))
    }

    /// The ids of `text`, with the special tokens the model adds on its own (if any).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, SproutError> {
        self.encode_with(text, true)
    }

    /// The ids of `text`; `add_special_tokens: false` never adds BOS/EOS (special tokens
    /// written in the text still encode to their ids).
    pub fn encode_with(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, SproutError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| tk_error("encoding failed", e))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The token sequences that spell `word` as a bad word, as vLLM tokenizes one: the word
    /// with leading whitespace stripped, and with one space before it when that begins
    /// with another token and has as many (so that the word is banned both at the start
    /// of a text and inside it); never special tokens. A word of nothing but whitespace
    /// is an error.
    pub fn bad_word_ids(&self, word: &str) -> Result<Vec<Vec<u32>>, SproutError> {
        let word = word.trim_start();
        if word.is_empty() {
            return Err(SproutError::Tokenizer(
                "a bad word must not be empty or blank".into(),
            ));
        }
        let plain = self.encode_with(word, false)?;
        let spaced = self.encode_with(&format!(" {word}"), false)?;
        let mut out = vec![plain];
        if spaced.first() != out[0].first() && spaced.len() == out[0].len() {
            out.push(spaced);
        }
        Ok(out)
    }

    /// The text of `ids`, special tokens included (as transformers' `decode` by default).
    pub fn decode(&self, ids: &[u32]) -> Result<String, SproutError> {
        self.decode_with(ids, false)
    }

    pub fn decode_with(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
    ) -> Result<String, SproutError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| tk_error("decoding failed", e))
    }

    /// A decoder for a stream of ids, one at a time.
    pub fn stream(&self, skip_special_tokens: bool) -> IncrementalDecoder {
        IncrementalDecoder::new(skip_special_tokens)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Ids in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Where `other`'s vocabulary first differs from this one's: its size, or the first id
    /// that names another token; `None` when every id means the same token in both (token
    /// ids from one model can then be scored by the other).
    pub fn vocabulary_difference(&self, other: &Tokenizer) -> Option<VocabularyDifference> {
        let (ours, theirs) = (self.vocab_size(), other.vocab_size());
        if ours != theirs {
            return Some(VocabularyDifference::Size { ours, theirs });
        }
        (0..ours as u32).find_map(|id| {
            let (ours, theirs) = (self.id_to_token(id), other.id_to_token(id));
            (ours != theirs).then_some(VocabularyDifference::Token { id, ours, theirs })
        })
    }
}

/// How two vocabularies differ ([`Tokenizer::vocabulary_difference`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VocabularyDifference {
    /// They hold different numbers of ids.
    Size { ours: usize, theirs: usize },
    /// Id `id` is another token in each.
    Token {
        id: u32,
        ours: Option<String>,
        theirs: Option<String>,
    },
}

/// Decodes ids as they are sampled, returning only text that is complete UTF-8 and that
/// later ids cannot change (a token that ends inside a multi-byte character waits for the
/// next). Concatenating every `push` and then `finish` gives `decode` of all the ids.
///
/// It keeps only the ids since the last emitted piece's start, not the whole sequence,
/// and holds no borrow of the tokenizer.
#[derive(Clone, Debug, Default)]
pub struct IncrementalDecoder {
    skip_special_tokens: bool,
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl IncrementalDecoder {
    pub fn new(skip_special_tokens: bool) -> Self {
        IncrementalDecoder {
            skip_special_tokens,
            ..Default::default()
        }
    }

    /// Adds one id; returns the new text, if any is complete.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<Option<String>, SproutError> {
        tokenizers::tokenizer::step_decode_stream(
            &tokenizer.inner,
            vec![id],
            self.skip_special_tokens,
            &mut self.ids,
            &mut self.prefix,
            &mut self.prefix_index,
        )
        .map_err(|e| tk_error("decoding failed", e))
    }

    /// The text still held back (an incomplete character at the end of the stream shows as
    /// U+FFFD), and a reset for the next stream.
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> Result<String, SproutError> {
        let all = tokenizer.decode_with(&self.ids, self.skip_special_tokens)?;
        let rest = all
            .strip_prefix(self.prefix.as_str())
            .unwrap_or(&all)
            .to_string();
        *self = IncrementalDecoder::new(self.skip_special_tokens);
        Ok(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture model's tokenizer (`tests/fixtures/NAME`).
    pub(super) fn fixture(name: &str) -> Tokenizer {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        Tokenizer::from_file(dir.join(name).join("tokenizer.json")).unwrap()
    }

    /// The ids are those of the `tokenizers` library on the same file (its Python
    /// binding, `encode(word, add_special_tokens=False)`), under vLLM's rule.
    #[test]
    fn a_bad_word_is_banned_with_and_without_a_space_before_it() {
        let t = fixture("tiny-llama");
        // " x" is another single token: both spellings are banned.
        assert_eq!(t.bad_word_ids("x").unwrap(), [vec![90], vec![375]]);
        // " hello" is one token longer: only the word as written (leading spaces dropped).
        assert_eq!(t.bad_word_ids("  hello").unwrap(), [vec![260, 359, 81]]);
        assert!(t.bad_word_ids(" \t").is_err());
    }

    #[test]
    fn vocabularies_differ_by_size_or_by_the_first_other_token() {
        let (llama, qwen) = (fixture("tiny-llama"), fixture("tiny-qwen2"));
        assert_eq!(llama.vocabulary_difference(&llama.clone()), None);
        assert_eq!(
            llama.vocabulary_difference(&qwen),
            Some(VocabularyDifference::Size {
                ours: llama.vocab_size(),
                theirs: qwen.vocab_size()
            })
        );
        assert_ne!(llama.vocab_size(), qwen.vocab_size());
    }
}
