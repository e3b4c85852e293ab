//! Masking tokens: exactly the named logits become `MASKED_LOGIT` and every other value
//! of the buffer stays bitwise the same; pairs past the rows or the vocabulary, repeated
//! pairs and no pairs at all; and end to end, a masked top token is never drawn (at
//! temperature 1, truncated, or greedy) by softmax + truncate + sample.

use std::collections::BTreeSet;

use sprout::gpu::Gpu;
use sprout::gpu::kernels::Logits;
use sprout::gpu::kernels::mask::{MASKED_LOGIT, WORKGROUP, encode};
use sprout::gpu::kernels::sample::{RowParams, SampleKey, SamplingFixture};
use sprout::reference::mask as reference;
use sprout::reference::sample as sample_reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, changed_in_chunks, check_bitwise};

/// The whole logits buffer after masking `pairs` (flattened (row, token)) in `rows` rows,
/// checked the same with the logits in chunks of 2 rows.
fn run(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    rows: usize,
    pairs: &[u32],
) -> Result<Vec<f32>, String> {
    let p = gpu.upload(pairs);
    changed_in_chunks(gpu, logits, vocab, &[None, Some(2)], |rec, l| {
        encode(gpu, rec, l, rows, &p, pairs.len() / 2)
    })
}

/// The buffer bitwise the reference's, and the reference changing exactly the distinct
/// in-range pairs not masked already (so the comparison cannot pass by masking nothing).
fn check(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    rows: usize,
    pairs: &[u32],
) -> Result<Outcome, String> {
    let got = run(gpu, logits, vocab, rows, pairs)?;
    let mut want = logits.to_vec();
    reference::mask_tokens(&mut want, vocab, rows, pairs);
    let named: BTreeSet<usize> = pairs
        .chunks(2)
        .filter(|p| (p[0] as usize) < rows && (p[1] as usize) < vocab)
        .map(|p| p[0] as usize * vocab + p[1] as usize)
        .filter(|&e| logits[e].to_bits() != MASKED_LOGIT.to_bits())
        .collect();
    let changed: BTreeSet<usize> = (0..logits.len())
        .filter(|&e| want[e].to_bits() != logits[e].to_bits())
        .collect();
    if changed != named {
        return Err(format!(
            "the reference changed {} entries, the pairs name {} in range",
            changed.len(),
            named.len()
        ));
    }
    check_bitwise("masked logits", &got, &want)?;
    Ok(Outcome::exact())
}

/// `n` pairs over `rows` rows of `vocab`, some repeated.
fn pairs(rng: &mut SplitMix64, n: usize, rows: usize, vocab: usize) -> Vec<u32> {
    let mut out: Vec<u32> = (0..n)
        .flat_map(|_| {
            [
                rng.below(rows as u64) as u32,
                rng.below(vocab as u64) as u32,
            ]
        })
        .collect();
    if n >= 4 {
        let (a, b) = (out[0], out[1]);
        out[4] = a;
        out[5] = b;
    }
    out
}

/// Draws from rows whose top token is masked: softmax stats, mask, truncate, sample, as
/// the engine records them.
fn draw(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    params: &[RowParams],
    keys: &[SampleKey],
    masked: &[u32],
) -> Vec<u32> {
    let fixture = SamplingFixture::new(gpu, (logits, vocab), params, keys).with_mask(gpu, masked);
    let drawn = pollster::block_on(fixture.run(gpu)).expect("read-back");
    drawn.tokens
}

/// Five rows of 1000 with one dominant token each (probability about 1 - 1e-5 at T = 1):
/// T = 1, T = 1 again, greedy, T = 1 with top-k 5 and top-p 0.9, and T = 1 with every token
/// but one masked. 200 keys over the rows never draw a masked token; the untruncated ones
/// draw exactly the reference's tokens from the masked logits; the greedy row takes the
/// second-best token. Unmasked, the same keys draw the dominant tokens almost always.
fn end_to_end(gpu: &Gpu) -> Result<Outcome, String> {
    let vocab = 1000;
    let params = [
        RowParams::temperature(1.0),
        RowParams::temperature(1.0),
        RowParams::temperature(0.0),
        RowParams::new(1.0, 5, 0.9, 0.0),
        RowParams::temperature(1.0),
    ];
    let rows = params.len();
    let mut logits = SplitMix64::new(31).vec(rows * vocab, 4.0);
    let mut top = Vec::new();
    for (r, row) in logits.chunks_mut(vocab).enumerate() {
        let c = (r * 211 + 17) % vocab;
        row[c] += 24.0;
        top.push(c as u32);
    }
    let keys: Vec<SampleKey> = (0..200)
        .map(|d| {
            SampleKey::new(
                0xabc + d as u64 % 3,
                d as u32 % 2,
                d as u32,
                9,
                (d % rows) as u32,
            )
        })
        .collect();

    let unmasked = draw(gpu, &logits, vocab, &params, &keys, &[]);
    let dominant = keys
        .iter()
        .zip(&unmasked)
        .filter(|(k, t)| **t == top[k.row as usize])
        .count();
    if dominant < 190 {
        return Err(format!(
            "unmasked, only {dominant} of 200 draws took their row's dominant token"
        ));
    }

    // Each row's dominant token; row 4 keeps only token 123.
    let mut masked: Vec<u32> = top
        .iter()
        .enumerate()
        .flat_map(|(r, &c)| [r as u32, c])
        .collect();
    masked.extend((0..vocab as u32).filter(|&c| c != 123).flat_map(|c| [4, c]));
    let got = draw(gpu, &logits, vocab, &params, &keys, &masked);
    let mut masked_logits = logits.clone();
    reference::mask_tokens(&mut masked_logits, vocab, rows, &masked);
    let want = sample_reference::sample_rows(&masked_logits, vocab, &params, &keys);
    for (d, (key, &token)) in keys.iter().zip(&got).enumerate() {
        let r = key.row as usize;
        if token as usize >= vocab || masked_logits[r * vocab + token as usize] == MASKED_LOGIT {
            return Err(format!("draw {d} (row {r}): drew masked token {token}"));
        }
        if r != 3 && token != want[d] {
            return Err(format!(
                "draw {d} (row {r}): drew {token} but the reference draws {} from the masked logits",
                want[d]
            ));
        }
        if r == 4 && token != 123 {
            return Err(format!(
                "draw {d}: drew {token} from a row where only 123 is unmasked"
            ));
        }
    }
    let second =
        sample_reference::sample(&masked_logits[2 * vocab..3 * vocab], &params[2], &keys[2]);
    if let Some(d) = (0..keys.len()).find(|&d| keys[d].row == 2 && got[d] != second) {
        return Err(format!(
            "greedy draw {d}: {}, want the second-best {second}",
            got[d]
        ));
    }
    Ok(Outcome::exact())
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // One logit; a few; more pairs than a workgroup, in SmolLM2's vocabulary.
    for (rows, vocab, n) in [(1, 1, 1), (4, 1000, 10), (64, 49152, 300), (3, 257, 65)] {
        cases.push(Case::new(
            "mask",
            format!("rows{rows}_v{vocab}_n{n}"),
            move |gpu| {
                let mut rng = SplitMix64::new((rows * vocab + n) as u64);
                let logits = rng.vec(rows * vocab, 10.0);
                let pairs = pairs(&mut rng, n, rows, vocab);
                check(gpu, &logits, vocab, rows, &pairs)
            },
        ));
    }
    // Pairs past the rows (including rows the buffer holds but `rows` does not name) or the
    // vocabulary change nothing; the in-range ones around them still apply.
    cases.push(Case::new("mask", "out-of-range", |gpu| {
        let (rows, vocab) = (3, 300);
        let logits = SplitMix64::new(32).vec(5 * vocab, 10.0);
        let pairs = [
            3,
            0, // a row the buffer holds, past `rows`
            4,
            299, // likewise
            0,
            300, // the token past the vocabulary (row 1's first logit)
            2,
            1000, //
            u32::MAX,
            5, //
            1,
            u32::MAX, //
            u32::MAX,
            u32::MAX, //
            1,
            7, // in range
            2,
            299, // in range
        ];
        check(gpu, &logits, vocab, rows, &pairs)
    }));
    // The same pair many times, and pairs naming already-masked logits.
    cases.push(Case::new("mask", "duplicates", |gpu| {
        let (rows, vocab) = (2, 500);
        let mut logits = SplitMix64::new(33).vec(rows * vocab, 10.0);
        logits[3] = MASKED_LOGIT;
        let mut pairs: Vec<u32> = (0..200).flat_map(|_| [1, 42]).collect();
        pairs.extend([0, 3, 0, 3, 1, 499]);
        let got = run(gpu, &logits, vocab, rows, &pairs)?;
        if got[vocab + 42] != MASKED_LOGIT || got[vocab + 499] != MASKED_LOGIT {
            return Err(format!(
                "logits (1, 42) and (1, 499) are {} and {}",
                got[vocab + 42],
                got[vocab + 499]
            ));
        }
        check(gpu, &logits, vocab, rows, &pairs)
    }));
    // No pairs: nothing is dispatched, nothing changes.
    cases.push(Case::new("mask", "no-pairs", |gpu| {
        let logits = SplitMix64::new(34).vec(3 * 257, 10.0);
        check(gpu, &logits, 257, 3, &[])?;
        // n = 0 with pairs present: they are not read.
        let l = Logits::upload(gpu, &logits, 257, None);
        let p = gpu.upload(&[0u32, 0, 1, 1]);
        let mut rec = gpu.recorder();
        encode(gpu, &mut rec, &l, 3, &p, 0);
        rec.submit();
        let after = pollster::block_on(l.read(gpu, 3)).expect("read-back");
        check_bitwise("logits after n = 0", &after, &logits)?;
        Ok(Outcome::exact())
    }));
    cases.push(Case::new("mask", "masked-top-never-drawn", end_to_end));
    // More workgroups than one grid dimension holds: the dispatch folds into two
    // dimensions, and the workgroups of the grid's second row must run too.
    cases.push(
        Case::new("mask", "2d-grid", |gpu| {
            let (rows, vocab) = (2, 1000);
            let logits = SplitMix64::new(35).vec(rows * vocab, 10.0);
            let n = two_row_grid_pairs(gpu);
            // Every pair names logit (0, 0) but the last workgroup's, which name row 1's
            // first WORKGROUP logits: only that workgroup, past the first grid row, masks
            // them.
            let mut pairs = vec![0u32; 2 * n];
            for (i, pair) in pairs[2 * (n - WORKGROUP)..].chunks_mut(2).enumerate() {
                pair.copy_from_slice(&[1, i as u32]);
            }
            check(gpu, &logits, vocab, rows, &pairs)
        })
        .needing(
            "a binding for (workgroups per dimension + 1) x 64 pairs",
            |gpu| (two_row_grid_pairs(gpu) * 8) as u64 <= gpu.caps.max_binding,
        ),
    );
    cases
}

/// Pairs enough for one more workgroup than a grid dimension holds.
fn two_row_grid_pairs(gpu: &Gpu) -> usize {
    (gpu.caps.max_workgroups_per_dim as usize + 1) * WORKGROUP
}
