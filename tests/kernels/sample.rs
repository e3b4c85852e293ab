//! Sampling on the GPU. Plain temperature draws take exactly the token the reference's hash
//! and Gumbel-max give, from the logits row each key names (several draws may share one),
//! the same alone, in a batch and wherever the row sits; the request index changes the
//! noise; the raw log-probs equal softmax's target log-probs bit for bit.
//! Truncation (top-k, top-p, min-p, temperature): the cut tau equals the reference's
//! (sorting, f64 masses) and log_z is close; drawn tokens lie in the kept set, equal the
//! reference's draws for >= 99% of keys, and carry sampling log-probs `s - log_z`; the
//! draw frequencies pass a chi-square goodness-of-fit test against the renormalised
//! softmax; and draws and both log-probs are bitwise batch invariant.

use std::collections::BTreeSet;

use sprout::gpu::Gpu;
use sprout::gpu::kernels::Logits;
use sprout::gpu::kernels::reduction::Reduction;
use sprout::gpu::kernels::sample::{Drawn, RowParams, SampleKey, SamplingFixture, encode_truncate};
use sprout::gpu::kernels::softmax::{self, Extra, RowStats};
use sprout::reference::sample as reference;
use sprout::rng::SplitMix64;

use crate::chi_square::chi_square;
use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32};

/// Draws are exact (the same token as the reference); log-probs are compared bitwise with
/// softmax's, and with the f64 reference within softmax's own tolerance.
const LOGPROB_TOLERANCE: f64 = 1e-10;
/// log_z against the reference: `|gpu - ref| <= LOG_Z_TOLERANCE * max(1, |ref|)`.
const LOG_Z_TOLERANCE: f64 = 1e-5;
/// A top-p cut may differ from the reference's only where the reference's cut moves when
/// `top_p` moves by this relative amount (f32 masses against f64 ones).
const TOP_P_NEAR_TIE: f32 = 1e-5;
/// The least share of draws that must equal the reference's (scores in f32 against f64
/// can order a near-tie differently).
const MIN_MATCH_RATE: f64 = 0.99;
/// Chi-square goodness of fit: the least p-value accepted.
const MIN_P_VALUE: f64 = 1e-3;

fn exact() -> Outcome {
    Outcome {
        nmse: 0.0,
        tolerance: 0.0,
    }
}

/// softmax, truncate, sample and draw_logprobs over `logits [rows, vocab]` (one
/// [`RowParams`] per row), as the engine records them; checked the same, bit for bit,
/// with the logits in chunks of 2 rows.
fn run(gpu: &Gpu, logits: &[f32], vocab: usize, params: &[RowParams], keys: &[SampleKey]) -> Drawn {
    let [whole, chunked] = [None, Some(2)].map(|chunk_rows| {
        let fixture = SamplingFixture::chunked(gpu, (logits, vocab), params, keys, chunk_rows);
        pollster::block_on(fixture.run(gpu)).expect("read-back")
    });
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        chunked.tokens, whole.tokens,
        "tokens in chunks of 2 rows vs whole"
    );
    for (what, c, w) in [
        ("cuts", &chunked.cut, &whole.cut),
        ("log-probs", &chunked.logprobs, &whole.logprobs),
        ("sampling log-probs", &chunked.sampling, &whole.sampling),
    ] {
        assert_eq!(bits(c), bits(w), "{what} in chunks of 2 rows vs whole");
    }
    whole
}

/// The tokens drawn, with plain temperature `temperature` on every row.
fn draw(gpu: &Gpu, logits: &[f32], vocab: usize, temperature: f32, keys: &[SampleKey]) -> Vec<u32> {
    let rows = logits.len() / vocab;
    run(
        gpu,
        logits,
        vocab,
        &vec![RowParams::temperature(temperature); rows],
        keys,
    )
    .tokens
}

/// `m` keys over `rows` logits rows: draw `d` reads row `d % rows`, with mixed seeds,
/// requests and streams.
fn keys(m: usize, rows: usize) -> Vec<SampleKey> {
    (0..m)
        .map(|d| {
            SampleKey::new(
                0x1234_5678_9abc_def0 + d as u64 % 3,
                d as u32 % 2,
                d as u32 % 5,
                100 + d as u32,
                (d % rows) as u32,
            )
        })
        .collect()
}

fn check(
    gpu: &Gpu,
    m: usize,
    rows: usize,
    vocab: usize,
    temperature: f32,
) -> Result<Outcome, String> {
    let logits = SplitMix64::new(vocab as u64).vec(rows * vocab, 4.0);
    let keys = keys(m, rows);
    let got = draw(gpu, &logits, vocab, temperature, &keys);
    let params = vec![RowParams::temperature(temperature); rows];
    let want = reference::sample_rows(&logits, vocab, &params, &keys);
    for (d, (g, w)) in got.iter().zip(&want).enumerate() {
        if g != w {
            return Err(format!(
                "draw {d} (row {}): drew {g} but the reference draws {w}",
                keys[d].row
            ));
        }
    }
    // The draws must actually vary (a broken hash giving constant noise would still be
    // deterministic): with T >= 1 and 64 draws, expect several distinct tokens.
    let distinct = got.iter().collect::<BTreeSet<_>>().len();
    if temperature >= 1.0 && distinct < 4 {
        return Err(format!("only {distinct} distinct tokens in {m} draws"));
    }
    Ok(exact())
}

/// Tokens drawn, their log-probs by `encode_draw_logprobs`, and softmax's target log-probs
/// for the same rows and tokens (each draw's row copied to its own row of a second buffer).
fn logprobs_case(gpu: &Gpu, rows: usize, vocab: usize, m: usize) -> Result<Outcome, String> {
    let logits = SplitMix64::new(77).vec(rows * vocab, 6.0);
    let mut keys = keys(m, rows);
    keys.reverse(); // rows in another order than the buffer's
    let got = run(
        gpu,
        &logits,
        vocab,
        &vec![RowParams::temperature(1.0); rows],
        &keys,
    );

    let per_draw: Vec<f32> = keys
        .iter()
        .flat_map(|key| &logits[key.row as usize * vocab..(key.row as usize + 1) * vocab])
        .copied()
        .collect();
    let pl = Logits::upload(gpu, &per_draw, vocab, None);
    let (targets, target_lp) = (gpu.upload(&got.tokens), gpu.zeros(m));
    let mut rec = gpu.recorder();
    let extra = Extra::TargetLogprobs {
        targets: &targets,
        logprobs: &target_lp,
    };
    softmax::encode(gpu, &mut rec, &pl, m, &RowStats::zeros(gpu, m), extra);
    rec.submit();
    check_bitwise(
        "draw log-probs vs softmax target log-probs",
        &got.logprobs,
        &read_f32(gpu, &target_lp),
    )?;
    // Untruncated at T = 1 the sampling log-prob is the raw one, up to f32 rounding of
    // log_z against lse.
    check_close(&got.sampling, &got.logprobs, LOGPROB_TOLERANCE)?;
    check_close(
        &got.logprobs,
        &reference::draw_logprobs(&logits, vocab, &keys, &got.tokens),
        LOGPROB_TOLERANCE,
    )
}

// ---- truncation --------------------------------------------------------------------------

/// Kinds of logits rows: LLM-like ones and ones full of ties.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Uniform in [-4, 4).
    Uniform,
    /// Uniform in [-2, 2) with 20 tokens raised by 6 to 9: a few likely tokens.
    Peaked,
    /// Uniform in [-4, 4) rounded to quarters: 33 values, ties everywhere.
    Quantized,
    /// Uniform, with copies of the logit at the cut planted until the cut is a tie.
    Planted,
}

const KINDS: [Kind; 4] = [Kind::Uniform, Kind::Peaked, Kind::Quantized, Kind::Planted];

fn row_of(kind: Kind, vocab: usize, seed: u64, params: &RowParams) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    match kind {
        Kind::Uniform => rng.vec(vocab, 4.0),
        Kind::Peaked => {
            let mut row = rng.vec(vocab, 2.0);
            for _ in 0..20 {
                let c = rng.below(vocab as u64) as usize;
                row[c] += 7.5 + rng.uniform(1.5);
            }
            row
        }
        Kind::Quantized => (0..vocab)
            .map(|_| (rng.uniform(4.0) * 4.0).round() / 4.0)
            .collect(),
        Kind::Planted => {
            let mut row = rng.vec(vocab, 4.0);
            for _ in 0..8 {
                let tau = reference::truncate(&row, params).tau;
                if row.iter().filter(|&&l| l == tau).count() >= 2 {
                    break;
                }
                // Copies from below the cut (from above when nothing is below it).
                let below: Vec<usize> = (0..vocab).filter(|&c| row[c] < tau).collect();
                let from = if below.is_empty() {
                    (0..vocab).filter(|&c| row[c] > tau).collect()
                } else {
                    below
                };
                for _ in 0..3 {
                    row[from[rng.below(from.len() as u64) as usize]] = tau;
                }
            }
            row
        }
    }
}

/// The truncation settings the truncate and draw cases cover, at temperature `t`.
fn settings(t: f32) -> Vec<(String, RowParams)> {
    let mut out = Vec::new();
    for (k, p, min_p) in [
        (1, 1.0, 0.0),
        (5, 1.0, 0.0),
        (50, 1.0, 0.0),
        (0, 0.5, 0.0),
        (0, 0.9, 0.0),
        (0, 0.99, 0.0),
        (0, 1.0, 0.05),
        (0, 1.0, 0.2),
        (50, 0.9, 0.0),
        (5, 0.5, 0.05),
        (50, 0.99, 0.2),
        (0, 0.9, 0.05),
        (0, 0.01, 0.0),
        (100_000, 1.0, 0.0),
        (0, 1.0, 0.0),
    ] {
        out.push((
            format!("T{t} k{k} p{p} min_p{min_p}"),
            RowParams::new(t, k, p, min_p),
        ));
    }
    out.push(("greedy".into(), RowParams::temperature(0.0)));
    out
}

/// A batch of rows: every setting on every kind of row.
fn truncation_rows(
    vocab: usize,
    temperature: f32,
    seed: u64,
) -> (Vec<f32>, Vec<RowParams>, Vec<String>) {
    let (mut logits, mut params, mut names) = (Vec::new(), Vec::new(), Vec::new());
    for (i, kind) in KINDS.into_iter().enumerate() {
        for (j, (name, p)) in settings(temperature).into_iter().enumerate() {
            logits.extend(row_of(kind, vocab, seed + 1000 * i as u64 + j as u64, &p));
            params.push(p);
            names.push(format!("{kind:?} {name}"));
        }
    }
    (logits, params, names)
}

fn cut_of(gpu: &Gpu, logits: &[f32], vocab: usize, params: &[RowParams]) -> Vec<f32> {
    let rows = params.len();
    let l = Logits::upload(gpu, logits, vocab, None);
    let (p, cut) = (gpu.upload(params), gpu.zeros(2 * rows));
    let mut rec = gpu.recorder();
    encode_truncate(gpu, &mut rec, &l, rows, &p, &cut);
    rec.submit();
    read_f32(gpu, &cut)
}

/// Whether a top-p cut `tau` that differs from the reference's is a near-tie: the
/// reference's own cut reaches it when `top_p` moves by [`TOP_P_NEAR_TIE`].
fn top_p_near_tie(row: &[f32], params: &RowParams, tau: f32) -> bool {
    if params.top_p >= 1.0 {
        return false;
    }
    let at = |top_p: f32| reference::truncate(row, &RowParams { top_p, ..*params }).tau;
    let (low, high) = (
        at((params.top_p * (1.0 + TOP_P_NEAR_TIE)).min(1.0)),
        at(params.top_p * (1.0 - TOP_P_NEAR_TIE)),
    );
    low <= tau && tau <= high
}

/// `s_max + ln(sum_{l_c >= tau} exp(s_c - s_max))` in f64.
fn log_z_over(row: &[f32], params: &RowParams, tau: f32) -> f64 {
    let s = |l: f32| (l * params.inv_temperature) as f64;
    let s_max = s(row.iter().copied().fold(f32::MIN, f32::max));
    let mass: f64 = row
        .iter()
        .filter(|&&l| l >= tau)
        .map(|&l| (s(l) - s_max).exp())
        .sum();
    s_max + mass.ln()
}

/// `|got - want| / max(1, |want|)`, to compare with [`LOG_Z_TOLERANCE`].
fn log_z_error(got: f32, want: f64) -> f64 {
    (got as f64 - want).abs() / want.abs().max(1.0)
}

fn truncate_case(gpu: &Gpu, vocab: usize, temperature: f32) -> Result<Outcome, String> {
    let (logits, params, names) = truncation_rows(vocab, temperature, vocab as u64);
    let got = cut_of(gpu, &logits, vocab, &params);
    let mut near_ties = Vec::new();
    let (mut tied_cuts, mut worst) = (0, 0.0f64);
    for (r, row) in logits.chunks(vocab).enumerate() {
        let want = reference::truncate(row, &params[r]);
        let (tau, log_z) = (got[2 * r], got[2 * r + 1]);
        if tau.to_bits() != want.tau.to_bits() {
            if !top_p_near_tie(row, &params[r], tau) {
                return Err(format!(
                    "row {r} ({}): tau {tau} but the reference's is {}",
                    names[r], want.tau
                ));
            }
            // Then log_z is the log normaliser over the kernel's own kept set.
            let want = log_z_over(row, &params[r], tau);
            if log_z_error(log_z, want) > LOG_Z_TOLERANCE {
                return Err(format!(
                    "row {r} ({}): log_z {log_z} but the log normaliser over its cut is {want}",
                    names[r]
                ));
            }
            near_ties.push(names[r].clone());
        } else {
            let error = log_z_error(log_z, want.log_z);
            if error > LOG_Z_TOLERANCE {
                return Err(format!(
                    "row {r} ({}): log_z {log_z} but the reference's is {}",
                    names[r], want.log_z
                ));
            }
            worst = worst.max(error);
        }
        if row.iter().filter(|&&l| l == tau).count() > 1 {
            tied_cuts += 1;
        }
    }
    // The quantized and planted rows (half of them) must cut at a tie.
    if tied_cuts < logits.len() / vocab / 2 {
        return Err(format!(
            "only {tied_cuts} of {} cuts are ties: the planted ties do not reach the cut",
            logits.len() / vocab
        ));
    }
    println!(
        "{} sample::truncate v{vocab} T{temperature}: {} rows, {tied_cuts} cut at a tie, \
         worst log_z error {worst:.2e}, top-p near-ties {near_ties:?}",
        gpu.adapter.label(),
        params.len()
    );
    Ok(Outcome {
        nmse: worst,
        tolerance: LOG_Z_TOLERANCE,
    })
}

/// Draws from rows of every kind and setting: in S, mostly equal to the reference's, with
/// sampling log-probs `s - log_z`; at T = 1, a top-k 5 row's sampling log-prob is the raw
/// one minus the log of the top-5 mass.
fn draws_case(
    gpu: &Gpu,
    vocab: usize,
    temperature: f32,
    per_row: usize,
) -> Result<Outcome, String> {
    let (logits, params, names) = truncation_rows(vocab, temperature, 7 * vocab as u64);
    let rows = params.len();
    let keys: Vec<SampleKey> = (0..rows * per_row)
        .map(|d| {
            SampleKey::new(
                0xfeed + d as u64 % 7,
                d as u32 % 3,
                d as u32,
                50,
                (d % rows) as u32,
            )
        })
        .collect();
    let got = run(gpu, &logits, vocab, &params, &keys);
    let cuts = reference::truncate_rows(&logits, vocab, &params);
    let stats = sprout::reference::softmax::row_stats(&logits, vocab);
    let mut matches = 0;
    for (d, key) in keys.iter().enumerate() {
        let r = key.row as usize;
        let row = &logits[r * vocab..(r + 1) * vocab];
        let (p, token) = (&params[r], got.tokens[d]);
        let (tau, log_z) = (got.cut[2 * r], got.cut[2 * r + 1]);
        if token as usize >= vocab || row[token as usize] < tau {
            return Err(format!(
                "draw {d} (row {r}, {}): token {token} is outside the kept set (tau {tau})",
                names[r]
            ));
        }
        if token == reference::sample_with_cut(row, p, &cuts[r], key) {
            matches += 1;
        }
        let l = row[token as usize];
        let want = if p.is_greedy() {
            0.0
        } else {
            l * p.inv_temperature - log_z
        };
        if got.sampling[d].to_bits() != want.to_bits() {
            return Err(format!(
                "draw {d} (row {r}, {}): sampling log-prob {} but s - log_z is {want}",
                names[r], got.sampling[d]
            ));
        }
        if p.top_k == 5 && p.top_p == 1.0 && !p.has_min_p() && p.inv_temperature == 1.0 {
            let lse = stats[r].lse;
            let mass: f64 = row
                .iter()
                .filter(|&&x| x >= tau)
                .map(|&x| (x as f64 - lse).exp())
                .sum();
            let want = got.logprobs[d] as f64 - mass.ln();
            if (got.sampling[d] as f64 - want).abs() > 1e-5 {
                return Err(format!(
                    "draw {d} (row {r}, {}): sampling log-prob {} but raw minus log(top-5 \
                     mass) is {want}",
                    names[r], got.sampling[d]
                ));
            }
        }
    }
    let rate = matches as f64 / keys.len() as f64;
    println!(
        "{} sample::draws v{vocab} T{temperature}: {matches} of {} draws equal the \
         reference's ({:.2}%)",
        gpu.adapter.label(),
        keys.len(),
        100.0 * rate
    );
    if rate < MIN_MATCH_RATE {
        return Err(format!(
            "only {matches} of {} draws equal the reference's",
            keys.len()
        ));
    }
    Ok(exact())
}

// ---- chi-square goodness of fit ----------------------------------------------------------

/// N draws (streams 0..N) from one row of 50 logits under `params`: their frequencies
/// against softmax(s) renormalised over the reference's kept set.
fn chi_square_case(gpu: &Gpu, what: &str, params: RowParams) -> Result<Outcome, String> {
    const N: u32 = 20_000;
    let vocab = 50;
    let logits = SplitMix64::new(2024).vec(vocab, 3.0);
    let keys: Vec<SampleKey> = (0..N)
        .map(|s| SampleKey::new(0x5eed_0000_0001, 3, s, 17, 0))
        .collect();
    let got = run(gpu, &logits, vocab, &[params], &keys);
    let cut = reference::truncate(&logits, &params);
    let probs: Vec<f64> = (0..vocab)
        .map(|c| reference::sampling_logprob(&logits, &params, &cut, c as u32).exp())
        .collect();
    let mut counts = vec![0u64; vocab];
    for (d, &token) in got.tokens.iter().enumerate() {
        match probs.get(token as usize) {
            Some(&p) if p > 0.0 => counts[token as usize] += 1,
            _ => {
                return Err(format!(
                    "draw {d}: token {token} is outside the kept set (tau {})",
                    cut.tau
                ));
            }
        }
    }
    let expected: Vec<f64> = probs.iter().map(|p| p * N as f64).collect();
    let (chi2, df, p_value) = chi_square(&counts, &expected);
    let kept = probs.iter().filter(|&&p| p > 0.0).count();
    println!(
        "{} sample::chi-square {what}: {kept} tokens kept, chi2 {chi2:.2} on {df} df, \
         p-value {p_value:.4}",
        gpu.adapter.label()
    );
    if p_value.is_nan() || p_value <= MIN_P_VALUE {
        return Err(format!(
            "{what}: chi2 {chi2:.2} on {df} df, p-value {p_value:.3e} <= {MIN_P_VALUE:.0e} \
             (counts {counts:?}, expected {expected:.1?})"
        ));
    }
    Ok(exact())
}

// ---- batch invariance --------------------------------------------------------------------

/// Draws with mixed truncation from 8 rows, 64 at once, against each draw alone (its row
/// alone in the buffer) and with its row as row 3 of 5 among rows with other params:
/// the same token and bitwise the same raw and sampling log-probs.
fn batch_invariance_case(gpu: &Gpu) -> Result<Outcome, String> {
    let vocab = 3000;
    let all: Vec<RowParams> = settings(0.8).into_iter().map(|(_, p)| p).collect();
    let params: Vec<RowParams> = (0..8).map(|r| all[(3 * r + 1) % all.len()]).collect();
    let logits = SplitMix64::new(9).vec(8 * vocab, 4.0);
    let keys = keys(64, 8);
    let batch = run(gpu, &logits, vocab, &params, &keys);
    for d in [0, 5, 17, 42, 63] {
        let r = keys[d].row as usize;
        let row = &logits[r * vocab..(r + 1) * vocab];
        let alone = run(
            gpu,
            row,
            vocab,
            &[params[r]],
            &[SampleKey { row: 0, ..keys[d] }],
        );
        let mut five = SplitMix64::new(d as u64).vec(5 * vocab, 6.0);
        five[3 * vocab..4 * vocab].copy_from_slice(row);
        let mut five_params: Vec<RowParams> = (0..5).map(|i| all[(i + d) % all.len()]).collect();
        five_params[3] = params[r];
        let mut five_keys = self::keys(20, 5);
        five_keys[11] = SampleKey { row: 3, ..keys[d] };
        let among = run(gpu, &five, vocab, &five_params, &five_keys);
        for (what, other, i) in [("alone", &alone, 0), ("as row 3 of 5", &among, 11)] {
            let same = batch.tokens[d] == other.tokens[i]
                && batch.logprobs[d].to_bits() == other.logprobs[i].to_bits()
                && batch.sampling[d].to_bits() == other.sampling[i].to_bits();
            if !same {
                return Err(format!(
                    "draw {d}: (token, log-prob, sampling log-prob) ({}, {}, {}) in a batch of \
                     64, ({}, {}, {}) {what}",
                    batch.tokens[d],
                    batch.logprobs[d],
                    batch.sampling[d],
                    other.tokens[i],
                    other.logprobs[i],
                    other.sampling[i]
                ));
            }
        }
    }
    Ok(exact())
}

/// Every truncation setting on every kind of row, cut and drawn with the butterfly's last
/// levels and with the tree's: the cuts, tokens and both log-probs bit for bit.
fn butterfly_case(gpu: &Gpu, vocab: usize) -> Result<Outcome, String> {
    let (mut logits, params, _) = truncation_rows(vocab, 1.0, 11);
    // A coarse grid: ties in the counts, the masses and the argmax across invocations.
    logits
        .iter_mut()
        .for_each(|v| *v = (*v * 4.0).round() / 4.0);
    let keys = keys(4 * params.len(), params.len());
    let butterfly = Reduction::best(&gpu.caps);
    let [got, tree] = [butterfly, Reduction::Tree].map(|reduction| {
        let fixture =
            SamplingFixture::new(gpu, (&logits, vocab), &params, &keys).with_reduction(reduction);
        pollster::block_on(fixture.run(gpu)).expect("read-back")
    });
    let what = format!("{butterfly:?} vs the tree");
    let ids = |v: &[u32]| v.iter().map(|&i| i as f32).collect::<Vec<_>>();
    check_bitwise(
        &format!("{what}: tokens"),
        &ids(&got.tokens),
        &ids(&tree.tokens),
    )?;
    check_bitwise(&format!("{what}: cuts"), &got.cut, &tree.cut)?;
    check_bitwise(&format!("{what}: log-probs"), &got.logprobs, &tree.logprobs)?;
    check_bitwise(&format!("{what}: sampling"), &got.sampling, &tree.sampling)?;
    Ok(exact())
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for vocab in [257, 49152] {
        let case = Case::new(
            "sample",
            format!("butterfly-is-the-tree/v{vocab}"),
            move |gpu| butterfly_case(gpu, vocab),
        );
        cases.push(case.needing("subgroups of 4 or more", |gpu| {
            Reduction::best(&gpu.caps).needs_subgroups()
        }));
    }
    for (rows, vocab, temperature) in [
        (64, 1000, 0.0),
        (64, 1000, 1.0),
        (64, 49152, 1.0),
        (64, 257, 0.7),
        (64, 50257, 2.0),
        (5, 1000, 1.0),
        (1, 3000, 1.0),
    ] {
        cases.push(Case::new(
            "sample",
            format!("rows{rows}_v{vocab}_t{temperature}"),
            move |gpu| check(gpu, 64, rows, vocab, temperature),
        ));
    }
    cases.push(Case::new("sample", "batch-invariance", |gpu| {
        let (m, vocab) = (64, 3000);
        let logits = SplitMix64::new(9).vec(m * vocab, 4.0);
        let keys = keys(m, m);
        let batch = draw(gpu, &logits, vocab, 1.0, &keys);
        for r in [0, 17, 63] {
            let alone_key = SampleKey { row: 0, ..keys[r] };
            let row = &logits[r * vocab..(r + 1) * vocab];
            let alone = draw(gpu, row, vocab, 1.0, &[alone_key]);
            if alone[0] != batch[r] {
                return Err(format!(
                    "draw {r}: {} alone, {} in a batch of {m}",
                    alone[0], batch[r]
                ));
            }
        }
        Ok(exact())
    }));
    cases.push(Case::new(
        "sample",
        "batch-invariance-truncated",
        batch_invariance_case,
    ));
    // A token 60 nats below the top is never drawn (probability ~1e-26 each). The noise
    // once rounded u to 1 for 1 token in 2^24, giving it +inf: with SmolLM2's vocabulary
    // that drew an absurd tail token in ~0.3% of draws, ~12 of these 4096.
    cases.push(Case::new("sample", "no-tail-draws/v49152", |gpu| {
        let (vocab, top) = (49152, 7);
        let mut row = vec![-60.0f32; vocab];
        row[top] = 0.0;
        let keys: Vec<SampleKey> = (0..4096).map(|s| SampleKey::new(3, 1, s, 20, 0)).collect();
        let got = draw(gpu, &row, vocab, 1.0, &keys);
        let tail = got.iter().filter(|&&t| t != top as u32).count();
        if tail > 0 {
            return Err(format!("{tail} of {} draws took a tail token", keys.len()));
        }
        Ok(exact())
    }));
    // One key draws the same token from a row alone and from that row as row 3 of 5.
    cases.push(Case::new("sample", "row-placement", |gpu| {
        let vocab = 2000;
        let logits = SplitMix64::new(11).vec(5 * vocab, 4.0);
        let row3 = &logits[3 * vocab..4 * vocab];
        for stream in 0..8 {
            let key = SampleKey::new(42, 7, stream, 300, 0);
            let alone = draw(gpu, row3, vocab, 1.0, &[key])[0];
            let in_five = draw(gpu, &logits, vocab, 1.0, &[SampleKey { row: 3, ..key }])[0];
            if alone != in_five {
                return Err(format!(
                    "stream {stream}: {alone} from the row alone, {in_five} from row 3 of 5"
                ));
            }
            if alone != reference::sample(row3, &RowParams::temperature(1.0), &key) {
                return Err(format!(
                    "stream {stream}: {alone} is not the reference's draw"
                ));
            }
        }
        Ok(exact())
    }));
    // G draws of a group read one row; they agree with the reference and differ.
    cases.push(Case::new("sample", "group-shares-row", |gpu| {
        let vocab = 1000;
        let logits = SplitMix64::new(12).vec(4 * vocab, 1.0);
        let keys: Vec<SampleKey> = (0..16).map(|s| SampleKey::new(5, 2, s, 40, 2)).collect();
        let got = draw(gpu, &logits, vocab, 1.0, &keys);
        let params = [RowParams::temperature(1.0); 4];
        if got != reference::sample_rows(&logits, vocab, &params, &keys) {
            return Err(format!("{got:?} is not the reference's draws"));
        }
        let distinct = got.iter().collect::<BTreeSet<_>>().len();
        if distinct < 4 {
            return Err(format!(
                "only {distinct} distinct tokens in 16 streams of one row"
            ));
        }
        Ok(exact())
    }));
    // The request index is part of the key: the same (seed, stream, position) under other
    // requests draws other tokens.
    cases.push(Case::new("sample", "request-changes-draw", |gpu| {
        let vocab = 1000;
        let logits = vec![0.0f32; vocab]; // uniform: the draw is the noise's argmax
        let keys: Vec<SampleKey> = (0..32)
            .flat_map(|p| (0..2).map(move |req| SampleKey::new(9, req, 0, p, 0)))
            .collect();
        let got = draw(gpu, &logits, vocab, 1.0, &keys);
        let params = [RowParams::temperature(1.0)];
        if got != reference::sample_rows(&logits, vocab, &params, &keys) {
            return Err("draws differ from the reference".into());
        }
        let same = got.chunks(2).filter(|pair| pair[0] == pair[1]).count();
        if same > 2 {
            return Err(format!(
                "requests 0 and 1 drew the same token at {same} of 32 positions"
            ));
        }
        Ok(exact())
    }));
    // A key naming a row past the logits draws u32::MAX; its log-probs are NaN.
    cases.push(Case::new("sample", "row-past-logits", |gpu| {
        let vocab = 300;
        let logits = SplitMix64::new(13).vec(2 * vocab, 1.0);
        let keys = [SampleKey::new(1, 0, 0, 0, 1), SampleKey::new(1, 0, 0, 0, 2)];
        let got = run(
            gpu,
            &logits,
            vocab,
            &[RowParams::new(1.0, 5, 0.9, 0.1); 2],
            &keys,
        );
        if got.tokens[1] != u32::MAX || got.tokens[0] == u32::MAX {
            return Err(format!("drew {:?}, want [a token, u32::MAX]", got.tokens));
        }
        if !got.logprobs[0].is_finite() || !got.logprobs[1].is_nan() {
            return Err(format!("log-probs {:?}, want [finite, NaN]", got.logprobs));
        }
        if !got.sampling[0].is_finite() || !got.sampling[1].is_nan() {
            return Err(format!(
                "sampling log-probs {:?}, want [finite, NaN]",
                got.sampling
            ));
        }
        Ok(exact())
    }));
    for (rows, vocab, m) in [(5, 1000, 12), (64, 49152, 64), (3, 257, 100)] {
        cases.push(Case::new(
            "sample",
            format!("draw-logprobs/rows{rows}_v{vocab}_m{m}"),
            move |gpu| logprobs_case(gpu, rows, vocab, m),
        ));
    }
    for vocab in [1000, 49152] {
        for temperature in [0.7, 1.3] {
            cases.push(Case::new(
                "sample",
                format!("truncate/v{vocab}_t{temperature}"),
                move |gpu| truncate_case(gpu, vocab, temperature),
            ));
        }
    }
    for (vocab, temperature, per_row) in [(1000, 1.0, 40), (1000, 0.7, 40), (49152, 1.0, 8)] {
        cases.push(Case::new(
            "sample",
            format!("draws/v{vocab}_t{temperature}"),
            move |gpu| draws_case(gpu, vocab, temperature, per_row),
        ));
    }
    for (what, params) in [
        ("t1", RowParams::temperature(1.0)),
        ("t0.7", RowParams::temperature(0.7)),
        ("top-k5", RowParams::new(1.0, 5, 1.0, 0.0)),
        ("top-p0.8", RowParams::new(1.0, 0, 0.8, 0.0)),
        ("min-p0.1", RowParams::new(1.0, 0, 1.0, 0.1)),
    ] {
        cases.push(Case::new(
            "sample",
            format!("chi-square/{what}"),
            move |gpu| chi_square_case(gpu, what, params),
        ));
    }
    cases
}
