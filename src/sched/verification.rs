//! Verifying a draft: which rows of a drafted chunk count, and what of the chunk is kept.
//!
//! A drafted chunk is a sample's last drawn token followed by the tokens a draft offered
//! ([`super::drafting`]); each of its rows draws, row `i` the token after the draft's first
//! `i` tokens. Row 0's draw always counts. Row `i`'s counts only if the drafted token fed
//! to it (its input) is the token row `i - 1` drew, and the sample did not end at an
//! earlier row; the first row that fails ends the draft, and the draws from it on are
//! rejected: their tokens are part of no sample.
//!
//! Invariant: a sample gets exactly the tokens it would draw one step at a time, since
//! every row that counts was computed over tokens the sample did draw. Speculation changes
//! how many steps a sample takes, never what it draws.

use super::drawn::DrawResult;
use super::plan::{Chunk, Draw};

/// What verifying one drafted chunk decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Rows whose draws counted and were applied, from row 0 on.
    pub applied: usize,
    /// Drafted tokens accepted: those fed to an applied row after row 0.
    pub accepted: usize,
}

/// Verifies drafted chunk `chunk` row by row: `draws` and `results` are its rows' draws
/// and their results, row 0 first; `drawing` says whether its sample is still drawing (not
/// gone since the step was planned). Each row that counts is applied through `apply(row)`,
/// which says whether the sample is still drawing after it (a token may end it).
pub(crate) fn verify(
    chunk: &Chunk,
    draws: &[Draw],
    results: &[DrawResult],
    mut drawing: bool,
    mut apply: impl FnMut(usize) -> bool,
) -> Verdict {
    debug_assert_eq!(draws.len(), 1 + chunk.drafted, "one draw per row");
    let mut applied = 0;
    for (row, draw) in draws.iter().enumerate() {
        let fed_what_was_drawn = row == 0 || results[row - 1].token == chunk.tokens[draw.offset];
        if !drawing || !fed_what_was_drawn {
            break;
        }
        drawing = apply(row);
        applied += 1;
    }
    Verdict {
        applied,
        accepted: applied.saturating_sub(1),
    }
}

/// What drafted chunk `chunk` computed for its sample once `accepted` drafted tokens were
/// accepted: its first token and those. The rejected rows' K and V are left behind, to be
/// written over when those positions are computed for real.
pub(crate) fn kept(chunk: &Chunk, accepted: usize) -> Chunk {
    Chunk {
        tokens: chunk.tokens[..1 + accepted].to_vec(),
        drafted: 0,
        ..chunk.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{RequestId, SeqId};

    /// A sample's chunk: its last drawn token 7, then the draft 1, 2, 3.
    fn drafted_chunk() -> (Chunk, Vec<Draw>) {
        let chunk = Chunk {
            seq: SeqId(0),
            start: 10,
            tokens: vec![7, 1, 2, 3],
            block_table: vec![0],
            is_prefill: false,
            drafted: 3,
            lora: false,
        };
        let draws = (0..4)
            .map(|offset| Draw {
                chunk: 0,
                offset,
                request: RequestId(0),
                request_index: 0,
                sample_index: 0,
                key_index: 0,
                position: (11 + offset) as u32,
                seed: 0,
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                processing: Default::default(),
                top_logprobs: 0,
            })
            .collect();
        (chunk, draws)
    }

    fn drawn(tokens: &[u32]) -> Vec<DrawResult> {
        let result = |&token: &u32| DrawResult {
            token,
            logprob: 0.0,
            sampling_logprob: 0.0,
            top: Vec::new(),
        };
        tokens.iter().map(result).collect()
    }

    #[test]
    fn rows_count_up_to_the_first_drafted_token_not_drawn() {
        let (chunk, draws) = drafted_chunk();
        let mut rows = Vec::new();
        // Row 0 drew 1 (as drafted), row 1 drew 5 (the draft said 2): rows 0 to 2 count.
        let verdict = verify(&chunk, &draws, &drawn(&[1, 5, 9, 9]), true, |row| {
            rows.push(row);
            true
        });
        assert_eq!(
            verdict,
            Verdict {
                applied: 2,
                accepted: 1
            }
        );
        assert_eq!(rows, [0, 1]);
        // Every drafted token drawn: all rows count, the last one's draw too.
        let all = verify(&chunk, &draws, &drawn(&[1, 2, 3, 4]), true, |_| true);
        assert_eq!(
            all,
            Verdict {
                applied: 4,
                accepted: 3
            }
        );
    }

    #[test]
    fn no_row_counts_after_the_sample_ends_or_once_it_is_gone() {
        let (chunk, draws) = drafted_chunk();
        // The token row 1 draws ends the sample: rows 2 and 3 do not count.
        let ends = verify(&chunk, &draws, &drawn(&[1, 2, 3, 4]), true, |row| row != 1);
        assert_eq!(
            ends,
            Verdict {
                applied: 2,
                accepted: 1
            }
        );
        let gone = verify(
            &chunk,
            &draws,
            &drawn(&[1, 2, 3, 4]),
            false,
            |_| unreachable!(),
        );
        assert_eq!(
            gone,
            Verdict {
                applied: 0,
                accepted: 0
            }
        );
    }

    #[test]
    fn the_kept_chunk_is_the_first_token_and_the_accepted_ones() {
        let (chunk, _) = drafted_chunk();
        let kept = kept(&chunk, 2);
        assert_eq!(
            (kept.start, kept.tokens, kept.drafted),
            (10, vec![7, 1, 2], 0)
        );
    }
}
