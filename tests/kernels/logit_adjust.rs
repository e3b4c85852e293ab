//! Adjusting logits (`logit_adjust::encode`): the whole buffer bitwise the reference's in
//! several chunkings, and the logits given again once put back (`encode_restore`); directly, a bias alone adds, a repetition penalty alone divides a
//! positive logit (times 1/r) and multiplies a negative one, a subtraction alone
//! subtracts, results past the finite range are clamped, and every logit no in-range
//! entry names is untouched bit for bit; entries past the rows or the vocabulary and past
//! `n` change nothing. End to end, with allowed tokens and the sampling chain of the
//! engine: a bias or penalty moves the draws as the reference says, and a masked token
//! stays masked whatever its bias.

use std::collections::BTreeMap;

use sprout::gpu::Gpu;
use sprout::gpu::kernels::logit_adjust::{LogitAdjust, encode, encode_restore};
use sprout::gpu::kernels::mask::{KeepOnly, MASKED_LOGIT};
use sprout::gpu::kernels::sample::{RowParams, SampleKey, SamplingFixture};
use sprout::reference::logit_adjust as reference;
use sprout::reference::mask as mask_reference;
use sprout::reference::sample as sample_reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, changed_in_chunks, check_bitwise};

/// The logits after the first `n` of `adjusts` in `rows` rows, the same bits in every
/// chunking; and after those put back (`encode_restore`), which must be the logits given,
/// bit for bit.
fn run(
    gpu: &Gpu,
    (logits, vocab, rows): (&[f32], usize, usize),
    adjusts: &[LogitAdjust],
    n: usize,
    chunkings: &[Option<usize>],
) -> Result<Vec<f32>, String> {
    let (a, saved) = (gpu.upload(adjusts), gpu.zeros(n.max(1)));
    let restored = changed_in_chunks(gpu, logits, vocab, chunkings, |rec, l| {
        encode(gpu, rec, l, rows, &a, n, &saved);
        encode_restore(gpu, rec, l, rows, &a, n, &saved);
    })?;
    check_bitwise("restored logits vs the logits given", &restored, logits)?;
    changed_in_chunks(gpu, logits, vocab, chunkings, |rec, l| {
        encode(gpu, rec, l, rows, &a, n, &saved)
    })
}

/// What an entry's effect must be, checked apart from the reference.
#[derive(Clone, Copy)]
enum Expect {
    /// Only a bias: `l + bias`.
    Bias,
    /// Only a repetition penalty: `l * pos_scale` above 0, `l * neg_scale` otherwise.
    Repetition,
    /// Only a subtraction: `l - subtract`.
    Subtract,
    /// Anything: the reference's word.
    Reference,
    /// Anything, and its exact `l * scale - subtract` rounds differently in one step
    /// (an fma) than in two: a driver that fused them would fail here.
    Unfused,
}

/// The buffer bitwise the reference's, each entry's logit as its [`Expect`] says, and
/// every other logit untouched.
fn check(
    gpu: &Gpu,
    (logits, vocab, rows): (&[f32], usize, usize),
    adjusts: &[(LogitAdjust, Expect)],
    chunkings: &[Option<usize>],
) -> Result<Outcome, String> {
    let entries: Vec<LogitAdjust> = adjusts.iter().map(|(a, _)| *a).collect();
    let got = run(
        gpu,
        (logits, vocab, rows),
        &entries,
        entries.len(),
        chunkings,
    )?;
    let mut want = logits.to_vec();
    reference::logit_adjust(&mut want, vocab, rows, &entries);
    check_bitwise("adjusted logits vs the reference", &got, &want)?;
    let named: BTreeMap<usize, (LogitAdjust, Expect)> = adjusts
        .iter()
        .filter(|(a, _)| (a.row as usize) < rows && (a.token as usize) < vocab)
        .map(|&(a, e)| (a.row as usize * vocab + a.token as usize, (a, e)))
        .collect();
    for (e, (&g, &l)) in got.iter().zip(logits).enumerate() {
        let expected = match named.get(&e) {
            None => l,
            Some((_, Expect::Reference | Expect::Unfused)) => continue,
            Some((a, Expect::Bias)) => l + a.bias,
            Some((a, Expect::Repetition)) if l > 0.0 => l * a.pos_scale,
            Some((a, Expect::Repetition)) => l * a.neg_scale,
            Some((a, Expect::Subtract)) => l - a.subtract,
        };
        if g.to_bits() != expected.to_bits() {
            return Err(format!(
                "logit {e} (row {}, token {}) was {l}: {g}, want {expected}",
                e / vocab,
                e % vocab
            ));
        }
    }
    if named
        .keys()
        .all(|&e| got[e].to_bits() == logits[e].to_bits())
        && !named.is_empty()
    {
        return Err("no named logit changed".into());
    }
    Ok(Outcome::exact())
}

/// `n` entries on distinct (row, token) of `rows` rows of `vocab`, each kind in turn: a
/// bias, a penalty above 1, one below 1, a subtraction, then all at once (twice).
fn entries(
    rng: &mut SplitMix64,
    n: usize,
    rows: usize,
    vocab: usize,
) -> Vec<(LogitAdjust, Expect)> {
    let mut taken = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        let (row, token) = (
            rng.below(rows as u64) as u32,
            rng.below(vocab as u64) as u32,
        );
        if !taken.insert((row, token)) {
            continue;
        }
        let bias = rng.uniform(5.0);
        let above = 1.0 + (rng.uniform(0.5) + 0.5);
        let below = 0.55 + rng.uniform(0.4).abs();
        let subtract = 0.5 + 0.25 * rng.below(8) as f32;
        out.push(match out.len() % 6 {
            0 => (LogitAdjust::new(row, token, bias, 1.0, 0.0), Expect::Bias),
            1 => (
                LogitAdjust::new(row, token, 0.0, above, 0.0),
                Expect::Repetition,
            ),
            2 => (
                LogitAdjust::new(row, token, 0.0, below, 0.0),
                Expect::Repetition,
            ),
            3 => (
                LogitAdjust::new(row, token, 0.0, 1.0, subtract),
                Expect::Subtract,
            ),
            4 => (
                LogitAdjust::new(row, token, bias, above, subtract),
                Expect::Reference,
            ),
            _ => (
                LogitAdjust::new(row, token, bias, below, -subtract),
                Expect::Reference,
            ),
        });
    }
    out
}

/// Draws from rows processed as the engine processes them: softmax stats, adjust, keep
/// only, truncate, sample.
fn processed_draws(gpu: &Gpu) -> Result<Outcome, String> {
    let vocab = 1000;
    let params = [
        RowParams::temperature(0.0),
        RowParams::temperature(1.0),
        RowParams::temperature(1.0),
        RowParams::temperature(0.0),
    ];
    let rows = params.len();
    let mut logits = SplitMix64::new(51).vec(rows * vocab, 4.0);
    logits[3 * vocab + 600] = 30.0;
    let adjusts = [
        // Row 0: a bias makes token 7 the argmax.
        LogitAdjust::new(0, 7, 30.0, 1.0, 0.0),
        // Row 2: a bias on a token the row does not allow.
        LogitAdjust::new(2, 9, 100.0, 1.0, 0.0),
        // Row 3: the dominant token penalized below the rest (30 / 100).
        LogitAdjust::new(3, 600, 0.0, 100.0, 0.0),
        // Row 1: presence and frequency penalties on one allowed token.
        LogitAdjust::new(1, 50, 0.0, 1.0, 1.5),
    ];
    let allowed = [3, 50, 99, 5];
    let specs = [KeepOnly::new(1, 0, 3), KeepOnly::new(2, 3, 1)];
    let keys: Vec<SampleKey> = (0..120)
        .map(|d| SampleKey::new(0x5eed + d as u64 % 5, 0, d as u32, 4, (d % rows) as u32))
        .collect();
    let fixture = SamplingFixture::new(gpu, (&logits, vocab), &params, &keys)
        .with_adjusts(gpu, &adjusts)
        .with_keep_only(gpu, &specs, &allowed);
    let got = pollster::block_on(fixture.run(gpu))
        .map_err(|e| e.to_string())?
        .tokens;
    let mut processed = logits.clone();
    reference::logit_adjust(&mut processed, vocab, rows, &adjusts);
    mask_reference::keep_only(&mut processed, vocab, rows, &specs, &allowed);
    let want = sample_reference::sample_rows(&processed, vocab, &params, &keys);
    for (d, (key, &token)) in keys.iter().zip(&got).enumerate() {
        let r = key.row as usize;
        if token != want[d] {
            return Err(format!(
                "draw {d} (row {r}): {token}, the reference draws {}",
                want[d]
            ));
        }
        let allowed_here: &[u32] = match r {
            0 => &[7],
            1 => &allowed[..3],
            2 => &[5],
            _ => &[],
        };
        if !allowed_here.is_empty() && !allowed_here.contains(&token) {
            return Err(format!(
                "draw {d} (row {r}): {token}, not in {allowed_here:?}"
            ));
        }
        if r == 3 && token == 600 {
            return Err(format!(
                "draw {d}: the penalized token 600 is still the argmax"
            ));
        }
    }
    Ok(Outcome::exact())
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // Rows 0..6 of a buffer of 7, each kind of entry, and entries past the rows (a row the
    // buffer holds, and none), the vocabulary, or both.
    cases.push(Case::new("logit_adjust", "rows6_v1000", |gpu| {
        let (rows, vocab) = (6, 1000);
        let mut rng = SplitMix64::new(52);
        let logits = rng.vec(7 * vocab, 10.0);
        let mut adjusts = entries(&mut rng, 240, rows, vocab);
        // Penalties whose product rounds differently fused and unfused.
        for (token, repetition) in [(0u32, 1.3f32), (1, 0.7), (2, 1.9)] {
            adjusts.retain(|(a, _)| (a.row, a.token) != (5, token));
            let a = LogitAdjust::new(5, token, 0.0, repetition, 0.1);
            adjusts.push((a, Expect::Unfused));
        }
        for (row, token) in [(6, 0), (u32::MAX, 5), (0, 1000), (2, u32::MAX), (9, 2000)] {
            let a = LogitAdjust::new(row, token, 3.0, 2.0, 1.0);
            adjusts.insert(adjusts.len() / 2, (a, Expect::Reference));
        }
        check(
            gpu,
            (&logits, vocab, rows),
            &adjusts,
            &[None, Some(4), Some(1)],
        )
    }));
    // Results past the finite range: clamped to +-1e30, never below a masked logit.
    cases.push(Case::new("logit_adjust", "clamped", |gpu| {
        let (rows, vocab) = (1, 8);
        let logits = [10.0, -10.0, MASKED_LOGIT, 2.0, -2.0, 1e29, 0.0, 1.0];
        let adjusts = [
            LogitAdjust::new(0, 0, 0.0, 1e-38, 0.0), // 10 * 1e38
            LogitAdjust::new(0, 1, 0.0, 1e38, 0.0),  // -10 * 1e38
            LogitAdjust::new(0, 2, 100.0, 3.0, 2.0), // masked, then tripled
            LogitAdjust::new(0, 5, 0.0, 0.05, 0.0),  // 2e30
        ];
        let got = run(gpu, (&logits, vocab, rows), &adjusts, 4, &[None])?;
        let want = [1e30, -1e30, MASKED_LOGIT, 2.0, -2.0, 1e30, 0.0, 1.0];
        check_bitwise("clamped logits", &got, &want)?;
        let mut reference_logits = logits.to_vec();
        reference::logit_adjust(&mut reference_logits, vocab, rows, &adjusts);
        check_bitwise("clamped logits vs the reference", &got, &reference_logits)?;
        Ok(Outcome::exact())
    }));
    // Only the first n entries apply; n = 0 changes nothing.
    cases.push(Case::new("logit_adjust", "first-n", |gpu| {
        let (rows, vocab) = (2, 300);
        let logits = SplitMix64::new(53).vec(rows * vocab, 10.0);
        let adjusts: Vec<LogitAdjust> = (0..4)
            .map(|t| LogitAdjust::new(1, t, 1.0, 1.0, 0.0))
            .collect();
        let none = run(gpu, (&logits, vocab, rows), &adjusts, 0, &[None])?;
        check_bitwise("logits after n = 0", &none, &logits)?;
        let got = run(gpu, (&logits, vocab, rows), &adjusts, 2, &[None, Some(1)])?;
        let mut want = logits.clone();
        reference::logit_adjust(&mut want, vocab, rows, &adjusts[..2]);
        check_bitwise("logits after n = 2", &got, &want)?;
        Ok(Outcome::exact())
    }));
    // Gemma 3's vocabulary, its last token included, rows in chunks of one.
    cases.push(Case::new("logit_adjust", "v262144", |gpu| {
        let (rows, vocab) = (3, 262_144);
        let mut rng = SplitMix64::new(54);
        let logits = rng.vec(rows * vocab, 10.0);
        let mut adjusts = entries(&mut rng, 300, rows, vocab);
        adjusts[0].0.token = vocab as u32 - 1;
        check(gpu, (&logits, vocab, rows), &adjusts, &[None, Some(1)])
    }));
    cases.push(Case::new(
        "logit_adjust",
        "processed-draws",
        processed_draws,
    ));
    cases
}
