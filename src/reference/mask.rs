//! Reference for `gpu::kernels::mask`: setting the named logits to `MASKED_LOGIT`, and
//! every logit of a row but its allowed tokens.

use std::collections::BTreeSet;

use crate::gpu::kernels::mask::{KeepOnly, MASKED_LOGIT};

/// `logits[row * vocab + token] = MASKED_LOGIT` for each `(row, token)` of `pairs`
/// (flattened, `[n, 2]`); a pair whose row >= `rows` or token >= `vocab` changes nothing,
/// as on the GPU.
pub fn mask_tokens(logits: &mut [f32], vocab: usize, rows: usize, pairs: &[u32]) {
    assert!(
        pairs.len().is_multiple_of(2),
        "mask_tokens reference: pairs are not (row, token) pairs"
    );
    assert!(
        logits.len() >= rows * vocab,
        "mask_tokens reference: logits are not {rows} rows of {vocab}"
    );
    for pair in pairs.chunks_exact(2) {
        let (row, token) = (pair[0] as usize, pair[1] as usize);
        if row < rows && token < vocab {
            logits[row * vocab + token] = MASKED_LOGIT;
        }
    }
}

/// For each spec whose row < `rows`, every logit of the row whose token is not in its
/// slice of `allowed` becomes `MASKED_LOGIT`; the others are untouched. A slice past
/// `allowed` is clamped to it, as the kernel clamps it: `first` to its length, then
/// `count` to what is left.
pub fn keep_only(
    logits: &mut [f32],
    vocab: usize,
    rows: usize,
    specs: &[KeepOnly],
    allowed: &[u32],
) {
    assert!(
        logits.len() >= rows * vocab,
        "keep_only reference: logits are not {rows} rows of {vocab}"
    );
    for spec in specs.iter().filter(|s| (s.row as usize) < rows) {
        let first = (spec.first as usize).min(allowed.len());
        let end = first + (spec.count as usize).min(allowed.len() - first);
        let kept: BTreeSet<u32> = allowed[first..end].iter().copied().collect();
        let row = spec.row as usize * vocab;
        for (token, l) in logits[row..row + vocab].iter_mut().enumerate() {
            if !kept.contains(&(token as u32)) {
                *l = MASKED_LOGIT;
            }
        }
    }
}
