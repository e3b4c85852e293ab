//! BPE merges for a SentencePiece BPE vocabulary, derived from its piece scores.
//!
//! SentencePiece BPE encodes by repeatedly joining the adjacent pair of symbols whose
//! concatenation is a piece with the highest score (the leftmost pair on a tie). The same
//! is a `tokenizers` BPE whose merges are every split of every normal piece into two normal
//! pieces, ranked by the whole piece's score, highest first: a pair can be joined exactly
//! when its concatenation is a piece, and the rank order is the score order. The one
//! difference: where two different splits of one piece overlap in the symbols (`aa a aa`,
//! both pairs making `aaa`), SentencePiece joins the leftmost and `tokenizers` the split
//! ranked first (here the one with the shorter left half); only a piece that repeats a
//! part of itself can meet this.
//!
//! Only normal pieces (token_type 1) take part: SentencePiece never joins a control,
//! user-defined or byte piece with its neighbours, and makes no new one by joining.
//!
//! Cost: each split looks both halves up in a hash map, so a piece of `n` bytes costs
//! O(n²); pieces longer than [`MAX_PIECE_BYTES`] are refused (naming the token), which
//! bounds the whole at O([`MAX_PIECE_BYTES`] × total piece length). Gemma 3's 255,474
//! normal pieces are at most 48 bytes and give 513,511 merges.

use std::collections::HashMap;

use crate::error::SproutError;

/// llama.cpp's `tokenizer.ggml.token_type` for an ordinary piece.
pub(crate) const TOKEN_TYPE_NORMAL: i64 = 1;

/// The longest normal piece accepted, in bytes (SentencePiece's trainer allows pieces of
/// up to 16 characters by default, at most 4 bytes each).
pub const MAX_PIECE_BYTES: usize = 256;

/// The merges, best first, as (left, right) pairs of normal pieces. `tokens`, `scores` and
/// `types` are parallel (the caller checks their lengths) and `scores` are finite.
pub fn merges(
    tokens: &[&str],
    scores: &[f64],
    types: &[i64],
) -> Result<Vec<(String, String)>, SproutError> {
    let normal: HashMap<&str, usize> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|&(_, (_, &ty))| ty == TOKEN_TYPE_NORMAL)
        .map(|(id, (&t, _))| (t, id))
        .collect();
    // (piece id, byte offset of the split)
    let mut splits: Vec<(usize, usize)> = Vec::new();
    for (id, (&piece, &ty)) in tokens.iter().zip(types).enumerate() {
        if ty != TOKEN_TYPE_NORMAL {
            continue;
        }
        if piece.len() > MAX_PIECE_BYTES {
            return Err(SproutError::Tokenizer(format!(
                "tokenizer.ggml.tokens[{id}] is a normal piece of {} bytes; sprout accepts at \
                 most {MAX_PIECE_BYTES}",
                piece.len()
            )));
        }
        splits.extend(
            piece
                .char_indices()
                .skip(1)
                .filter(|&(at, _)| {
                    normal.contains_key(&piece[..at]) && normal.contains_key(&piece[at..])
                })
                .map(|(at, _)| (id, at)),
        );
    }
    // Highest score first; ties in token order, then split position, so the order is the
    // same on every run.
    splits.sort_by(|&(a, at_a), &(b, at_b)| {
        scores[b]
            .total_cmp(&scores[a])
            .then(a.cmp(&b))
            .then(at_a.cmp(&at_b))
    });
    Ok(splits
        .into_iter()
        .map(|(id, at)| (tokens[id][..at].to_string(), tokens[id][at..].to_string()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_split_into_pieces_ranked_by_score() {
        let tokens = ["a", "b", "c", "ab", "bc", "abc", "<x>", "ax"];
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0, 0.0, -0.5];
        let types = [1, 1, 1, 1, 1, 1, 3, 1];
        let m = merges(&tokens, &scores, &types).unwrap();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        // "ax" has no split into two normal pieces ("x" is none).
        assert_eq!(
            m,
            [
                pair("b", "c"),
                pair("a", "b"),
                pair("a", "bc"),
                pair("ab", "c")
            ]
        );
    }

    #[test]
    fn an_overlong_piece_is_refused_by_index() {
        let long = "x".repeat(MAX_PIECE_BYTES + 1);
        let e = merges(&["x", &long], &[0.0, 0.0], &[1, 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("tokenizer.ggml.tokens[1]"), "{e}");
        // A long control token is no piece to merge: accepted.
        assert!(merges(&["x", &long], &[0.0, 0.0], &[1, 3]).is_ok());
    }
}
