//! Log-softmax statistics: vocabularies of SmolLM2 (49152), GPT-2 (50257) and awkward
//! sizes; each of the three entry points against the reference and against each other
//! (one lse, bit for bit); ties (lowest index wins), masked logits, peaked rows, targets past
//! the vocabulary, and batch invariance. Where the adapter has subgroups the reductions end
//! in a subgroup butterfly: bitwise the tree's, on every shape.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::Logits;
use sprout::gpu::kernels::reduction::Reduction;
use sprout::gpu::kernels::softmax::{Extra, RowStats, encode, encode_with};
use sprout::reference::softmax as reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32, read_u32};

/// lse is a max plus the log of an f32 sum of exps (each within a few ulp, WGSL allows a
/// few more for exp of large arguments), about 1e-6 off in absolute terms on values of
/// 1 to 100: an NMSE near 1e-14, for lse and for log-probs alike. 1e-10 leaves room, yet
/// a missing max shift, a natural-vs-base-2 log or a dropped term fails by far.
const TOLERANCE: f64 = 1e-10;

/// (m, vocab): SmolLM2, GPT-2, and sizes around and below the workgroup.
/// How a caller masks a token: a large finite negative logit. (Not -inf: WGSL lets an
/// implementation assume that no value is infinite, and llvmpipe does.)
const MASKED: f32 = -1e30;

const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (3, 7),
    (8, 255),
    (5, 257),
    (2, 1000),
    (4, 49152),
    (3, 50257),
];

/// Everything the GPU computed for one batch of logits.
struct Results {
    argmax: Vec<u32>,
    max: Vec<f32>,
    lse: Vec<f32>,
    log_softmax: Vec<f32>,
    target_logprobs: Vec<f32>,
    /// lse as written by the log_softmax and target_logprobs passes.
    other_lse: [Vec<f32>; 2],
}

/// The logits in chunks of `chunk_rows` rows (`None`: as the adapter's binding allows).
fn run(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    targets: &[u32],
    chunk_rows: Option<usize>,
) -> Results {
    let m = targets.len();
    let logits_t = Logits::upload(gpu, logits, vocab, chunk_rows);
    let targets_t = gpu.upload(targets);
    let stats: [RowStats; 3] = std::array::from_fn(|_| RowStats::zeros(gpu, m));
    let full = Logits::zeros_chunked(gpu, m, vocab, logits_t.chunk_rows);
    let logprobs = gpu.zeros(m);
    let mut rec = gpu.recorder();
    encode(gpu, &mut rec, &logits_t, m, &stats[0], Extra::Nothing);
    encode(
        gpu,
        &mut rec,
        &logits_t,
        m,
        &stats[1],
        Extra::LogSoftmax(&full),
    );
    let extra = Extra::TargetLogprobs {
        targets: &targets_t,
        logprobs: &logprobs,
    };
    encode(gpu, &mut rec, &logits_t, m, &stats[2], extra);
    rec.submit();
    let lse = |s: &RowStats| {
        read_f32(gpu, &s.stats)
            .chunks(2)
            .map(|p| p[1])
            .collect::<Vec<_>>()
    };
    Results {
        argmax: read_u32(gpu, &stats[0].argmax),
        max: read_f32(gpu, &stats[0].stats)
            .chunks(2)
            .map(|p| p[0])
            .collect(),
        lse: lse(&stats[0]),
        log_softmax: pollster::block_on(full.read(gpu, m)).expect("read-back"),
        target_logprobs: read_f32(gpu, &logprobs),
        other_lse: [lse(&stats[1]), lse(&stats[2])],
    }
}

/// Checks every output against the reference, the entry points against each other, and
/// the logits in chunks of 2 rows against them whole.
fn check(gpu: &Gpu, logits: &[f32], vocab: usize, targets: &[u32]) -> Result<Outcome, String> {
    let r = run(gpu, logits, vocab, targets, None);
    let c = run(gpu, logits, vocab, targets, Some(2));
    if c.argmax != r.argmax {
        return Err("argmax in chunks of 2 rows vs whole".into());
    }
    for (what, chunked, whole) in [
        ("max logit", &c.max, &r.max),
        ("lse", &c.lse, &r.lse),
        ("log_softmax", &c.log_softmax, &r.log_softmax),
        ("target_logprobs", &c.target_logprobs, &r.target_logprobs),
    ] {
        check_bitwise(
            &format!("{what} in chunks of 2 rows vs whole"),
            chunked,
            whole,
        )?;
    }
    let want = reference::row_stats(logits, vocab);
    let want_argmax: Vec<u32> = want.iter().map(|s| s.argmax).collect();
    if r.argmax != want_argmax {
        let i = r
            .argmax
            .iter()
            .zip(&want_argmax)
            .position(|(a, b)| a != b)
            .unwrap();
        return Err(format!(
            "row {i}: argmax {} vs {}",
            r.argmax[i], want_argmax[i]
        ));
    }
    let want_max: Vec<f32> = want.iter().map(|s| s.max).collect();
    check_bitwise("max logit", &r.max, &want_max)?;
    check_bitwise("lse of log_softmax vs row_stats", &r.other_lse[0], &r.lse)?;
    check_bitwise(
        "lse of target_logprobs vs row_stats",
        &r.other_lse[1],
        &r.lse,
    )?;
    let from_full: Vec<f32> = targets
        .iter()
        .enumerate()
        .map(|(i, &t)| r.log_softmax[i * vocab + t as usize])
        .collect();
    check_bitwise(
        "target log-probs vs the full log-softmax",
        &r.target_logprobs,
        &from_full,
    )?;
    let want_lse: Vec<f32> = want.iter().map(|s| s.lse as f32).collect();
    let mut worst = check_close(&r.lse, &want_lse, TOLERANCE).map_err(|e| format!("lse: {e}"))?;
    for (what, got, want) in [
        (
            "log_softmax",
            &r.log_softmax,
            reference::log_softmax(logits, vocab),
        ),
        (
            "target_logprobs",
            &r.target_logprobs,
            reference::target_logprobs(logits, vocab, targets),
        ),
    ] {
        let o = check_close(got, &want, TOLERANCE).map_err(|e| format!("{what}: {e}"))?;
        worst.nmse = worst.nmse.max(o.nmse);
    }
    Ok(worst)
}

fn random(m: usize, vocab: usize, scale: f32, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let mut rng = SplitMix64::new(seed);
    let logits = rng.vec(m * vocab, scale);
    let targets = (0..m).map(|_| rng.below(vocab as u64) as u32).collect();
    (logits, targets)
}

/// argmax, max and lse of `logits` with the given reductions.
fn row_stats(gpu: &Gpu, logits: &[f32], vocab: usize, reduction: Reduction) -> Vec<f32> {
    let m = logits.len() / vocab;
    let l = Logits::upload(gpu, logits, vocab, None);
    let stats = RowStats::zeros(gpu, m);
    let mut rec = gpu.recorder();
    encode_with(gpu, &mut rec, (&l, m), &stats, Extra::Nothing, reduction);
    rec.submit();
    let argmax = read_u32(gpu, &stats.argmax).into_iter().map(|i| i as f32);
    argmax.chain(read_f32(gpu, &stats.stats)).collect()
}

fn has_butterfly(gpu: &Gpu) -> bool {
    Reduction::best(&gpu.caps).needs_subgroups()
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // The butterfly's last levels against the tree's, bit for bit, with many ties.
    for &(m, vocab) in &SHAPES[1..] {
        let case = Case::new(
            "softmax",
            format!("butterfly-is-the-tree/m{m}_vocab{vocab}"),
            move |gpu| {
                let (mut logits, _) = random(m, vocab, 10.0, (m * 31 + vocab) as u64);
                // Rounded to a coarse grid: equal maxima in many invocations.
                logits
                    .iter_mut()
                    .for_each(|v| *v = (*v * 2.0).round() / 2.0);
                let butterfly = Reduction::best(&gpu.caps);
                let got = row_stats(gpu, &logits, vocab, butterfly);
                let tree = row_stats(gpu, &logits, vocab, Reduction::Tree);
                check_bitwise(&format!("{butterfly:?} vs the tree"), &got, &tree)?;
                Ok(Outcome {
                    nmse: 0.0,
                    tolerance: TOLERANCE,
                })
            },
        );
        cases.push(case.needing("subgroups of 4 or more", has_butterfly));
    }
    for &(m, vocab) in SHAPES {
        cases.push(Case::new(
            "softmax",
            format!("m{m}_vocab{vocab}"),
            move |gpu| {
                let (logits, targets) = random(m, vocab, 10.0, (m * 100_003 + vocab) as u64);
                check(gpu, &logits, vocab, &targets)
            },
        ));
    }
    // Peaked rows far from zero: one logit dominates, and all sit near 100.
    cases.push(Case::new("softmax", "peaked/m4_vocab49152", |gpu| {
        let vocab = 49152;
        let (mut logits, mut targets) = random(4, vocab, 3.0, 7);
        for (r, row) in logits.chunks_mut(vocab).enumerate() {
            row.iter_mut().for_each(|v| *v += 100.0);
            row[r * 9001 + 17] += 40.0;
        }
        targets[0] = 17; // the dominant token: log-prob near 0
        check(gpu, &logits, vocab, &targets)
    }));
    // Ties: the lowest index wins, even when a later invocation's stride reaches it first.
    cases.push(Case::new("softmax", "ties/m4_vocab1000", |gpu| {
        let vocab = 1000;
        let (mut logits, targets) = random(4, vocab, 5.0, 9);
        for &c in &[300, 513, 999] {
            logits[c] = 8.0; // row 0: 300 (invocation 44) before 513 (invocation 1)
        }
        for &c in &[256, 0] {
            logits[vocab + c] = 9.0; // row 1: index 0 wins over 256 (same invocation)
        }
        logits[2 * vocab..3 * vocab].fill(1.5); // row 2: all equal, index 0
        let r = run(gpu, &logits, vocab, &targets, None);
        if r.argmax[..3] != [300, 0, 0] {
            return Err(format!(
                "argmax of tied rows {:?}, want [300, 0, 0]",
                &r.argmax[..3]
            ));
        }
        check(gpu, &logits, vocab, &targets)
    }));
    // Masked logits add nothing; the first logit of a row may be one of them, and a row may
    // hold a single unmasked one.
    cases.push(Case::new("softmax", "masked/m3_vocab1000", |gpu| {
        let vocab = 1000;
        let (mut logits, mut targets) = random(3, vocab, 10.0, 11);
        let mut rng = SplitMix64::new(12);
        for v in logits.iter_mut() {
            if rng.below(3) == 0 {
                *v = MASKED;
            }
        }
        logits[0] = MASKED;
        logits[vocab..2 * vocab - 1].fill(MASKED);
        logits[2 * vocab - 1] = -3.0;
        targets[1] = vocab as u32 - 1;
        let r = run(gpu, &logits, vocab, &targets, None);
        if r.target_logprobs[1] != 0.0 || r.argmax[1] != vocab as u32 - 1 {
            return Err(format!(
                "row 1: argmax {}, log-prob {}",
                r.argmax[1], r.target_logprobs[1]
            ));
        }
        // The NMSE over all log-probs is dominated by the masked ones: check the others.
        let want = reference::log_softmax(&logits, vocab);
        let unmasked = |v: &[f32]| {
            v.iter()
                .zip(&logits)
                .filter(|(_, l)| **l != MASKED)
                .map(|(v, _)| *v)
                .collect::<Vec<_>>()
        };
        let o = check_close(&unmasked(&r.log_softmax), &unmasked(&want), TOLERANCE)
            .map_err(|e| format!("unmasked: {e}"))?;
        let all = check(gpu, &logits, vocab, &targets)?;
        Ok(Outcome {
            nmse: o.nmse.max(all.nmse),
            tolerance: TOLERANCE,
        })
    }));
    // A target past the vocabulary gives NaN, and only in its row.
    cases.push(Case::new("softmax", "invalid-target", |gpu| {
        let vocab = 300;
        let (logits, mut targets) = random(3, vocab, 4.0, 13);
        targets[1] = vocab as u32;
        let r = run(gpu, &logits, vocab, &targets, None);
        if !r.target_logprobs[1].is_nan() {
            return Err(format!(
                "target {vocab} of {vocab}: {}, want NaN",
                r.target_logprobs[1]
            ));
        }
        let want = reference::target_logprobs(&logits, vocab, &targets);
        check_close(
            &[r.target_logprobs[0], r.target_logprobs[2]],
            &[want[0], want[2]],
            TOLERANCE,
        )
    }));
    // A row's results are bitwise the same alone and among 64.
    cases.push(Case::new(
        "softmax",
        "batch-invariance/m64_vocab1000",
        |gpu| {
            let (m, vocab) = (64, 1000);
            let (logits, targets) = random(m, vocab, 10.0, 15);
            let batch = run(gpu, &logits, vocab, &targets, None);
            for (i, rows) in [(0usize, 1usize), (37, 1), (63, 1), (20, 13)] {
                let alone = run(
                    gpu,
                    &logits[i * vocab..(i + rows) * vocab],
                    vocab,
                    &targets[i..i + rows],
                    None,
                );
                let what = |s: &str| format!("{s} of rows {i}..{}", i + rows);
                if alone.argmax != batch.argmax[i..i + rows] {
                    return Err(what("argmax"));
                }
                check_bitwise(&what("lse"), &alone.lse, &batch.lse[i..i + rows])?;
                check_bitwise(
                    &what("log-softmax"),
                    &alone.log_softmax,
                    &batch.log_softmax[i * vocab..(i + rows) * vocab],
                )?;
                check_bitwise(
                    &what("target log-probs"),
                    &alone.target_logprobs,
                    &batch.target_logprobs[i..i + rows],
                )?;
            }
            check(gpu, &logits, vocab, &targets)
        },
    ));
    cases
}
