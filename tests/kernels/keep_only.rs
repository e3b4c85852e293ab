//! Keeping only allowed tokens (`mask::encode_keep_only`): bitwise the reference's
//! buffer, and directly the property: in a row with specs, a token every spec allows is
//! untouched bit for bit and every other becomes `MASKED_LOGIT`; rows without a spec
//! (including those past `rows`) are untouched. Slices empty, clamped at the end of the
//! allowed ids or wholly past them, two specs on one row, specs in no row order; a
//! vocabulary of 262,144 with tile-boundary tokens; more workgroups than a grid dimension
//! holds; the logits in several chunkings, all bitwise equal.

use std::collections::BTreeSet;

use sprout::gpu::Gpu;
use sprout::gpu::kernels::mask::{KeepOnly, MASKED_LOGIT, encode_keep_only};
use sprout::reference::mask as reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, changed_in_chunks, check_bitwise};

/// The logits after keeping `specs` in `rows` rows, the same bits in every chunking.
fn run(
    gpu: &Gpu,
    (logits, vocab, rows): (&[f32], usize, usize),
    specs: &[KeepOnly],
    allowed: &[u32],
    chunkings: &[Option<usize>],
) -> Result<Vec<f32>, String> {
    let (s, a) = (gpu.upload(specs), gpu.upload(allowed));
    changed_in_chunks(gpu, logits, vocab, chunkings, |rec, l| {
        encode_keep_only(gpu, rec, l, rows, &s, specs.len(), &a)
    })
}

/// The tokens each row may keep: the intersection of its specs' clamped slices (`None`
/// for a row without a spec below `rows`).
fn kept(rows: usize, specs: &[KeepOnly], allowed: &[u32]) -> Vec<Option<BTreeSet<u32>>> {
    let mut out: Vec<Option<BTreeSet<u32>>> = vec![None; rows];
    for s in specs.iter().filter(|s| (s.row as usize) < rows) {
        let first = (s.first as usize).min(allowed.len());
        let end = (first + s.count as usize).min(allowed.len());
        let slice: BTreeSet<u32> = allowed[first..end].iter().copied().collect();
        let row = &mut out[s.row as usize];
        *row = Some(match row.take() {
            None => slice,
            Some(k) => k.intersection(&slice).copied().collect(),
        });
    }
    out
}

fn check(
    gpu: &Gpu,
    (logits, vocab, rows): (&[f32], usize, usize),
    specs: &[KeepOnly],
    allowed: &[u32],
    chunkings: &[Option<usize>],
) -> Result<Outcome, String> {
    let got = run(gpu, (logits, vocab, rows), specs, allowed, chunkings)?;
    let mut want = logits.to_vec();
    reference::keep_only(&mut want, vocab, rows, specs, allowed);
    check_bitwise("kept logits vs the reference", &got, &want)?;
    let keep = kept(rows, specs, allowed);
    for (e, (&g, &l)) in got.iter().zip(logits).enumerate() {
        let (row, token) = (e / vocab, (e % vocab) as u32);
        let masked = keep
            .get(row)
            .and_then(Option::as_ref)
            .is_some_and(|k| !k.contains(&token));
        let expected = if masked { MASKED_LOGIT } else { l };
        if g.to_bits() != expected.to_bits() {
            return Err(format!(
                "row {row} token {token}: {g}, want {expected} (masked: {masked})"
            ));
        }
    }
    Ok(Outcome::exact())
}

/// `n` distinct tokens below `vocab` with `extra` among them, sorted.
fn some_tokens(rng: &mut SplitMix64, n: usize, vocab: usize, extra: &[u32]) -> Vec<u32> {
    let mut set: BTreeSet<u32> = extra.iter().copied().collect();
    while set.len() < n {
        set.insert(rng.below(vocab as u64) as u32);
    }
    set.into_iter().collect()
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // Rows 0..7 of a buffer of 8: each kind of slice once, row 6 without a spec, a spec
    // for row 7 (held, past `rows`) and one for no row at all; specs out of row order.
    cases.push(Case::new("mask", "keep-only/rows7_v1000", |gpu| {
        let (rows, vocab) = (7, 1000);
        let mut rng = SplitMix64::new(41);
        let logits = rng.vec(8 * vocab, 10.0);
        let mut allowed = some_tokens(&mut rng, 12, vocab, &[]);
        let mut slice = |tokens: &[u32]| {
            let first = allowed.len() as u32;
            allowed.extend_from_slice(tokens);
            (first, tokens.len() as u32)
        };
        let edges = slice(&[0, 1, 255, 256, 511, 999]);
        let one = slice(&[0]);
        let d1 = slice(&[3, 4, 5, 6, 7]);
        let d2 = slice(&[5, 6, 7, 8, 9]);
        let tail = slice(&[17, 400]);
        let specs = [
            KeepOnly::new(5, d1.0, d1.1),
            KeepOnly::new(0, 0, 12),
            KeepOnly::new(4, edges.0, edges.1),
            KeepOnly::new(7, one.0, one.1),       // past `rows`
            KeepOnly::new(u32::MAX, 0, 12),       // no row
            KeepOnly::new(2, one.0, one.1),       // one token
            KeepOnly::new(1, tail.0, 100),        // clamped to the last two ids
            KeepOnly::new(3, u32::MAX, u32::MAX), // wholly past: the row is masked
            KeepOnly::new(5, d2.0, d2.1),         // with d1: 5, 6 and 7 kept
        ];
        check(
            gpu,
            (&logits, vocab, rows),
            &specs,
            &allowed,
            &[None, Some(3), Some(1)],
        )
    }));
    // Empty slices: a row keeping nothing is wholly masked; and n = 0 reads no spec.
    cases.push(Case::new("mask", "keep-only/empty", |gpu| {
        let (rows, vocab) = (3, 257);
        let logits = SplitMix64::new(42).vec(rows * vocab, 10.0);
        let specs = [KeepOnly::new(1, 0, 0), KeepOnly::new(2, 3, 0)];
        check(gpu, (&logits, vocab, rows), &specs, &[], &[None, Some(2)])?;
        let after = run(gpu, (&logits, vocab, rows), &specs[..0], &[4, 5], &[None])?;
        check_bitwise("logits after n = 0", &after, &logits)?;
        Ok(Outcome::exact())
    }));
    // Gemma 3's vocabulary: 256 tiles a row, thousands of allowed ids with the tokens at
    // the tiles' edges, rows in chunks of one.
    cases.push(Case::new("mask", "keep-only/v262144", |gpu| {
        let (rows, vocab) = (3, 262_144);
        let mut rng = SplitMix64::new(43);
        let logits = rng.vec(rows * vocab, 10.0);
        let edges = [0, 1023, 1024, 2047, 131_072, 262_143];
        let mut allowed = some_tokens(&mut rng, 3000, vocab, &edges);
        let many = allowed.len() as u32;
        allowed.push(131_071);
        let specs = [KeepOnly::new(2, many, 1), KeepOnly::new(0, 0, many)];
        check(
            gpu,
            (&logits, vocab, rows),
            &specs,
            &allowed,
            &[None, Some(1)],
        )
    }));
    // A spec a row, one tile each, more specs than a grid dimension holds: the folded
    // grid's second row of workgroups must run too.
    cases.push(
        Case::new("mask", "keep-only/2d-grid", |gpu| {
            let vocab = 5;
            let rows = gpu.caps.max_workgroups_per_dim as usize + 3;
            let logits = SplitMix64::new(44).vec(rows * vocab, 10.0);
            // Every subset of the 5 tokens, ordered, back to back: row r keeps subset r % 32.
            let mut allowed = Vec::new();
            let subsets: Vec<(u32, u32)> = (0..32u32)
                .map(|bits| {
                    let first = allowed.len() as u32;
                    allowed.extend((0..5).filter(|t| bits >> t & 1 == 1));
                    (first, allowed.len() as u32 - first)
                })
                .collect();
            let specs: Vec<KeepOnly> = (0..rows as u32)
                .map(|r| KeepOnly::new(r, subsets[r as usize % 32].0, subsets[r as usize % 32].1))
                .collect();
            check(
                gpu,
                (&logits, vocab, rows),
                &specs,
                &allowed,
                &[None, Some(40_000)],
            )
        })
        .needing(
            "a binding for (workgroups per dimension + 3) specs",
            |gpu| (gpu.caps.max_workgroups_per_dim as u64 + 3) * 20 <= gpu.caps.max_binding,
        ),
    );
    cases
}
