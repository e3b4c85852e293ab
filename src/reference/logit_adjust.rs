//! Reference for `gpu::kernels::logit_adjust`: each entry's logit through the kernel's
//! f32 arithmetic (the bias added, the product rounded, then the subtraction; the result
//! clamped to `[MASKED_LOGIT, -MASKED_LOGIT]`), so the GPU matches it bit for bit. Rust
//! never contracts a multiply and an add, as the kernel keeps every driver from doing.

use crate::gpu::kernels::logit_adjust::LogitAdjust;
use crate::gpu::kernels::mask::MASKED_LOGIT;

/// One logit after `adjust`'s bias, scale and subtraction.
pub fn adjusted(logit: f32, adjust: &LogitAdjust) -> f32 {
    let l = logit + adjust.bias;
    let scale = if l > 0.0 {
        adjust.pos_scale
    } else {
        adjust.neg_scale
    };
    (l * scale - adjust.subtract).clamp(MASKED_LOGIT, -MASKED_LOGIT)
}

/// `logits[row * vocab + token] = adjusted(...)` for each entry of `adjusts` whose row <
/// `rows` and token < `vocab` (the others change nothing, as on the GPU). Entries are
/// unique per (row, token), as the kernel requires.
pub fn logit_adjust(logits: &mut [f32], vocab: usize, rows: usize, adjusts: &[LogitAdjust]) {
    assert!(
        logits.len() >= rows * vocab,
        "logit_adjust reference: logits are not {rows} rows of {vocab}"
    );
    for a in adjusts {
        let (row, token) = (a.row as usize, a.token as usize);
        if row < rows && token < vocab {
            let l = &mut logits[row * vocab + token];
            *l = adjusted(*l, a);
        }
    }
}
