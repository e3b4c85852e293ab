//! Reference for `gpu::kernels::softmax`: per-row argmax (lowest index on ties), max and
//! logsumexp (summed in f64), and log-probs `logit - lse` in f64.

/// One row's statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowStats {
    pub argmax: u32,
    pub max: f32,
    pub lse: f64,
}

/// Statistics of each row of `logits [m, vocab]`.
pub fn row_stats(logits: &[f32], vocab: usize) -> Vec<RowStats> {
    assert!(
        vocab > 0 && logits.len().is_multiple_of(vocab),
        "softmax: logits are not whole rows of {vocab}"
    );
    logits
        .chunks_exact(vocab)
        .map(|row| {
            let mut argmax = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[argmax] {
                    argmax = i;
                }
            }
            let max = row[argmax];
            let sum: f64 = row.iter().map(|&v| (v as f64 - max as f64).exp()).sum();
            RowStats {
                argmax: argmax as u32,
                max,
                lse: max as f64 + sum.ln(),
            }
        })
        .collect()
}

/// `logits[r, c] - lse[r]` for every logit.
pub fn log_softmax(logits: &[f32], vocab: usize) -> Vec<f32> {
    let stats = row_stats(logits, vocab);
    logits
        .chunks_exact(vocab)
        .zip(&stats)
        .flat_map(|(row, s)| row.iter().map(move |&v| (v as f64 - s.lse) as f32))
        .collect()
}

/// `logits[r, targets[r]] - lse[r]` (NaN for a target past the vocabulary).
pub fn target_logprobs(logits: &[f32], vocab: usize, targets: &[u32]) -> Vec<f32> {
    let stats = row_stats(logits, vocab);
    assert_eq!(stats.len(), targets.len(), "softmax: one target per row");
    logits
        .chunks_exact(vocab)
        .zip(&stats)
        .zip(targets)
        .map(|((row, s), &t)| match row.get(t as usize) {
            Some(&v) => (v as f64 - s.lse) as f32,
            None => f32::NAN,
        })
        .collect()
}
