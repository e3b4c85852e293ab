//! Dummy (random) weights end to end on every adapter: a decoder built from a tiny built-in
//! config (widened to 256 for the K-quants), in every storage format, runs the engine and
//! gives finite log-probs, and the same seed gives the same samples. Every test fails, never
//! skips, when no adapter is found.

mod common;

use common::gpus;
use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::formats::WeightFormat;
use sprout::gpu::kernels::Logits;
use sprout::gpu::{BackendChoice, Gpu, LimitCaps, list_adapters};
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
                cache_salt: None,
                lora: false,
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

/// Gemma 3's vocabulary of 262,144 at a small hidden size, on each adapter twice: as it is,
/// and capped to 16 MiB bindings, which splits the Q8_0 embedding (18.9 MB) into parts and
/// the 256 rows of logits of a step into chunks of 16. A group of 256 samples draws its
/// first tokens from one row, then 256 rows in one step: every token, log-prob and top
/// alternative is bitwise the same under the cap, and `max_num_seqs` is not cut.
#[test]
fn a_large_vocabulary_runs_the_same_in_parts_and_chunks() {
    const VOCAB: usize = 262_144;
    const G: usize = 256;
    let cap = LimitCaps {
        max_binding: Some(16 << 20),
        max_buffer: None,
    };
    let adapters = pollster::block_on(list_adapters(BackendChoice::Auto));
    assert!(!adapters.is_empty(), "no GPU adapter found");
    for adapter in adapters {
        let runs = [LimitCaps::default(), cap].map(|caps| {
            let gpu = pollster::block_on(Gpu::from_adapter_capped(&adapter, caps)).unwrap();
            let config = ModelConfig {
                vocab_size: VOCAB,
                ..builtin_config("tiny-llama").unwrap()
            };
            let mut source = DummyWeights::new(config, WeightFormat::Q8_0, 3).unwrap();
            let decoder = Decoder::load(gpu.clone(), &mut source, &mut |_, _| {}).unwrap();
            let parts = decoder.weights().unwrap().lm_head().parts.len();
            let config = EngineConfig {
                kv: KvSize::Blocks(2 * G),
                max_num_seqs: G,
                max_batch_tokens: 2 * G,
                ..EngineConfig::default()
            };
            let mut engine = Engine::new(&decoder, &config).unwrap();
            let adjusted: Vec<_> = engine.adjusted().iter().map(|a| a.param).collect();
            assert!(!adjusted.contains(&"max_num_seqs"), "{adjusted:?}");
            engine
                .add_request(Request {
                    index: 0,
                    prompt: vec![2, 70_000, 262_143, 5],
                    n: G,
                    params: SamplingParams {
                        temperature: 1.0,
                        seed: 4,
                        max_tokens: 2,
                        top_logprobs: 2,
                        ..SamplingParams::default()
                    },
                    forced: Vec::new(),
                    cache_salt: None,
                    lora: false,
                })
                .unwrap();
            let mut draws = Vec::new();
            let out = pollster::block_on(engine.run_to_completion(|step| {
                draws.push(step.drawn.len());
            }))
            .unwrap();
            let chunk_rows = Logits::rows_per_chunk(&gpu, VOCAB);
            (out, parts, chunk_rows, draws)
        });
        let label = adapter.get_info().name;
        let [(whole, _, _, _), (capped, parts, chunk_rows, draws)] = runs;
        assert!(
            parts > 1,
            "{label}: the capped embedding is in {parts} part"
        );
        assert_eq!(chunk_rows, 16, "{label}");
        // The second step's 256 draws are from 256 rows of logits, one per sample.
        assert_eq!(draws, [G, G], "{label}: draws per step");
        assert_eq!(whole.len(), G, "{label}");
        let view = |s: &FinishedSample| {
            let tops: Vec<(u32, u32)> = s
                .top_logprobs
                .iter()
                .flatten()
                .map(|t| (t.token, t.logprob.to_bits()))
                .collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            (
                s.sample_index,
                s.token_ids.clone(),
                bits(&s.logprobs),
                bits(&s.sampling_logprobs),
                tops,
            )
        };
        let sorted = |v: &[FinishedSample]| {
            let mut v: Vec<_> = v.iter().map(view).collect();
            v.sort();
            v
        };
        let (whole, capped) = (sorted(&whole), sorted(&capped));
        assert!(whole.iter().all(|s| s.1.len() == 2), "{label}");
        assert_eq!(capped, whole, "{label}: capped vs as the adapter is");
    }
}
