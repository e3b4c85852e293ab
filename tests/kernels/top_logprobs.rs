//! The most likely alternatives per row: ids exactly the reference's (logit descending,
//! lowest index first on ties, -0 equal to +0), log-probs bitwise softmax's target
//! log-probs for the same rows and ids (and within softmax's tolerance of the f64
//! reference), unused entries `u32::MAX` and NaN; vocabularies around the workgroup and
//! SmolLM2's, n of 1, 5, 20 and the whole vocabulary; tied and masked rows; rows with
//! different counts (0 included) in one dispatch; and batch invariance, bitwise.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::Logits;
use sprout::gpu::kernels::reduction::Reduction;
use sprout::gpu::kernels::softmax::{self, Extra, RowStats};
use sprout::gpu::kernels::top_logprobs::{MAX_TOP_LOGPROBS, encode_with};
use sprout::reference::top_logprobs as reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32, read_u32};

/// Ids are exact and log-probs bitwise softmax's; against the f64 reference, softmax's own
/// tolerance (see tests/kernels/softmax.rs).
const TOLERANCE: f64 = 1e-10;

/// How a caller masks a token (as in tests/kernels/softmax.rs).
const MASKED: f32 = -1e30;

/// What the kernel wrote: `[rows, n_max]` ids and log-probs.
struct Top {
    ids: Vec<u32>,
    logprobs: Vec<f32>,
}

/// softmax's row stats, then top_logprobs, as the engine records them.
/// Checked the same with the logits in chunks of 2 rows.
fn run(gpu: &Gpu, logits: &[f32], vocab: usize, counts: &[u32], n_max: usize) -> Top {
    let reduction = Reduction::best(&gpu.caps);
    let [whole, chunked] = [None, Some(2)].map(|chunk_rows| {
        let logits = Logits::upload(gpu, logits, vocab, chunk_rows);
        run_with(gpu, &logits, (counts, n_max), reduction)
    });
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(chunked.ids, whole.ids, "ids in chunks of 2 rows vs whole");
    assert_eq!(
        bits(&chunked.logprobs),
        bits(&whole.logprobs),
        "log-probs in chunks of 2 rows vs whole"
    );
    whole
}

/// softmax's `target_logprobs` for every entry of `ids [rows, n_max]`: one pass per column
/// `j`, with targets `ids[r, j]` (NaN for `u32::MAX`, as the kernel's unused entries).
fn softmax_logprobs(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    ids: &[u32],
    n_max: usize,
) -> Vec<f32> {
    let rows = ids.len() / n_max.max(1);
    let l = Logits::upload(gpu, logits, vocab, None);
    let mut rec = gpu.recorder();
    let columns: Vec<_> = (0..n_max)
        .map(|j| {
            let targets: Vec<u32> = (0..rows).map(|r| ids[r * n_max + j]).collect();
            let (targets, out) = (gpu.upload(&targets), gpu.zeros(rows));
            let extra = Extra::TargetLogprobs {
                targets: &targets,
                logprobs: &out,
            };
            softmax::encode(gpu, &mut rec, &l, rows, &RowStats::zeros(gpu, rows), extra);
            out
        })
        .collect();
    rec.submit();
    let columns: Vec<Vec<f32>> = columns.iter().map(|t| read_f32(gpu, t)).collect();
    (0..rows * n_max)
        .map(|e| columns[e % n_max][e / n_max])
        .collect()
}

/// The kernel's output against the reference (ids exact), softmax (log-probs bitwise) and
/// the f64 reference (log-probs within [`TOLERANCE`]).
fn check(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    counts: &[u32],
    n_max: usize,
) -> Result<Outcome, String> {
    let got = run(gpu, logits, vocab, counts, n_max);
    let (want_ids, want_lp) = reference::top_logprobs(logits, vocab, counts, n_max);
    if let Some(e) = (0..want_ids.len()).find(|&e| got.ids[e] != want_ids[e]) {
        let r = e / n_max.max(1);
        return Err(format!(
            "row {r} (count {}): entry {} is token {} but the reference's is {} \
             (row {r}: {:?} vs {:?})",
            counts[r],
            e % n_max,
            got.ids[e],
            want_ids[e],
            &got.ids[r * n_max..(r + 1) * n_max],
            &want_ids[r * n_max..(r + 1) * n_max]
        ));
    }
    check_bitwise(
        "log-probs vs softmax target log-probs",
        &got.logprobs,
        &softmax_logprobs(gpu, logits, vocab, &got.ids, n_max),
    )?;
    // The unused entries are NaN (the comparison with softmax would pass with a NaN of any
    // payload on both sides only if softmax wrote the same one: say it outright).
    let (mut used, mut used_want) = (Vec::new(), Vec::new());
    for (e, &id) in want_ids.iter().enumerate() {
        if id == u32::MAX {
            if !got.logprobs[e].is_nan() {
                return Err(format!(
                    "unused entry {e}: log-prob {}, want NaN",
                    got.logprobs[e]
                ));
            }
        } else {
            used.push(got.logprobs[e]);
            used_want.push(want_lp[e]);
        }
    }
    if used.is_empty() {
        return Ok(Outcome {
            nmse: 0.0,
            tolerance: TOLERANCE,
        });
    }
    check_close(&used, &used_want, TOLERANCE).map_err(|e| format!("log-probs: {e}"))
}

/// The ids of row `r` as the kernel wrote them.
fn row_ids(top: &Top, r: usize, n_max: usize) -> &[u32] {
    &top.ids[r * n_max..(r + 1) * n_max]
}

/// The picks and log-probs of rows `0..counts.len()` with the given reductions.
fn run_with(
    gpu: &Gpu,
    logits: &Logits,
    (counts, n_max): (&[u32], usize),
    reduction: Reduction,
) -> Top {
    let rows = counts.len();
    let c = gpu.upload(counts);
    let stats = RowStats::zeros(gpu, rows);
    let (ids, logprobs) = (gpu.zeros(rows * n_max), gpu.zeros(rows * n_max));
    let mut rec = gpu.recorder();
    softmax::encode(gpu, &mut rec, logits, rows, &stats, Extra::Nothing);
    let inputs = (logits, &stats, &c);
    encode_with(
        gpu,
        &mut rec,
        inputs,
        (rows, n_max),
        (&ids, &logprobs),
        reduction,
    );
    rec.submit();
    Top {
        ids: read_u32(gpu, &ids),
        logprobs: read_f32(gpu, &logprobs),
    }
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // The butterfly's last levels pick what the tree's pick, bit for bit, on rows with
    // many ties (a coarse grid), at SmolLM2's vocabulary and around the workgroup.
    for vocab in [257usize, 49152] {
        let case = Case::new(
            "top_logprobs",
            format!("butterfly-is-the-tree/v{vocab}_n20"),
            move |gpu| {
                let (rows, n) = (4, MAX_TOP_LOGPROBS);
                let mut logits = SplitMix64::new(vocab as u64 + 5).vec(rows * vocab, 6.0);
                logits.iter_mut().for_each(|v| *v = v.round());
                let (counts, l) = (
                    vec![n as u32; rows],
                    Logits::upload(gpu, &logits, vocab, None),
                );
                let butterfly = Reduction::best(&gpu.caps);
                let got = run_with(gpu, &l, (&counts, n), butterfly);
                let tree = run_with(gpu, &l, (&counts, n), Reduction::Tree);
                let what = format!("{butterfly:?} vs the tree");
                let ids = |v: &[u32]| v.iter().map(|&i| i as f32).collect::<Vec<_>>();
                check_bitwise(&format!("{what}: ids"), &ids(&got.ids), &ids(&tree.ids))?;
                check_bitwise(&format!("{what}: log-probs"), &got.logprobs, &tree.logprobs)?;
                Ok(Outcome {
                    nmse: 0.0,
                    tolerance: 0.0,
                })
            },
        );
        cases.push(case.needing("subgroups of 4 or more", |gpu| {
            Reduction::best(&gpu.caps).needs_subgroups()
        }));
    }
    // Around the workgroup, a typical size and SmolLM2's; n past the vocabulary included.
    for vocab in [1usize, 7, 255, 256, 257, 1000, 49152] {
        let mut ns = vec![1, 5, MAX_TOP_LOGPROBS];
        if vocab < MAX_TOP_LOGPROBS && !ns.contains(&vocab) {
            ns.push(vocab);
        }
        for n in ns {
            cases.push(Case::new(
                "top_logprobs",
                format!("v{vocab}_n{n}"),
                move |gpu| {
                    let rows = 3;
                    let logits = SplitMix64::new((vocab * 31 + n) as u64).vec(rows * vocab, 10.0);
                    check(gpu, &logits, vocab, &vec![n as u32; rows], n)
                },
            ));
        }
    }
    // Ties: equal logits come out by index, across invocations and within one; -0 equals
    // +0; quantized rows are ties all the way down.
    cases.push(Case::new("top_logprobs", "ties/v1000_n20", |gpu| {
        let (vocab, n) = (1000, MAX_TOP_LOGPROBS);
        let mut rng = SplitMix64::new(21);
        let mut logits = rng.vec(6 * vocab, 5.0);
        // Row 0: the max at 999, 513, 300, 44 and 256 (44, 300 and 556 share invocation 44;
        // 256 is invocation 0's second token), then 700 and 7 below it.
        for c in [999, 513, 300, 44, 256] {
            logits[c] = 8.0;
        }
        logits[700] = 7.5;
        logits[7] = 7.5;
        // Row 1: all equal.
        logits[vocab..2 * vocab].fill(1.5);
        // Row 2: zeros of both signs.
        for c in 0..vocab {
            logits[2 * vocab + c] = if c % 3 == 1 { -0.0 } else { 0.0 };
        }
        // Rows 3 and 4: quarters in [-4, 4]: about 30 tokens per value.
        for v in &mut logits[3 * vocab..5 * vocab] {
            *v = (rng.uniform(4.0) * 4.0).round() / 4.0;
        }
        // Row 5: the max value tied at two tokens, the rest random.
        logits[5 * vocab + 900] = 20.0;
        logits[5 * vocab + 100] = 20.0;
        let counts = vec![n as u32; 6];
        let got = run(gpu, &logits, vocab, &counts, n);
        let first: Vec<u32> = (0..n as u32).collect();
        for (r, want) in [
            (0, &[44, 256, 300, 513, 999, 7, 700][..]),
            (1, &first[..]),
            (2, &first[..]),
            (5, &[100, 900][..]),
        ] {
            if &row_ids(&got, r, n)[..want.len()] != want {
                return Err(format!(
                    "row {r}: {:?}, want {want:?} first",
                    row_ids(&got, r, n)
                ));
            }
        }
        check(gpu, &logits, vocab, &counts, n)
    }));
    cases.push(Case::new("top_logprobs", "ties/v49152_n20", |gpu| {
        let (vocab, n) = (49152, MAX_TOP_LOGPROBS);
        let mut rng = SplitMix64::new(22);
        let logits: Vec<f32> = (0..2 * vocab)
            .map(|_| (rng.uniform(4.0) * 4.0).round() / 4.0)
            .collect();
        check(gpu, &logits, vocab, &[n as u32; 2], n)
    }));
    // Masked logits come after every unmasked one, by index among themselves; their
    // log-probs are the (finite) masked logit minus lse.
    cases.push(Case::new("top_logprobs", "masked/v1000_n20", |gpu| {
        let (vocab, n) = (1000, MAX_TOP_LOGPROBS);
        let mut logits = SplitMix64::new(23).vec(2 * vocab, 3.0);
        logits[..vocab].fill(MASKED);
        for c in [5, 600, 999] {
            logits[c] = -2.0 - c as f32 / 1000.0;
        }
        let mut rng = SplitMix64::new(24);
        for v in &mut logits[vocab..] {
            if rng.below(2) == 0 {
                *v = MASKED;
            }
        }
        let got = run(gpu, &logits, vocab, &[n as u32; 2], n);
        let want = [5, 600, 999, 0, 1, 2, 3, 4, 6];
        if row_ids(&got, 0, n)[..want.len()] != want {
            return Err(format!(
                "row 0: {:?}, want {want:?} first",
                row_ids(&got, 0, n)
            ));
        }
        check(gpu, &logits, vocab, &[n as u32; 2], n)
    }));
    // Rows with different counts in one dispatch: 0 gives only unused entries; a count past
    // n_max is taken as n_max; narrower n_max lays the rows out closer.
    for n_max in [MAX_TOP_LOGPROBS, 5] {
        cases.push(Case::new(
            "top_logprobs",
            format!("mixed-counts/v1000_nmax{n_max}"),
            move |gpu| {
                let vocab = 1000;
                let counts: Vec<u32> = [0, 1, 20, 5, 0, 19, 3, 20, 2, u32::MAX]
                    .iter()
                    .map(|&c| {
                        if c == u32::MAX {
                            c
                        } else {
                            c.min(n_max as u32)
                        }
                    })
                    .collect();
                let logits = SplitMix64::new(25).vec(counts.len() * vocab, 6.0);
                let got = run(gpu, &logits, vocab, &counts, n_max);
                for r in [0, 4] {
                    let row = row_ids(&got, r, n_max);
                    let lps = &got.logprobs[r * n_max..(r + 1) * n_max];
                    if row.iter().any(|&id| id != u32::MAX) || lps.iter().any(|v| !v.is_nan()) {
                        return Err(format!("row {r} (count 0): ids {row:?}, log-probs {lps:?}"));
                    }
                }
                check(gpu, &logits, vocab, &counts, n_max)
            },
        ));
    }
    cases.push(Case::new("top_logprobs", "no-rows", |gpu| {
        let got = run(gpu, &[1.0; 10], 10, &[], MAX_TOP_LOGPROBS);
        if !got.ids.is_empty() {
            return Err(format!("{} ids for no rows", got.ids.len()));
        }
        check(gpu, &SplitMix64::new(26).vec(30, 2.0), 10, &[0, 0, 0], 0)
    }));
    // A row's entries are bitwise the same alone, in a batch of 16 and as row 3 of 5 among
    // other rows with other counts.
    cases.push(Case::new("top_logprobs", "batch-invariance/v3000", |gpu| {
        let (vocab, n_max) = (3000, MAX_TOP_LOGPROBS);
        let mut rng = SplitMix64::new(27);
        let logits = rng.vec(16 * vocab, 8.0);
        let counts: Vec<u32> = (0..16).map(|r| [20, 7, 1, 13][r % 4]).collect();
        let batch = run(gpu, &logits, vocab, &counts, n_max);
        for r in [0usize, 5, 11, 15] {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let alone = run(gpu, row, vocab, &[counts[r]], n_max);
            let mut five = rng.vec(5 * vocab, 8.0);
            five[3 * vocab..4 * vocab].copy_from_slice(row);
            let five_counts = [3, 20, 0, counts[r], 9];
            let among = run(gpu, &five, vocab, &five_counts, n_max);
            let entries = r * n_max..(r + 1) * n_max;
            for (what, other, i) in [("alone", &alone, 0), ("as row 3 of 5", &among, 3)] {
                let theirs = i * n_max..(i + 1) * n_max;
                if other.ids[theirs.clone()] != batch.ids[entries.clone()] {
                    return Err(format!(
                        "row {r}: ids {:?} in a batch of 16, {:?} {what}",
                        &batch.ids[entries.clone()],
                        &other.ids[theirs]
                    ));
                }
                check_bitwise(
                    &format!("row {r}: log-probs in a batch of 16 vs {what}"),
                    &batch.logprobs[entries.clone()],
                    &other.logprobs[theirs],
                )?;
            }
        }
        check(gpu, &logits, vocab, &counts, n_max)
    }));
    cases
}
