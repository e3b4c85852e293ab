//! The sampler against the model's own distribution, on every adapter: many first tokens
//! drawn for one prompt (one prompt computation, N draws from its last row) must match, by
//! a chi-square test, the softmax of the model's logits at temperature 1 and 0.7 and
//! renormalised over the top-k and top-p sets. A biased or off-by-one sampler fails them.

mod common;

use common::chi_square::chi_square;
use common::{gpus, smollm2, tiny_llama};
use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::model::decoder::Decoder;
use sprout::sched::{Request, SamplingParams};

/// The probabilities of the next token after `prompt` under `params`, in f64 from the
/// model's f32 logits: softmax(logits / T) over the kept set (top-k, then the top-p
/// prefix of it), renormalised.
fn expected(decoder: &Decoder, prompt: &[u32], params: &SamplingParams) -> Vec<f64> {
    let vocab = decoder.config.vocab_size;
    let logits = pollster::block_on(sprout::generate::logits(decoder, prompt)).unwrap();
    let row = &logits[(prompt.len() - 1) * vocab..][..vocab];
    let s: Vec<f64> = row
        .iter()
        .map(|&l| (l * (1.0 / params.temperature)) as f64)
        .collect();
    let max = s.iter().copied().fold(f64::MIN, f64::max);
    let mut order: Vec<usize> = (0..vocab).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let k = if params.top_k == 0 {
        vocab
    } else {
        params.top_k.min(vocab)
    };
    let weight = |c: usize| (s[c] - max).exp();
    let top_k_mass: f64 = order[..k].iter().map(|&c| weight(c)).sum();
    let mut kept = 0;
    let mut mass = 0.0;
    while kept < k {
        mass += weight(order[kept]);
        kept += 1;
        if mass >= params.top_p as f64 * top_k_mass {
            break;
        }
    }
    let mut p = vec![0.0; vocab];
    for &c in &order[..kept] {
        p[c] = weight(c) / mass;
    }
    p
}

/// Draws `n` first tokens (request 0, samples 0..n) and returns the chi-square p-value of
/// their counts against `expected`.
fn first_token_p_value(
    decoder: &Decoder,
    prompt: &[u32],
    params: SamplingParams,
    n: usize,
) -> (f64, usize) {
    let want = expected(decoder, prompt, &params);
    let config = EngineConfig {
        kv: KvSize::Blocks(64),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(decoder, &config).unwrap();
    engine
        .add_request(Request {
            index: 0,
            prompt: prompt.to_vec(),
            n,
            params,
            forced: Vec::new(),
            cache_salt: None,
            lora: false,
        })
        .unwrap();
    let out = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
    assert_eq!(engine.stats().prefill_tokens_computed, prompt.len());
    let mut counts = vec![0u64; want.len()];
    for s in &out {
        let token = s.token_ids[0] as usize;
        assert!(
            want[token] > 0.0,
            "token {token} drawn outside the kept set"
        );
        counts[token] += 1;
    }
    let expected: Vec<f64> = want.iter().map(|p| p * n as f64).collect();
    let (_, df, p) = chi_square(&counts, &expected);
    (p, df)
}

fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_k,
        top_p,
        seed,
        max_tokens: 1,
        ..SamplingParams::default()
    }
}

#[test]
fn first_tokens_follow_the_models_softmax() {
    let prompt: Vec<u32> = (0..13).map(|i| 5 + i * 17 % 300).collect();
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        for (name, p) in [
            ("t1", params(1.0, 0, 1.0, 11)),
            ("t0.7", params(0.7, 0, 1.0, 12)),
            ("top-k20", params(1.0, 20, 1.0, 13)),
            ("top-p0.5", params(1.0, 0, 0.5, 14)),
        ] {
            let (p_value, df) = first_token_p_value(&decoder, &prompt, p, 4000);
            println!("tiny-llama {name} on {label}: chi-square p-value {p_value:.4} ({df} df)");
            assert!(
                p_value > 1e-3,
                "tiny-llama {name} on {label}: p-value {p_value}"
            );
        }
    }
}

/// The acceptance rollout's setting: 2000 first tokens at temperature 1, seed 5.
#[test]
fn smollm2_first_tokens_follow_its_softmax() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let (decoder, tokenizer) = smollm2(&gpu);
        let prompt = tokenizer.encode("The Eiffel Tower is located in").unwrap();
        for (name, p) in [
            ("t1", params(1.0, 0, 1.0, 5)),
            ("top-k5", params(1.0, 5, 1.0, 6)),
        ] {
            let (p_value, df) = first_token_p_value(&decoder, &prompt, p, 2000);
            println!("smollm2 {name} on {label}: chi-square p-value {p_value:.4} ({df} df)");
            assert!(
                p_value > 1e-3,
                "smollm2 {name} on {label}: p-value {p_value}"
            );
        }
    }
}
