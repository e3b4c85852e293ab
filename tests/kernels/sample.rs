//! Sampling on the GPU: greedy rows take the argmax, sampled rows draw exactly the token
//! the reference's hash and Gumbel-max give, and a row draws the same token alone or in a
//! batch of 64.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::sample::{SampleKey, encode};
use sprout::reference::sample as reference;

use crate::common::{Case, Outcome, Rng, read_u32};

fn draw(gpu: &Gpu, logits: &[f32], vocab: usize, keys: &[SampleKey]) -> Vec<u32> {
    let m = keys.len();
    let (l, k, out) = (gpu.upload(logits), gpu.upload(keys), gpu.zeros(m));
    let mut enc = gpu.encoder();
    encode(gpu, &mut enc, &l, m, vocab, &k, &out);
    gpu.submit(enc);
    read_u32(gpu, &out)
}

fn keys(m: usize, temperature: f32) -> Vec<SampleKey> {
    (0..m)
        .map(|r| {
            SampleKey::new(
                0x1234_5678_9abc_def0 + r as u64 % 3,
                r as u32 % 5,
                100 + r as u32,
                temperature,
            )
        })
        .collect()
}

fn check(gpu: &Gpu, m: usize, vocab: usize, temperature: f32) -> Result<Outcome, String> {
    let logits = Rng::new(vocab as u64).vec(m * vocab, 4.0);
    let keys = keys(m, temperature);
    let got = draw(gpu, &logits, vocab, &keys);
    for (r, key) in keys.iter().enumerate() {
        let want = reference::sample(&logits[r * vocab..(r + 1) * vocab], key);
        if got[r] != want {
            return Err(format!(
                "row {r}: drew {} but the reference draws {want}",
                got[r]
            ));
        }
    }
    // The draws must actually vary (a broken hash giving constant noise would still be
    // deterministic): with T >= 1 and 64 rows, expect several distinct tokens.
    let distinct = got.iter().collect::<std::collections::BTreeSet<_>>().len();
    if temperature >= 1.0 && distinct < 4 {
        return Err(format!("only {distinct} distinct tokens in {m} draws"));
    }
    Ok(Outcome {
        nmse: 0.0,
        tolerance: 0.0,
    })
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (vocab, temperature) in [
        (1000, 0.0),
        (1000, 1.0),
        (49152, 1.0),
        (257, 0.7),
        (50257, 2.0),
    ] {
        cases.push(Case::new(
            "sample",
            format!("v{vocab}_t{temperature}"),
            move |gpu| check(gpu, 64, vocab, temperature),
        ));
    }
    cases.push(Case::new("sample", "batch-invariance", |gpu| {
        let (m, vocab) = (64, 3000);
        let logits = Rng::new(9).vec(m * vocab, 4.0);
        let keys = keys(m, 1.0);
        let batch = draw(gpu, &logits, vocab, &keys);
        for r in [0, 17, 63] {
            let alone = draw(
                gpu,
                &logits[r * vocab..(r + 1) * vocab],
                vocab,
                &keys[r..r + 1],
            );
            if alone[0] != batch[r] {
                return Err(format!(
                    "row {r}: {} alone, {} in a batch of {m}",
                    alone[0], batch[r]
                ));
            }
        }
        Ok(Outcome {
            nmse: 0.0,
            tolerance: 0.0,
        })
    }));
    cases
}
