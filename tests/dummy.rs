//! Dummy (random) weights end to end on every adapter: a decoder built from a tiny built-in
//! config (widened to 256 for the K-quants), in every storage format, runs the engine and
//! gives finite log-probs, and the same seed gives the same samples. Every test fails, never
//! skips, when no adapter is found.

mod common;

use common::gpus;
use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::formats::WeightFormat;
use sprout::model::config::ModelConfig;
use sprout::model::decoder::Decoder;
use sprout::model::dummy::{DummyWeights, builtin_config};
use sprout::sched::{FinishedSample, Request, SamplingParams};

const MAX_TOKENS: usize = 6;

/// Two prompts of different lengths, each sampled 3 times for `MAX_TOKENS` tokens.
fn run(decoder: &Decoder) -> Vec<FinishedSample> {
    let config = EngineConfig {
        kv: KvSize::Blocks(32),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(decoder, &config).unwrap();
    for (index, len) in [(0u32, 5u32), (1, 19)] {
        engine
            .add_request(Request {
                index,
                prompt: (0..len).map(|i| 3 + (i * 37 + index * 11) % 500).collect(),
                n: 3,
                params: SamplingParams {
                    temperature: 1.0,
                    seed: 9,
                    max_tokens: MAX_TOKENS,
                    stop_ids: vec![],
                    ..SamplingParams::default()
                },
                forced: Vec::new(),
            })
            .unwrap();
    }
    let mut out = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
    out.sort_by_key(|s| (s.request_index, s.sample_index));
    out
}

#[test]
fn dummy_weights_run_the_engine_with_finite_logprobs() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        for (model, formats) in [
            ("tiny-llama", &WeightFormat::ALL[..]),
            ("tiny-qwen2", &[WeightFormat::F16, WeightFormat::Q4_1][..]),
            // Per-head q and k norms after a stored q|k|v projection, q wider than hidden.
            ("tiny-qwen3", &[WeightFormat::F16, WeightFormat::Q4_1][..]),
            // Sandwich norms, GELU, a sliding window and its own RoPE base on layer 0.
            ("tiny-gemma3", &[WeightFormat::F32, WeightFormat::Q8_0][..]),
        ] {
            let config = builtin_config(model).unwrap();
            let vocab = config.vocab_size;
            for &format in formats {
                // tiny-llama's rows (64 values) are not whole K-quant super-blocks: those
                // run it widened to 256 (4 heads of 64, an MLP of 256).
                let block = format.block_len();
                let config = ModelConfig {
                    hidden_size: config.hidden_size.next_multiple_of(block),
                    head_dim: config.hidden_size.next_multiple_of(block) / config.n_heads,
                    intermediate_size: config.intermediate_size.next_multiple_of(block),
                    ..config.clone()
                };
                let mut source = DummyWeights::new(config, format, 1).unwrap();
                let decoder = Decoder::load(gpu.clone(), &mut source, &mut |_, _| {}).unwrap();
                assert_eq!(decoder.weight_format(), format.name(), "{label}");
                let out = run(&decoder);
                assert_eq!(out.len(), 6, "{label} {model} {format}");
                // Random weights give a nearly flat distribution: every token about as
                // likely as 1 / vocab, far from 0 and from -inf.
                let floor = -(vocab as f32).ln() - 8.0;
                for s in &out {
                    assert_eq!(s.token_ids.len(), MAX_TOKENS, "{label} {model} {format}");
                    assert!(s.token_ids.iter().all(|&t| (t as usize) < vocab));
                    assert!(
                        s.logprobs
                            .iter()
                            .all(|l| l.is_finite() && *l < 0.0 && *l > floor),
                        "{label} {model} {format}: {:?}",
                        s.logprobs
                    );
                }
                let distinct: std::collections::HashSet<&Vec<u32>> =
                    out.iter().map(|s| &s.token_ids).collect();
                assert!(
                    distinct.len() > 1,
                    "{label} {model} {format}: samples all alike"
                );
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_samples() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let config = builtin_config("tiny-llama").unwrap();
        let samples = |seed: u64| {
            let mut source = DummyWeights::new(config.clone(), WeightFormat::Q4_1, seed).unwrap();
            let decoder = Decoder::load(gpu.clone(), &mut source, &mut |_, _| {}).unwrap();
            let out = run(&decoder);
            let bits: Vec<(Vec<u32>, Vec<u32>)> = out
                .iter()
                .map(|s| {
                    let lp = s.logprobs.iter().map(|l| l.to_bits()).collect();
                    (s.token_ids.clone(), lp)
                })
                .collect();
            bits
        };
        let first = samples(5);
        assert_eq!(first, samples(5), "{label}");
        assert_ne!(first, samples(6), "{label}: another seed, other weights");
    }
}
