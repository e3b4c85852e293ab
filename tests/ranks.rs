//! Scored tokens' ranks end to end on every adapter (the tiny Llama): every rank a scored
//! sample returns is the token's place in its position's logits (from a teacher-forced
//! pass over the whole sequence) by the definition, with the logits whole and in small
//! prefill chunks with preemption; tokens drawn greedily rank 1 when scored; a token that
//! was the `k`-th alternative of its position ranks `k + 1`; drawn samples have no ranks;
//! a scored token gets the alternatives its request asks for, the bits a draw gets.

mod common;

use common::engine::{config, request, run};
use common::{gpus, tiny_llama};
use sprout::model::decoder::Decoder;
use sprout::rng::SplitMix64;
use sprout::sched::{FinishedSample, Request, SamplingParams};

/// A prompt of `len` tokens from the tiny Llama's vocabulary, different for each `seed`.
fn prompt(len: usize, seed: u32) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed as u64);
    (0..len).map(|_| 3 + rng.below(360) as u32).collect()
}

/// Sampling parameters that run every sample to `max_tokens` (no stop tokens).
fn params(temperature: f32, max_tokens: usize, top_logprobs: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: 7,
        max_tokens,
        stop_ids: vec![],
        top_logprobs,
        ..SamplingParams::default()
    }
}

/// `token`'s 1-based place in `row` sorted by logit, largest first, lowest id first among
/// equal logits (-0 equal to +0): the order of `top_logprobs`.
fn rank_by_sorting(row: &[f32], token: u32) -> u32 {
    let mut ids: Vec<u32> = (0..row.len() as u32).collect();
    ids.sort_by(|&a, &b| {
        let (x, y) = (row[a as usize], row[b as usize]);
        y.partial_cmp(&x).expect("finite logits").then(a.cmp(&b))
    });
    ids.iter()
        .position(|&t| t == token)
        .expect("in the vocabulary") as u32
        + 1
}

/// Every rank of every scored sample against its position's logits; returns the ranks by
/// (request index, sample index).
fn check_against_logits(
    decoder: &Decoder,
    requests: &[Request],
    scored: &[FinishedSample],
    label: &str,
) -> Vec<((u32, u32), Vec<u32>)> {
    let vocab = decoder.config.vocab_size;
    let mut out = Vec::new();
    for s in scored {
        let r = &requests[s.request_index as usize];
        assert_eq!(s.token_ids, r.forced[s.sample_index as usize], "{label}");
        assert_eq!(s.ranks.len(), s.logprobs.len(), "{label}: a rank per token");
        let ids: Vec<u32> = s
            .prompt_token_ids
            .iter()
            .chain(&s.token_ids)
            .copied()
            .collect();
        let logits = pollster::block_on(sprout::generate::logits(decoder, &ids)).unwrap();
        let p = s.prompt_token_ids.len();
        for (i, (&token, &rank)) in s.token_ids.iter().zip(&s.ranks).enumerate() {
            let row = &logits[(p - 1 + i) * vocab..][..vocab];
            let want = rank_by_sorting(row, token);
            assert_eq!(
                rank, want,
                "{label}: request {} sample {} token {i} ({token})",
                s.request_index, s.sample_index
            );
        }
        out.push(((s.request_index, s.sample_index), s.ranks.clone()));
    }
    out.sort();
    out
}

#[test]
fn scored_tokens_rank_by_their_positions_logits() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        // Greedy: each token is its position's first in the order, and the alternatives
        // at position 3 are the order's first five.
        let greedy = request(0, prompt(17, 0), 1, params(0.0, 6, 5));
        // Sampled: tokens of every rank, from three prompts.
        let sampled: Vec<Request> = (1..4)
            .map(|i| request(i, prompt(11 + 6 * i as usize, i), 3, params(1.0, 9, 0)))
            .collect();
        let mut requests = vec![greedy];
        requests.extend(sampled);
        let (drawn, _) = run(&decoder, &config(128, 256), &requests);
        assert!(drawn.iter().all(|s| s.ranks.is_empty()), "{label}: drawn");
        let g = drawn.iter().find(|s| s.request_index == 0).unwrap();
        // The greedy completion, then its first three tokens and each alternative of
        // position 3 in turn.
        let mut forced = vec![g.token_ids.clone()];
        for alt in &g.top_logprobs[3] {
            forced.push([&g.token_ids[..3], &[alt.token]].concat());
        }
        let mut scoring = requests.clone();
        scoring[0].n = forced.len();
        scoring[0].forced = forced;
        for r in &mut scoring[1..] {
            r.forced = drawn
                .iter()
                .filter(|s| s.request_index == r.index)
                .map(|s| s.token_ids.clone())
                .collect();
        }
        // The logits whole, and small chunks in a small pool (preemption): the same ranks.
        let mut runs = Vec::new();
        for cfg in [config(128, 256), config(8, 7)] {
            let (scored, stats) = run(&decoder, &cfg, &scoring);
            let what = format!("{label}, {stats:?}");
            runs.push(check_against_logits(&decoder, &scoring, &scored, &what));
            for s in scored.iter().filter(|s| s.request_index == 0) {
                let want: Vec<u32> = match s.sample_index {
                    0 => vec![1; 6],
                    k => vec![1, 1, 1, k],
                };
                assert_eq!(s.ranks, want, "{what}: greedy sample {}", s.sample_index);
                // Scoring asks the alternatives as drawing did: the same, bitwise, at every
                // position the two share.
                assert_eq!(s.top_logprobs.len(), s.token_ids.len(), "{what}");
                let shared = match s.sample_index {
                    0 => 6,
                    _ => 3,
                };
                for (i, (scored, drawn)) in s
                    .top_logprobs
                    .iter()
                    .zip(&g.top_logprobs)
                    .enumerate()
                    .take(shared)
                {
                    let bits = |t: &[sprout::sched::TopLogprob]| -> Vec<(u32, u32)> {
                        t.iter().map(|a| (a.token, a.logprob.to_bits())).collect()
                    };
                    assert_eq!(
                        bits(scored),
                        bits(drawn),
                        "{what}: sample {} position {i}",
                        s.sample_index
                    );
                }
            }
            let unasked = scored.iter().filter(|s| s.request_index != 0);
            assert!(
                unasked.clone().all(|s| s.top_logprobs.is_empty()),
                "{what}: none asked"
            );
        }
        assert_eq!(runs[0], runs[1], "{label}: whole vs chunked and preempted");
        // Some sampled token ranks past the first, so the check above saw more than 1s.
        let ranks = runs[0].iter().flat_map(|(_, r)| r);
        assert!(ranks.clone().any(|&r| r > 5), "{label}: {:?}", runs[0]);
    }
}
