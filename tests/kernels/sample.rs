//! Sampling on the GPU: greedy draws take the argmax, sampled draws take exactly the token
//! the reference's hash and Gumbel-max give, from the logits row each key names (several
//! draws may share one); a draw is the same alone, in a batch of 64, and wherever its row
//! sits in the logits buffer; the request index changes the noise; and the drawn tokens'
//! log-probs equal softmax's target log-probs bit for bit.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::sample::{SampleKey, encode, encode_draw_logprobs};
use sprout::gpu::kernels::softmax::{self, Extra, RowStats};
use sprout::reference::sample as reference;

use crate::common::{Case, Outcome, Rng, check_bitwise, check_close, read_f32, read_u32};

/// Draws are exact (the same token as the reference); log-probs are compared bitwise with
/// softmax's, and with the f64 reference within softmax's own tolerance.
const LOGPROB_TOLERANCE: f64 = 1e-10;

fn exact() -> Outcome {
    Outcome {
        nmse: 0.0,
        tolerance: 0.0,
    }
}

fn draw(gpu: &Gpu, logits: &[f32], vocab: usize, keys: &[SampleKey]) -> Vec<u32> {
    let m = keys.len();
    let (l, k, out) = (gpu.upload(logits), gpu.upload(keys), gpu.zeros(m));
    let mut enc = gpu.encoder();
    encode(gpu, &mut enc, &l, vocab, &k, m, &out);
    gpu.submit(enc);
    read_u32(gpu, &out)
}

/// `m` keys over `rows` logits rows: draw `d` reads row `d % rows`, with mixed seeds,
/// requests and streams.
fn keys(m: usize, rows: usize, temperature: f32) -> Vec<SampleKey> {
    (0..m)
        .map(|d| {
            SampleKey::new(
                0x1234_5678_9abc_def0 + d as u64 % 3,
                d as u32 % 2,
                d as u32 % 5,
                100 + d as u32,
                temperature,
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
    let logits = Rng::new(vocab as u64).vec(rows * vocab, 4.0);
    let keys = keys(m, rows, temperature);
    let got = draw(gpu, &logits, vocab, &keys);
    let want = reference::sample_rows(&logits, vocab, &keys);
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
    let distinct = got.iter().collect::<std::collections::BTreeSet<_>>().len();
    if temperature >= 1.0 && distinct < 4 {
        return Err(format!("only {distinct} distinct tokens in {m} draws"));
    }
    Ok(exact())
}

/// Tokens drawn, their log-probs by `encode_draw_logprobs`, and softmax's target log-probs
/// for the same rows and tokens (each draw's row copied to its own row of a second buffer).
fn logprobs_case(gpu: &Gpu, rows: usize, vocab: usize, m: usize) -> Result<Outcome, String> {
    let logits = Rng::new(77).vec(rows * vocab, 6.0);
    let mut keys = keys(m, rows, 1.0);
    keys.reverse(); // rows in another order than the buffer's
    let (l, k) = (gpu.upload(&logits), gpu.upload(&keys));
    let (tokens, logprobs, stats) = (gpu.zeros(m), gpu.zeros(m), RowStats::zeros(gpu, rows));
    let mut enc = gpu.encoder();
    encode(gpu, &mut enc, &l, vocab, &k, m, &tokens);
    softmax::encode(gpu, &mut enc, &l, rows, vocab, &stats, Extra::Nothing);
    encode_draw_logprobs(gpu, &mut enc, &l, vocab, &stats, &k, &tokens, m, &logprobs);
    gpu.submit(enc);
    let drawn = read_u32(gpu, &tokens);
    let got = read_f32(gpu, &logprobs);

    let per_draw: Vec<f32> = keys
        .iter()
        .flat_map(|key| &logits[key.row as usize * vocab..(key.row as usize + 1) * vocab])
        .copied()
        .collect();
    let (pl, targets, target_lp) = (gpu.upload(&per_draw), gpu.upload(&drawn), gpu.zeros(m));
    let mut enc = gpu.encoder();
    let extra = Extra::TargetLogprobs {
        targets: &targets,
        logprobs: &target_lp,
    };
    softmax::encode(
        gpu,
        &mut enc,
        &pl,
        m,
        vocab,
        &RowStats::zeros(gpu, m),
        extra,
    );
    gpu.submit(enc);
    check_bitwise(
        "draw log-probs vs softmax target log-probs",
        &got,
        &read_f32(gpu, &target_lp),
    )?;
    check_close(
        &got,
        &reference::draw_logprobs(&logits, vocab, &keys, &drawn),
        LOGPROB_TOLERANCE,
    )
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
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
        let logits = Rng::new(9).vec(m * vocab, 4.0);
        let keys = keys(m, m, 1.0);
        let batch = draw(gpu, &logits, vocab, &keys);
        for r in [0, 17, 63] {
            let alone_key = SampleKey { row: 0, ..keys[r] };
            let alone = draw(
                gpu,
                &logits[r * vocab..(r + 1) * vocab],
                vocab,
                &[alone_key],
            );
            if alone[0] != batch[r] {
                return Err(format!(
                    "draw {r}: {} alone, {} in a batch of {m}",
                    alone[0], batch[r]
                ));
            }
        }
        Ok(exact())
    }));
    // One key draws the same token from a row alone and from that row as row 3 of 5.
    cases.push(Case::new("sample", "row-placement", |gpu| {
        let vocab = 2000;
        let logits = Rng::new(11).vec(5 * vocab, 4.0);
        let row3 = &logits[3 * vocab..4 * vocab];
        for stream in 0..8 {
            let key = SampleKey::new(42, 7, stream, 300, 1.0, 0);
            let alone = draw(gpu, row3, vocab, &[key])[0];
            let in_five = draw(gpu, &logits, vocab, &[SampleKey { row: 3, ..key }])[0];
            if alone != in_five {
                return Err(format!(
                    "stream {stream}: {alone} from the row alone, {in_five} from row 3 of 5"
                ));
            }
            if alone != reference::sample(row3, &key) {
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
        let logits = Rng::new(12).vec(4 * vocab, 1.0);
        let keys: Vec<SampleKey> = (0..16)
            .map(|s| SampleKey::new(5, 2, s, 40, 1.0, 2))
            .collect();
        let got = draw(gpu, &logits, vocab, &keys);
        if got != reference::sample_rows(&logits, vocab, &keys) {
            return Err(format!("{got:?} is not the reference's draws"));
        }
        let distinct = got.iter().collect::<std::collections::BTreeSet<_>>().len();
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
            .flat_map(|p| (0..2).map(move |req| SampleKey::new(9, req, 0, p, 1.0, 0)))
            .collect();
        let got = draw(gpu, &logits, vocab, &keys);
        if got != reference::sample_rows(&logits, vocab, &keys) {
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
    // A key naming a row past the logits draws u32::MAX; its log-prob is NaN.
    cases.push(Case::new("sample", "row-past-logits", |gpu| {
        let vocab = 300;
        let logits = Rng::new(13).vec(2 * vocab, 1.0);
        let keys = [
            SampleKey::new(1, 0, 0, 0, 1.0, 1),
            SampleKey::new(1, 0, 0, 0, 1.0, 2),
        ];
        let got = draw(gpu, &logits, vocab, &keys);
        if got[1] != u32::MAX || got[0] == u32::MAX {
            return Err(format!("drew {got:?}, want [a token, u32::MAX]"));
        }
        let (l, k, t) = (gpu.upload(&logits), gpu.upload(&keys), gpu.upload(&got));
        let (stats, lp) = (RowStats::zeros(gpu, 2), gpu.zeros(2));
        let mut enc = gpu.encoder();
        softmax::encode(gpu, &mut enc, &l, 2, vocab, &stats, Extra::Nothing);
        encode_draw_logprobs(gpu, &mut enc, &l, vocab, &stats, &k, &t, 2, &lp);
        gpu.submit(enc);
        let lp = read_f32(gpu, &lp);
        if !lp[0].is_finite() || !lp[1].is_nan() {
            return Err(format!("log-probs {lp:?}, want [finite, NaN]"));
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
    cases
}
