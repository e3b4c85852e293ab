//! Reference for `gpu::kernels::sample`: the kept set by sorting (masses in f64), the same
//! hash and Gumbel-max draw over it (scores in f64), and the drawn tokens' raw and
//! sampling log-probabilities. See the kernel module's doc for the semantics.
//!
//! The scaled logits and the min-p test use the kernel's f32 arithmetic
//! (`s_c = l_c * inv_temperature`, `s_c - s_max >= log_min_p`), so top-k and min-p cuts are
//! exact; the top-p cut can differ from the kernel's f32 masses only at a near-tie of the
//! cumulative mass with `top_p` (relative ~1e-6).

use crate::gpu::kernels::sample::{RowParams, SampleKey};

fn pcg4d(mut v: [u32; 4]) -> [u32; 4] {
    for x in v.iter_mut() {
        *x = x.wrapping_mul(1664525).wrapping_add(1013904223);
    }
    let mix = |v: &mut [u32; 4]| {
        v[0] = v[0].wrapping_add(v[1].wrapping_mul(v[3]));
        v[1] = v[1].wrapping_add(v[2].wrapping_mul(v[0]));
        v[2] = v[2].wrapping_add(v[0].wrapping_mul(v[1]));
        v[3] = v[3].wrapping_add(v[1].wrapping_mul(v[2]));
    };
    mix(&mut v);
    for x in v.iter_mut() {
        *x ^= *x >> 16;
    }
    mix(&mut v);
    v
}

/// The uniform in (0, 1) the kernel uses for token `c`:
/// `pcg4d(pcg4d((c, position, stream, seed_lo)) ^ (seed_hi, request, 0, 0))`, 24 bits.
pub fn uniform01(key: &SampleKey, c: u32) -> f64 {
    let h = pcg4d([c, key.position, key.stream, key.seed_lo]);
    let h = pcg4d([h[0] ^ key.seed_hi, h[1] ^ key.request, h[2], h[3]]);
    ((h[0] >> 8) as f64 + 0.5) / 16777216.0
}

/// The Exp(1) variate `-ln(u)` of token `c` (f64, accurate near u = 1 too, as the
/// kernel's is to f32 precision); the Gumbel noise is `-ln` of it.
pub fn exponential(key: &SampleKey, c: u32) -> f64 {
    let u = uniform01(key, c);
    if u < 0.5 {
        -u.ln()
    } else {
        -(-(1.0 - u)).ln_1p()
    }
}

/// One row's cut: the kept set is `{ c : logits[c] >= tau }`, and `log_z` is the log
/// normaliser of `softmax(s)` over it (0 for a greedy row, whose tau is the max logit).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cut {
    pub tau: f32,
    pub log_z: f64,
}

/// The kernel's scaled logit `l * inv_temperature`, in f32.
pub fn scaled(logit: f32, params: &RowParams) -> f32 {
    logit * params.inv_temperature
}

/// The cut of one row of `logits` under `params`, by sorting.
pub fn truncate(logits: &[f32], params: &RowParams) -> Cut {
    assert!(!logits.is_empty(), "truncate: the row is empty");
    let mut sorted = logits.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    // -0 and +0 are one value to the kernel (and to `>=`).
    let max_logit = sorted[0];
    let min_logit = sorted[sorted.len() - 1];
    if params.is_greedy() {
        return Cut {
            tau: max_logit + 0.0,
            log_z: 0.0,
        };
    }
    let s_max = scaled(max_logit, params);
    let weight = |l: f32| (scaled(l, params) as f64 - s_max as f64).exp();
    let mass = |tau: f32| -> f64 {
        logits
            .iter()
            .filter(|&&l| l >= tau)
            .map(|&l| weight(l))
            .sum()
    };
    let k = params.top_k as usize;
    let tau_k = if k > 0 && k < sorted.len() {
        sorted[k - 1]
    } else {
        min_logit
    };
    let tau_min = if params.has_min_p() {
        *logits
            .iter()
            .filter(|&&l| scaled(l, params) - s_max >= params.log_min_p)
            .min_by(|a, b| a.total_cmp(b))
            .expect("the max logit passes min-p")
    } else {
        min_logit
    };
    let tau_p = if params.top_p < 1.0 {
        let target = params.top_p as f64 * mass(tau_k);
        let mut cumulative = 0.0;
        let mut tau = tau_k;
        for &l in &sorted {
            cumulative += weight(l);
            if cumulative >= target {
                tau = l;
                break;
            }
        }
        tau
    } else {
        min_logit
    };
    let tau = tau_k.max(tau_min).max(tau_p) + 0.0;
    Cut {
        tau,
        log_z: s_max as f64 + mass(tau).ln(),
    }
}

/// The cut of each row of `logits [rows, vocab]` under `params[row]`.
pub fn truncate_rows(logits: &[f32], vocab: usize, params: &[RowParams]) -> Vec<Cut> {
    logits
        .chunks(vocab)
        .zip(params)
        .map(|(row, p)| truncate(row, p))
        .collect()
}

/// The token the kernel draws from one row of `logits` with that row's `params` and
/// `cut`, under `key` (lowest index on ties). `key.row` is not read.
pub fn sample_with_cut(logits: &[f32], params: &RowParams, cut: &Cut, key: &SampleKey) -> u32 {
    let mut best: Option<(f64, usize)> = None;
    for (c, &l) in logits.iter().enumerate() {
        let v = if params.is_greedy() {
            l as f64
        } else if l < cut.tau {
            continue;
        } else {
            l as f64 * params.inv_temperature as f64 - exponential(key, c as u32).ln()
        };
        if best.is_none_or(|(bv, _)| v > bv) {
            best = Some((v, c));
        }
    }
    best.map_or(u32::MAX, |(_, c)| c as u32)
}

/// The token the kernel draws from one row of `logits` under `params` and `key`.
pub fn sample(logits: &[f32], params: &RowParams, key: &SampleKey) -> u32 {
    sample_with_cut(logits, params, &truncate(logits, params), key)
}

/// The tokens the kernel draws for `keys` from `logits [rows, vocab]`, each from the row
/// its key names, with that row's params (`u32::MAX` for a row past the logits or params).
pub fn sample_rows(
    logits: &[f32],
    vocab: usize,
    params: &[RowParams],
    keys: &[SampleKey],
) -> Vec<u32> {
    let cuts = truncate_rows(logits, vocab, params);
    keys.iter()
        .map(|key| {
            let r = key.row as usize;
            match (logits.get(r * vocab..(r + 1) * vocab), cuts.get(r)) {
                (Some(row), Some(cut)) => sample_with_cut(row, &params[r], cut, key),
                _ => u32::MAX,
            }
        })
        .collect()
}

/// `logits[key.row, token] - lse[key.row]` per draw (lse in f64 as in
/// `reference::softmax`), NaN for a token past the vocabulary or a row past the logits.
pub fn draw_logprobs(logits: &[f32], vocab: usize, keys: &[SampleKey], tokens: &[u32]) -> Vec<f32> {
    assert_eq!(keys.len(), tokens.len(), "draw_logprobs: one token per key");
    let stats = crate::reference::softmax::row_stats(logits, vocab);
    keys.iter()
        .zip(tokens)
        .map(|(key, &token)| {
            let row = key.row as usize;
            match (stats.get(row), (token as usize) < vocab) {
                (Some(s), true) => (logits[row * vocab + token as usize] as f64 - s.lse) as f32,
                _ => f32::NAN,
            }
        })
        .collect()
}

/// The sampling log-prob of `token` in a row with `params` and `cut`: `s_token - log_z`
/// (in f64; 0 for a greedy row; -inf for a token outside the kept set).
pub fn sampling_logprob(logits: &[f32], params: &RowParams, cut: &Cut, token: u32) -> f64 {
    let l = logits[token as usize];
    if params.is_greedy() {
        0.0
    } else if l < cut.tau {
        f64::NEG_INFINITY
    } else {
        scaled(l, params) as f64 - cut.log_z
    }
}
