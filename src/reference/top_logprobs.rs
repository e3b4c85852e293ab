//! Reference for `gpu::kernels::top_logprobs`: each row's tokens sorted by (logit
//! descending, index ascending; -0 and +0 equal), the first `n` taken, with log-probs
//! `logit - lse` in f64 (lse as in `reference::softmax`).

/// The `n` most likely tokens of `row` (all of them when `n >= row.len()`), in order.
pub fn top_ids(row: &[f32], n: usize) -> Vec<u32> {
    assert!(
        row.iter().all(|v| v.is_finite()),
        "top_logprobs reference: logits must be finite"
    );
    let mut ids: Vec<u32> = (0..row.len() as u32).collect();
    // A stable sort by value keeps equal logits in index order.
    ids.sort_by(|&a, &b| row[b as usize].partial_cmp(&row[a as usize]).unwrap());
    ids.truncate(n);
    ids
}

/// `(ids, logprobs)`, each `[rows, n_max]`, for `logits [rows, vocab]` with
/// `n = min(counts[r], n_max)` alternatives in row `r`: entries `j < n` (and `j < vocab`)
/// hold the `j`-th most likely token and its log-prob, the others `u32::MAX` and NaN.
pub fn top_logprobs(
    logits: &[f32],
    vocab: usize,
    counts: &[u32],
    n_max: usize,
) -> (Vec<u32>, Vec<f32>) {
    let stats = crate::reference::softmax::row_stats(logits, vocab);
    assert_eq!(
        stats.len(),
        counts.len(),
        "top_logprobs reference: one count per row"
    );
    let mut ids = vec![u32::MAX; counts.len() * n_max];
    let mut logprobs = vec![f32::NAN; counts.len() * n_max];
    for (r, (row, s)) in logits.chunks_exact(vocab).zip(&stats).enumerate() {
        let n = (counts[r] as usize).min(n_max);
        for (j, id) in top_ids(row, n).into_iter().enumerate() {
            ids[r * n_max + j] = id;
            logprobs[r * n_max + j] = (row[id as usize] as f64 - s.lse) as f32;
        }
    }
    (ids, logprobs)
}
