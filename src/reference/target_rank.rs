//! Reference for `gpu::kernels::target_rank`: a token's 1-based rank in its row, counted
//! by the definition (every logit above the token's, and every equal one at a lower
//! index; -0 and +0 equal).

/// The rank of `token` in `row`: `1 + #{c : row[c] > row[token]} + #{c < token : row[c] ==
/// row[token]}`.
pub fn rank(row: &[f32], token: u32) -> u32 {
    let x = row[token as usize];
    let before = row
        .iter()
        .enumerate()
        .filter(|&(c, &v)| v > x || (v == x && c < token as usize))
        .count();
    1 + before as u32
}

/// Per `(row, token)` of `targets`, the token's rank in that row of `logits [rows,
/// vocab]`, or 0 when the row is past the rows or the token past the vocabulary (as the
/// kernel writes).
pub fn target_ranks(logits: &[f32], vocab: usize, targets: &[[u32; 2]]) -> Vec<u32> {
    assert!(
        vocab > 0 && logits.len().is_multiple_of(vocab),
        "target_rank reference: {} logits are not whole rows of {vocab}",
        logits.len()
    );
    let rows = logits.len() / vocab;
    targets
        .iter()
        .map(
            |&[row, token]| match (row as usize) < rows && (token as usize) < vocab {
                true => rank(&logits[row as usize * vocab..][..vocab], token),
                false => 0,
            },
        )
        .collect()
}
