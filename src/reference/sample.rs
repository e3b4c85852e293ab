//! Reference for `gpu::kernels::sample`: the same hash and Gumbel-max draw, in f64, and
//! the drawn tokens' log-probabilities.

use crate::gpu::kernels::sample::SampleKey;

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

/// The token the kernel draws from one row of `logits` under `key` (lowest index on ties).
/// `key.row` is not read: pass the row it names.
pub fn sample(logits: &[f32], key: &SampleKey) -> u32 {
    let score = |c: usize| {
        let l = logits[c] as f64;
        if key.greedy != 0 {
            l
        } else {
            l * key.inv_temperature as f64 - (-uniform01(key, c as u32).ln()).ln()
        }
    };
    let mut best = 0;
    for c in 1..logits.len() {
        if score(c) > score(best) {
            best = c;
        }
    }
    best as u32
}

/// The tokens the kernel draws for `keys` from `logits [rows, vocab]`, each from the row
/// its key names (`u32::MAX` for a row past the logits).
pub fn sample_rows(logits: &[f32], vocab: usize, keys: &[SampleKey]) -> Vec<u32> {
    keys.iter()
        .map(|key| {
            let start = key.row as usize * vocab;
            match logits.get(start..start + vocab) {
                Some(row) => sample(row, key),
                None => u32::MAX,
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
