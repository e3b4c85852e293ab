//! Logit processing end to end on every adapter: `allowed_token_ids`, `bad_words`,
//! `logit_bias` and the repetition, presence and frequency penalties, against a CPU
//! reference written here from vLLM's definitions (over the model's own logits, from a
//! teacher-forced pass): greedy tokens are the reference's argmax at every step; many
//! sampled first tokens, and second tokens after a penalised first one, follow the
//! reference's distribution (chi-square); the sampling log-probs are that distribution's
//! and the raw ones the model's. A sample with every field set is bitwise the same alone,
//! among 64, in prefill chunks, preempted, with steps one at a time, and with speculative
//! decoding, and scoring its tokens returns its raw log-probs bitwise.

mod common;

use common::chi_square::chi_square;
use common::engine::{config, request, run};
use common::{gpus, log_softmax_f64, tiny_llama};
use sprout::engine::EngineConfig;
use sprout::model::decoder::Decoder;
use sprout::sched::{FinishedSample, LogitProcessing, SamplingParams};
use sprout::spec::SpecMode;

/// The tiny Llama's prompt for these tests.
fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| 3 + (i * 11 + salt * 29) % 350)
        .collect()
}

/// The model's logits for the token after `context`.
fn next_logits(decoder: &Decoder, context: &[u32]) -> Vec<f32> {
    let vocab = decoder.config.vocab_size;
    let all = pollster::block_on(sprout::generate::logits(decoder, context)).unwrap();
    all[(context.len() - 1) * vocab..][..vocab].to_vec()
}

/// vLLM's processing of one row, in its order: the allow-list and bad words mask (to -inf),
/// then the bias, the repetition penalty over the prompt and the generated tokens, the
/// frequency and presence penalties over the generated tokens.
fn processed(raw: &[f32], prompt: &[u32], generated: &[u32], x: &LogitProcessing) -> Vec<f32> {
    let mut l = raw.to_vec();
    if let Some(allowed) = &x.allowed_token_ids {
        for (c, v) in l.iter_mut().enumerate() {
            if !allowed.contains(&(c as u32)) {
                *v = f32::NEG_INFINITY;
            }
        }
    }
    for word in &x.bad_words {
        let (rest, last) = word.split_at(word.len() - 1);
        if generated.ends_with(rest) {
            l[last[0] as usize] = f32::NEG_INFINITY;
        }
    }
    for &(token, bias) in &x.logit_bias {
        l[token as usize] += bias;
    }
    for (c, v) in l.iter_mut().enumerate() {
        let token = c as u32;
        if prompt.contains(&token) || generated.contains(&token) {
            let r = x.repetition_penalty;
            *v *= if *v > 0.0 { 1.0 / r } else { r };
        }
        let count = generated.iter().filter(|&&t| t == token).count();
        *v -= x.frequency_penalty * count as f32;
        if count > 0 {
            *v -= x.presence_penalty;
        }
    }
    l
}

/// softmax(l / temperature) in f64 (masked tokens 0).
fn probabilities(l: &[f32], temperature: f32) -> Vec<f64> {
    let s: Vec<f64> = l.iter().map(|&v| (v / temperature) as f64).collect();
    let max = s.iter().copied().fold(f64::MIN, f64::max);
    let w: Vec<f64> = s.iter().map(|&v| (v - max).exp()).collect();
    let z: f64 = w.iter().sum();
    w.iter().map(|&v| v / z).collect()
}

/// The largest logit's token, lowest index on ties, and its margin over the runner-up.
fn argmax(l: &[f32]) -> (u32, f32) {
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
    (order[0] as u32, l[order[0]] - l[order[1]])
}

/// Every processor on at once.
fn every_processor() -> LogitProcessing {
    LogitProcessing {
        allowed_token_ids: Some((3..300).collect()),
        bad_words: vec![vec![40], vec![41, 42], vec![77, 78, 79]],
        logit_bias: vec![(5, 1.5), (64, -2.0), (100, 0.75), (250, 3.0)],
        repetition_penalty: 1.6,
        presence_penalty: 0.8,
        frequency_penalty: 0.6,
    }
}

/// Greedy decoding with every processor: each token is the argmax of the reference's
/// processing of the model's logits at its context, and never a masked one.
#[test]
fn greedy_tokens_are_the_argmax_of_the_processed_logits() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let x = every_processor();
        let params = SamplingParams {
            temperature: 0.0,
            max_tokens: 24,
            processing: x.clone(),
            ..SamplingParams::default()
        };
        let p = prompt(17, 1);
        let (out, _) = run(
            &decoder,
            &config(64, 256),
            &[request(0, p.clone(), 1, params)],
        );
        let tokens = &out[0].token_ids;
        assert_eq!(tokens.len(), 24, "{label}");
        let mut context = p.clone();
        let mut near_ties = 0;
        for (i, &token) in tokens.iter().enumerate() {
            let raw = next_logits(&decoder, &context);
            let want = processed(&raw, &p, &context[p.len()..], &x);
            let (best, margin) = argmax(&want);
            // GPU and CPU arithmetic may round a near-tie either way.
            if margin < 1e-4 {
                near_ties += 1;
            } else {
                assert_eq!(token, best, "{label}: token {i}");
            }
            assert!(want[token as usize].is_finite(), "{label}: masked {token}");
            context.push(token);
        }
        assert!(near_ties <= 1, "{label}: {near_ties} near-ties");
        // The processing did something: without it greedy decoding repeats itself.
        let plain = SamplingParams {
            temperature: 0.0,
            max_tokens: 24,
            ..SamplingParams::default()
        };
        let (raw_out, _) = run(&decoder, &config(64, 256), &[request(0, p, 1, plain)]);
        assert_ne!(raw_out[0].token_ids, *tokens, "{label}");
    }
}

/// Draws `n` samples of `max_tokens` and returns them.
fn sample(decoder: &Decoder, p: &[u32], n: usize, params: SamplingParams) -> Vec<FinishedSample> {
    let (out, _) = run(
        decoder,
        &config(256, 512),
        &[request(0, p.to_vec(), n, params)],
    );
    out
}

/// The chi-square p-value of `tokens` against the distribution `want`, asserting that
/// no token outside it was drawn.
fn p_value(tokens: impl Iterator<Item = u32>, want: &[f64], label: &str) -> (f64, usize) {
    let mut counts = vec![0u64; want.len()];
    let mut n = 0;
    for t in tokens {
        assert!(want[t as usize] > 0.0, "{label}: token {t} drawn outside");
        counts[t as usize] += 1;
        n += 1;
    }
    let expected: Vec<f64> = want.iter().map(|p| p * n as f64).collect();
    let (_, df, p) = chi_square(&counts, &expected);
    (p, df)
}

/// 4000 first tokens with a logit bias, a presence penalty (which the prompt's tokens do
/// not incur) and a repetition penalty (which they do) follow the processed softmax at
/// temperature 0.8; their sampling log-probs are its log-probabilities and their raw
/// log-probs the model's.
#[test]
fn first_tokens_follow_the_processed_distribution() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let p = prompt(13, 2);
        let raw = next_logits(&decoder, &p);
        let (top, _) = argmax(&raw);
        let x = LogitProcessing {
            logit_bias: vec![(top, -1.5), (p[3], 2.0), (200, 2.5), (201, 1.0)],
            presence_penalty: 1.5,
            repetition_penalty: 2.0,
            ..LogitProcessing::default()
        };
        let params = SamplingParams {
            temperature: 0.8,
            seed: 17,
            max_tokens: 1,
            processing: x.clone(),
            ..SamplingParams::default()
        };
        let out = sample(&decoder, &p, 4000, params);
        let want = probabilities(&processed(&raw, &p, &[], &x), 0.8);
        let (p_value, df) = p_value(out.iter().map(|s| s.token_ids[0]), &want, &label);
        println!("{label}: first tokens, chi-square p-value {p_value:.4} ({df} df)");
        assert!(p_value > 1e-3, "{label}: p-value {p_value}");
        let model = log_softmax_f64(&raw);
        for s in &out {
            let t = s.token_ids[0] as usize;
            let (sampling, logprob) = (s.sampling_logprobs[0] as f64, s.logprobs[0] as f64);
            assert!((sampling - want[t].ln()).abs() < 1e-3, "{label}: token {t}");
            assert!((logprob - model[t]).abs() < 1e-4, "{label}: token {t}");
        }
    }
}

/// Among a dozen allowed tokens, a large bias on one makes nearly every sample draw it
/// first; their second tokens, after it, follow the processed distribution in which the
/// presence and frequency penalties count it once.
#[test]
fn second_tokens_follow_the_penalised_distribution() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let p = prompt(11, 3);
        let favourite = 123u32;
        let x = LogitProcessing {
            allowed_token_ids: Some((118..130).collect()),
            logit_bias: vec![(favourite, 10.0), (120, 1.0)],
            presence_penalty: 2.0,
            frequency_penalty: 2.0,
            ..LogitProcessing::default()
        };
        let params = SamplingParams {
            temperature: 1.0,
            seed: 23,
            max_tokens: 2,
            processing: x.clone(),
            ..SamplingParams::default()
        };
        let out = sample(&decoder, &p, 4000, params);
        let after: Vec<&FinishedSample> =
            out.iter().filter(|s| s.token_ids[0] == favourite).collect();
        let first_raw = next_logits(&decoder, &p);
        let first = probabilities(&processed(&first_raw, &p, &[], &x), 1.0);
        println!(
            "{label}: {} of 4000 drew it first, p = {}",
            after.len(),
            first[favourite as usize]
        );
        assert!(after.len() > 3000, "{label}: {} drew it first", after.len());
        let mut context = p.clone();
        context.push(favourite);
        let raw = next_logits(&decoder, &context);
        let want = probabilities(&processed(&raw, &p, &[favourite], &x), 1.0);
        // The penalties pulled the favourite down by 4 (from its bias of 10).
        assert!(
            want[favourite as usize] < first[favourite as usize],
            "{label}"
        );
        let (p_value, df) = p_value(after.iter().map(|s| s.token_ids[1]), &want, &label);
        println!("{label}: second tokens, chi-square p-value {p_value:.4} ({df} df)");
        assert!(p_value > 1e-3, "{label}: p-value {p_value}");
    }
}

/// Samples of request 0 with their tokens and both log-probs as bits.
type Bits = Vec<(u32, Vec<u32>, Vec<u32>, Vec<u32>)>;

fn first_request(samples: &[FinishedSample]) -> Bits {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect();
    let mut out: Bits = samples
        .iter()
        .filter(|s| s.request_index == 0)
        .map(|s| {
            let (raw, sampling) = (bits(&s.logprobs), bits(&s.sampling_logprobs));
            (s.sample_index, s.token_ids.clone(), raw, sampling)
        })
        .collect();
    out.sort_by_key(|s| s.0);
    out
}

/// A sample with every field set (every processor, min_tokens with stop tokens, top-k,
/// top-p and min-p) is bitwise the same, tokens and both log-probs, alone and among 64
/// samples (half of them processed otherwise), in prefill chunks of 5, preempted, with
/// steps one at a time, and speculating; and scoring its tokens returns its raw log-probs.
#[test]
fn a_processed_sample_is_batch_invariant() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let every = |seed: u64| SamplingParams {
            temperature: 0.9,
            top_k: 200,
            top_p: 0.95,
            min_p: 0.01,
            seed,
            max_tokens: 20,
            min_tokens: 6,
            stop_ids: vec![2, 9],
            processing: every_processor(),
            ..SamplingParams::default()
        };
        let target = request(0, prompt(41, 0), 8, every(5));
        let (alone, _) = run(&decoder, &config(128, 256), std::slice::from_ref(&target));
        let want = first_request(&alone);
        assert_eq!(want.len(), 8, "{label}");
        for s in &alone {
            for (i, &t) in s.token_ids.iter().enumerate() {
                assert!((3..300).contains(&t) && t != 40, "{label}: token {t}");
                assert!(
                    i >= 6 || ![2, 9].contains(&t),
                    "{label}: stop before min_tokens"
                );
            }
            let pairs = s.token_ids.windows(2);
            assert!(!pairs.clone().any(|w| w == [41, 42]), "{label}: a bad word");
        }

        let mut batch = vec![target.clone()];
        batch.extend((1..8).map(|i| {
            let mut params = every(i as u64);
            if i % 2 == 0 {
                params.processing = LogitProcessing::default();
            }
            request(i, prompt(20 + 3 * i as usize, i), 8, params)
        }));
        let (out, _) = run(&decoder, &config(512, 256), &batch);
        assert_eq!(first_request(&out), want, "{label}: among 64");

        let (out, _) = run(&decoder, &config(128, 5), &batch[..3]);
        assert_eq!(first_request(&out), want, "{label}: in chunks of 5");

        let (out, stats) = run(&decoder, &config(12, 256), &batch[..3]);
        assert!(stats.preemptions > 0, "{label}: {stats:?}");
        assert_eq!(first_request(&out), want, "{label}: preempted");

        let one_at_a_time = EngineConfig {
            overlap: false,
            ..config(128, 256)
        };
        let (out, _) = run(&decoder, &one_at_a_time, &batch[..2]);
        assert_eq!(first_request(&out), want, "{label}: one step at a time");

        let speculating = EngineConfig {
            speculative: SpecMode::Suffix,
            ..config(256, 256)
        };
        let (out, _) = run(&decoder, &speculating, &batch[..2]);
        assert_eq!(first_request(&out), want, "{label}: speculating");

        let mut scoring = target.clone();
        scoring.forced = want.iter().map(|s| s.1.clone()).collect();
        let (scored, _) = run(&decoder, &config(128, 256), &[scoring]);
        for (s, w) in first_request(&scored).iter().zip(&want) {
            assert_eq!((&s.1, &s.2), (&w.1, &w.2), "{label}: scored");
        }
    }
}
