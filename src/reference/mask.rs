//! Reference for `gpu::kernels::mask`: setting the named logits to `MASKED_LOGIT`.

use crate::gpu::kernels::mask::MASKED_LOGIT;

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
