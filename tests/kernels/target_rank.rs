//! Ranks of given tokens: both shapes, the logits whole and in chunks of 1 and 2 rows,
//! exactly the reference's count and the token's place in `top_logprobs`' order (its
//! reference's sort); vocabularies around the workgroup and SmolLM2's, targets at each
//! row's maximum and minimum, several per row and rows out of order; ties (equal logits,
//! -0 and +0, quantized rows, masked rows); entries past the rows or the vocabulary.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::Logits;
use sprout::gpu::kernels::target_rank::{TargetRankShape, TargetRanks, encode_with};
use sprout::reference::target_rank as reference;
use sprout::reference::top_logprobs::top_ids;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, read_u32};

/// What the ranks buffer holds before the kernel runs: an entry left unwritten shows.
const UNWRITTEN: u32 = 0xdead_beef;

/// How a caller masks a token (as in tests/kernels/softmax.rs).
const MASKED: f32 = -1e30;

fn run(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    targets: &[[u32; 2]],
    shape: TargetRankShape,
    chunk_rows: Option<usize>,
) -> Vec<u32> {
    let rows = logits.len() / vocab;
    let l = Logits::upload(gpu, logits, vocab, chunk_rows);
    let t = gpu.upload(targets.as_flattened());
    let ranks = gpu.upload(&vec![UNWRITTEN; targets.len().max(1)]);
    let mut rec = gpu.recorder();
    let op = TargetRanks {
        logits: &l,
        rows,
        targets: &t,
        n: targets.len(),
        ranks: &ranks,
    };
    encode_with(gpu, &mut rec, &op, shape);
    rec.submit();
    let mut got = read_u32(gpu, &ranks);
    got.truncate(targets.len());
    got
}

/// Every shape with the logits whole and in chunks of 1 and 2 rows gives exactly the
/// reference's ranks, and each ranked token sits at `rank - 1` in the order `top_logprobs`
/// picks in.
fn check(gpu: &Gpu, logits: &[f32], vocab: usize, targets: &[[u32; 2]]) -> Result<Outcome, String> {
    let want = reference::target_ranks(logits, vocab, targets);
    for shape in TargetRankShape::ALL {
        for chunk_rows in [None, Some(1), Some(2)] {
            let got = run(gpu, logits, vocab, targets, shape, chunk_rows);
            if let Some(e) = (0..want.len()).find(|&e| got[e] != want[e]) {
                return Err(format!(
                    "{shape:?}, chunks of {chunk_rows:?} rows: entry {e} {:?} has rank {}, \
                     the reference's is {}",
                    targets[e], got[e], want[e]
                ));
            }
        }
    }
    let rows = logits.len() / vocab;
    let mut sorted: Vec<Option<Vec<u32>>> = vec![None; rows];
    for (&[row, token], &rank) in targets.iter().zip(&want) {
        if rank == 0 {
            continue;
        }
        let r = row as usize;
        let order = sorted[r].get_or_insert_with(|| top_ids(&logits[r * vocab..][..vocab], vocab));
        if order[rank as usize - 1] != token {
            return Err(format!(
                "row {row}: token {token} has rank {rank}, but top_logprobs' order has \
                 token {} there",
                order[rank as usize - 1]
            ));
        }
    }
    Ok(Outcome::exact())
}

/// Per row: its maximum and minimum, then `extra` random tokens; the rows in reverse order
/// (entries need not follow their rows).
fn targets_of(logits: &[f32], vocab: usize, extra: usize, rng: &mut SplitMix64) -> Vec<[u32; 2]> {
    let rows = logits.len() / vocab;
    let mut out = Vec::new();
    for r in (0..rows).rev() {
        let row = &logits[r * vocab..][..vocab];
        let ids = top_ids(row, vocab);
        out.push([r as u32, ids[0]]);
        out.push([r as u32, ids[vocab - 1]]);
        for _ in 0..extra {
            out.push([r as u32, rng.below(vocab as u64) as u32]);
        }
    }
    out
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // Around the workgroups (64, 256) and SmolLM2's vocabulary, in 5 rows (chunks of 2
    // leave a last chunk of one row).
    for vocab in [1usize, 7, 257, 1000, 49152] {
        cases.push(Case::new("target_rank", format!("v{vocab}"), move |gpu| {
            let mut rng = SplitMix64::new(vocab as u64 * 7 + 1);
            let logits = rng.vec(5 * vocab, 10.0);
            let targets = targets_of(&logits, vocab, 3, &mut rng);
            check(gpu, &logits, vocab, &targets)
        }));
    }
    // Ties: equal logits rank by index, across invocations and within one; -0 equals +0;
    // quantized rows are ties all the way down; masked tokens come last, by index.
    cases.push(Case::new("target_rank", "ties/v1000", |gpu| {
        let vocab = 1000;
        let mut rng = SplitMix64::new(31);
        let mut logits = rng.vec(5 * vocab, 5.0);
        // Row 0: the max at 999, 513, 300, 44 and 256 (44, 300 and 556 share an
        // invocation of the per-workgroup shape; 256 is invocation 0's second token).
        for c in [999, 513, 300, 44, 256] {
            logits[c] = 8.0;
        }
        // Row 1: all equal. Row 2: zeros of both signs.
        logits[vocab..2 * vocab].fill(1.5);
        for c in 0..vocab {
            logits[2 * vocab + c] = if c % 3 == 1 { -0.0 } else { 0.0 };
        }
        // Row 3: quarters in [-4, 4]: about 30 tokens per value.
        for v in &mut logits[3 * vocab..4 * vocab] {
            *v = (rng.uniform(4.0) * 4.0).round() / 4.0;
        }
        // Row 4: half masked.
        for v in &mut logits[4 * vocab..] {
            if rng.below(2) == 0 {
                *v = MASKED;
            }
        }
        let mut targets = vec![[0, 44], [0, 256], [0, 999], [1, 0], [1, 517], [1, 999]];
        targets.extend([[2, 0], [2, 1], [2, 2], [2, 4], [2, 998]]);
        targets.extend(
            targets_of(&logits[3 * vocab..], vocab, 20, &mut rng)
                .iter()
                .map(|&[_, t]| [3, t]),
        );
        let masked: Vec<u32> = (0..vocab as u32)
            .filter(|&c| logits[4 * vocab + c as usize] == MASKED)
            .collect();
        targets.extend([
            [4, masked[0]],
            [4, masked[masked.len() / 2]],
            [4, *masked.last().unwrap()],
        ]);
        let got = run(
            gpu,
            &logits,
            vocab,
            &targets[..5],
            TargetRankShape::EntryPerWorkgroup,
            None,
        );
        if got != [1, 2, 5, 1, 518] {
            return Err(format!(
                "ranks of tied tokens {got:?}, want [1, 2, 5, 1, 518]"
            ));
        }
        check(gpu, &logits, vocab, &targets)
    }));
    cases.push(Case::new("target_rank", "ties/v49152", |gpu| {
        let vocab = 49152;
        let mut rng = SplitMix64::new(32);
        let logits: Vec<f32> = (0..3 * vocab)
            .map(|_| (rng.uniform(4.0) * 4.0).round() / 4.0)
            .collect();
        let targets = targets_of(&logits, vocab, 4, &mut rng);
        check(gpu, &logits, vocab, &targets)
    }));
    // An entry past the rows or the vocabulary gets 0, among good ones; with no rows at
    // all, every entry does.
    cases.push(Case::new("target_rank", "out-of-range", |gpu| {
        let vocab = 300;
        let logits = SplitMix64::new(33).vec(3 * vocab, 4.0);
        let targets = [
            [1, 5],
            [3, 5],
            [0, 300],
            [2, 299],
            [u32::MAX, 0],
            [0, u32::MAX],
        ];
        for shape in TargetRankShape::ALL {
            let got = run(gpu, &logits, vocab, &targets, shape, Some(2));
            if [got[1], got[2], got[4], got[5]] != [0; 4] || got[0] == 0 || got[3] == 0 {
                return Err(format!(
                    "{shape:?}: {got:?}, want 0 at entries 1, 2, 4, 5 only"
                ));
            }
            let none = run(gpu, &[], vocab, &targets[..2], shape, None);
            if none != [0, 0] {
                return Err(format!("{shape:?} with no rows: {none:?}, want [0, 0]"));
            }
        }
        check(gpu, &logits, vocab, &targets)
    }));
    cases
}
