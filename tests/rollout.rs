//! The engine end to end on every adapter: groups share their prompt, prefixes are reused
//! across requests, a tiny pool preempts, and a sample's tokens and log-probs are bitwise
//! the same alone or in a batch of 64, with or without prefix-cache hits, with any prefill
//! chunk size, after preemption, with steps overlapped or one at a time, and whichever
//! kernel variants (CPU- or GPU-shaped, tuned per row count) serve its steps.
//!
//! Most tests use the tiny random Llama fixture (fast on a CPU adapter, and its flat
//! distribution makes samples diverge quickly); the invariance check runs on the tiny
//! Gemma 3 too (sliding windows), and one repeats it on the default model. Every test fails, never skips, when no adapter is found.

mod common;

use common::engine::{config, run};
use common::{gpus, log_softmax_f64, smollm2, tiny_gemma3, tiny_llama};
use sprout::engine::{Engine, EngineConfig};
use sprout::gpu::Gpu;
use sprout::gpu::kernels::attention::AttentionVariant;
use sprout::gpu::kernels::matmul::{MatmulShape, XLoads};
use sprout::gpu::tuning::{AttentionChoice, KernelChoices, MatmulChoice, MatmulKey, ROW_BUCKETS};
use sprout::model::decoder::Decoder;
use sprout::sched::{FinishedSample, Request, SamplingParams};

fn request(index: u32, prompt: Vec<u32>, n: usize, max_tokens: usize) -> Request {
    Request {
        index,
        prompt,
        n,
        params: SamplingParams {
            temperature: 1.0,
            seed: 42,
            max_tokens,
            // No stop tokens: every sample runs to max_tokens, so lengths are known.
            stop_ids: vec![],
            ..SamplingParams::default()
        },
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }
}

/// A prompt of `len` tokens from the tiny model's vocabulary, different for each `salt`.
fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| 3 + (i * 7 + salt * 13) % 300)
        .collect()
}

/// The samples of request index 0, with log-probs as bits (bitwise comparison).
fn first_prompt(samples: &[FinishedSample]) -> Vec<(u32, Vec<u32>, Vec<u32>)> {
    samples
        .iter()
        .filter(|s| s.request_index == 0)
        .map(|s| {
            let bits = s.logprobs.iter().map(|l| l.to_bits()).collect();
            (s.sample_index, s.token_ids.clone(), bits)
        })
        .collect()
}

#[test]
fn a_group_computes_its_prompt_once_and_its_samples_differ() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let (out, stats) = run(
            &decoder,
            &config(64, 256),
            &[request(0, prompt(37, 0), 8, 12)],
        );
        assert_eq!(out.len(), 8, "{label}");
        assert_eq!(stats.prefill_tokens_computed, 37, "{label}: {stats:?}");
        assert_eq!(stats.generated_tokens, 8 * 12, "{label}");
        let distinct: std::collections::HashSet<_> = out.iter().map(|s| &s.token_ids).collect();
        assert_eq!(distinct.len(), 8, "{label}: samples should differ");
        // A rerun repeats every sample exactly.
        let (again, _) = run(
            &decoder,
            &config(64, 256),
            &[request(0, prompt(37, 0), 8, 12)],
        );
        assert_eq!(first_prompt(&again), first_prompt(&out), "{label}: rerun");
    }
}

#[test]
fn a_later_request_reuses_the_cached_prefix() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let mut engine = Engine::new(&decoder, &config(64, 256)).unwrap();
        let system = prompt(48, 9);
        let with_question = |q: u32| {
            let mut p = system.clone();
            p.extend(prompt(5, q));
            p
        };
        engine
            .add_request(request(0, with_question(1), 2, 4))
            .unwrap();
        pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
        engine
            .add_request(request(1, with_question(2), 2, 4))
            .unwrap();
        pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
        let stats = engine.stats();
        assert_eq!(stats.prefix_cache_hit_tokens, 48, "{label}: {stats:?}");
        assert_eq!(stats.prefill_tokens_computed, 53 + 5, "{label}: {stats:?}");
    }
}

/// Sample k of a prompt is bitwise the same alone, among 64 samples, with prefix-cache hits,
/// with small prefill chunks, and in a pool so small that sequences are preempted: on the
/// tiny Llama, and on the tiny Gemma 3, whose sliding window of 12 every prompt here
/// crosses (the window must hold in chunks, after cached blocks and after a preemption).
#[test]
fn samples_are_batch_invariant() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        check_batch_invariance(&tiny_llama(&gpu), &format!("tiny-llama on {label}"));
        check_batch_invariance(&tiny_gemma3(&gpu), &format!("tiny-gemma3 on {label}"));
    }
}

fn check_batch_invariance(decoder: &Decoder, label: &str) {
    let target = request(0, prompt(41, 0), 8, 24);
    let (alone, _) = run(decoder, &config(128, 256), std::slice::from_ref(&target));
    let want = first_prompt(&alone);
    assert_eq!(want.len(), 8);

    // 8 prompts x 8 samples: one step decodes 64 sequences.
    let mut batch = vec![target.clone()];
    batch.extend((1..8).map(|i| request(i, prompt(20 + 3 * i as usize, i), 8, 24)));
    let (out, _) = run(decoder, &config(512, 256), &batch);
    assert_eq!(first_prompt(&out), want, "{label}: in a batch of 64");

    // Other prompts sharing its first two blocks run first and leave them cached.
    let mut shared = target.prompt[..32].to_vec();
    shared.extend(prompt(6, 5));
    let mut cached = vec![target.clone()];
    cached.push(request(1, shared, 2, 3));
    let mut engine = Engine::new(decoder, &config(128, 256)).unwrap();
    engine.add_request(cached[1].clone()).unwrap();
    pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
    engine.add_request(target.clone()).unwrap();
    let out = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
    assert_eq!(engine.stats().prefix_cache_hit_tokens, 32, "{label}");
    assert_eq!(first_prompt(&out), want, "{label}: with prefix-cache hits");

    // Prefill in chunks of 5 tokens.
    let (out, _) = run(decoder, &config(128, 5), &batch[..3]);
    assert_eq!(first_prompt(&out), want, "{label}: in chunks of 5");

    // A pool of 12 blocks (16 tokens each) cannot hold 24 long samples at once.
    let (out, stats) = run(decoder, &config(12, 256), &batch[..3]);
    assert!(stats.preemptions > 0, "{label}: {stats:?}");
    assert_eq!(first_prompt(&out), want, "{label}: after preemption");
}

/// Tuned choices that change the kernel variant with every row-count bucket: the CPU
/// tiles, the GPU matrix-vector and GEMM shapes, and every attention variant (split rows
/// included) take turns, so that a sample's steps run on all of them.
fn mixed_choices(decoder: &Decoder, gpu: &Gpu) -> KernelChoices {
    let shapes = [
        MatmulShape::MatVec {
            wg: 64,
            nr: 2,
            xr: 1,
        },
        MatmulShape::Tile {
            rows: 1,
            cols: 2,
            loads: XLoads::best(&gpu.caps),
        },
        MatmulShape::Gemm { tm: 4 },
        MatmulShape::MatVec {
            wg: 128,
            nr: 8,
            xr: 8,
        },
        MatmulShape::Tile {
            rows: 4,
            cols: 4,
            loads: XLoads::Direct,
        },
        MatmulShape::Gemm { tm: 8 },
    ];
    let mut matmul = Vec::new();
    let weights = decoder.weights().unwrap();
    for (turn, (site, weight)) in weights.matmul_sites().into_iter().enumerate() {
        for (i, &max_rows) in ROW_BUCKETS.iter().enumerate() {
            matmul.push(MatmulChoice {
                key: MatmulKey {
                    site,
                    format: weight.format,
                    n: weight.rows,
                    k: weight.cols,
                },
                max_rows,
                shape: shapes[(i + turn) % shapes.len()],
                micros: 1.0,
                default_micros: 1.0,
            });
        }
    }
    let c = &decoder.config;
    let variants = AttentionVariant::all();
    let attention: Vec<AttentionChoice> = ROW_BUCKETS
        .iter()
        .enumerate()
        .map(|(i, &max_rows)| AttentionChoice {
            head_dim: c.head_dim,
            group: c.n_heads / c.n_kv_heads,
            max_rows,
            variant: variants[i % variants.len()],
            micros: 1.0,
            default_micros: 1.0,
        })
        .collect();
    KernelChoices::tuned(false, &matmul, &attention, "mixed for the test".into())
}

/// A sample is bitwise the same alone, on the CPU-shaped kernels with its steps run one at
/// a time, and among 16 prompts, in chunks, or preempted, with overlapped steps on kernel
/// variants that change with every batch size (and attention split across pages: it
/// attends more than one page of keys).
#[test]
fn samples_are_the_same_whichever_kernels_serve_them() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let target = request(0, prompt(70, 0), 4, 30);
        decoder.set_choices(KernelChoices::defaults(true));
        let one_at_a_time = EngineConfig {
            overlap: false,
            ..config(128, 256)
        };
        let (alone, _) = run(&decoder, &one_at_a_time, std::slice::from_ref(&target));
        let want = first_prompt(&alone);
        assert_eq!(want.len(), 4);

        decoder.set_choices(mixed_choices(&decoder, &gpu));
        let mut batch = vec![target.clone()];
        batch.extend((1..16).map(|i| request(i, prompt(50 + 2 * i as usize, i), 4, 30)));
        let (out, _) = run(&decoder, &config(1024, 256), &batch);
        assert_eq!(
            first_prompt(&out),
            want,
            "{label}: among 16 prompts, mixed kernels"
        );

        let (out, _) = run(&decoder, &config(1024, 9), &batch[..4]);
        assert_eq!(
            first_prompt(&out),
            want,
            "{label}: in chunks of 9, mixed kernels"
        );

        let (out, stats) = run(&decoder, &config(14, 256), &batch[..3]);
        assert!(stats.preemptions > 0, "{label}: {stats:?}");
        assert_eq!(
            first_prompt(&out),
            want,
            "{label}: preempted, mixed kernels"
        );
    }
}

/// The invariance check on the real model (shorter: a CPU adapter is slow).
#[test]
fn smollm2_samples_are_batch_invariant() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let (decoder, tokenizer) = smollm2(&gpu);
        let ids = |text: &str| tokenizer.encode(text).unwrap();
        let target = request(0, ids("The three primary colors are"), 4, 8);
        let (alone, _) = run(&decoder, &config(64, 256), std::slice::from_ref(&target));
        let want = first_prompt(&alone);
        let batch = vec![
            target,
            request(1, ids("Write a haiku about the sea."), 4, 8),
            request(2, ids("def fibonacci(n):"), 4, 8),
        ];
        // In a batch with room for all (whole prompts, no preemption), and in one that
        // chunks prompts 7 tokens at a time and preempts.
        let (roomy, stats) = run(&decoder, &config(64, 256), &batch);
        assert_eq!(stats.preemptions, 0, "{label}: {stats:?}");
        assert_eq!(first_prompt(&roomy), want, "{label}: in a roomy batch");
        let (out, stats) = run(&decoder, &config(6, 7), &batch);
        assert!(stats.preemptions > 0, "{label}: {stats:?}");
        assert_eq!(first_prompt(&out), want, "{label}: chunked and preempted");
        let distinct: std::collections::HashSet<_> = want.iter().map(|s| &s.1).collect();
        assert_eq!(distinct.len(), 4, "{label}: samples should differ");
    }
}

#[test]
fn bad_requests_are_refused_with_a_reason() {
    let gpu = gpus().remove(0);
    let decoder = tiny_llama(&gpu);
    let mut engine = Engine::new(&decoder, &config(4, 256)).unwrap();
    let err = engine
        .add_request(request(0, vec![1, 999], 1, 4))
        .unwrap_err();
    assert!(err.to_string().contains("vocabulary"), "{err}");
    let err = engine
        .add_request(request(0, prompt(60, 0), 1, 10))
        .unwrap_err();
    assert!(err.to_string().contains("KV blocks"), "{err}");
    let err = engine.add_request(request(0, vec![], 1, 4)).unwrap_err();
    assert!(err.to_string().contains("no tokens"), "{err}");
}

/// Teacher forcing a rollout's samples (as `sprout score` does: one request per prompt with
/// its completions forced) returns exactly their log-probs, bitwise.
#[test]
fn scoring_a_rollout_returns_its_logprobs_bitwise() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let requests: Vec<Request> = (0..3)
            .map(|i| request(i, prompt(19 + 5 * i as usize, i), 4, 10))
            .collect();
        let (rollout, _) = run(&decoder, &config(128, 256), &requests);
        let forced: Vec<Request> = requests
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.forced = rollout
                    .iter()
                    .filter(|s| s.request_index == r.index)
                    .map(|s| s.token_ids.clone())
                    .collect();
                r
            })
            .collect();
        // Small chunks and a small pool too: scoring is batch invariant as well.
        for cfg in [config(128, 256), config(8, 7)] {
            let (scored, stats) = run(&decoder, &cfg, &forced);
            assert_eq!(scored.len(), rollout.len(), "{label}");
            for (a, b) in rollout.iter().zip(&scored) {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(a.token_ids, b.token_ids, "{label}");
                assert_eq!(bits(&a.logprobs), bits(&b.logprobs), "{label}: {stats:?}");
            }
        }
    }
}

/// With top-k 5 every sampling log-prob is the raw log-prob minus the log of the top-5
/// probability mass, and every drawn token is among the 5 most likely.
fn check_top_k(decoder: &Decoder, prompt: Vec<u32>, label: &str) {
    let mut r = request(0, prompt, 4, 8);
    r.params.top_k = 5;
    let (out, _) = run(decoder, &config(64, 256), std::slice::from_ref(&r));
    let vocab = decoder.config.vocab_size;
    for s in &out {
        let ids: Vec<u32> = r.prompt.iter().chain(&s.token_ids).copied().collect();
        let logits = pollster::block_on(sprout::generate::logits(decoder, &ids)).unwrap();
        let pairs = s.logprobs.iter().zip(&s.sampling_logprobs);
        for (i, (&token, (&raw, &sampled))) in s.token_ids.iter().zip(pairs).enumerate() {
            let row = &logits[(r.prompt.len() - 1 + i) * vocab..][..vocab];
            let lp = log_softmax_f64(row);
            let lse = row[0] as f64 - lp[0];
            let mut sorted: Vec<f64> = row.iter().map(|&l| l as f64).collect();
            sorted.sort_by(|a, b| b.total_cmp(a));
            assert!(
                row[token as usize] as f64 >= sorted[4],
                "{label}: token outside top 5"
            );
            let top5 = sorted[..5].iter().map(|l| (l - lse).exp()).sum::<f64>();
            let want = raw as f64 - top5.ln();
            assert!(
                (sampled as f64 - want).abs() < 1e-4,
                "{label}: sampling logprob {sampled}, raw {raw} - ln(top-5 mass) = {want}"
            );
        }
    }
}

#[test]
fn top_k_sampling_logprobs_are_renormalised_raw_logprobs() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        check_top_k(
            &tiny_llama(&gpu),
            prompt(23, 4),
            &format!("tiny-llama on {label}"),
        );
        let (decoder, tokenizer) = smollm2(&gpu);
        let ids = tokenizer.encode("The three primary colors are").unwrap();
        check_top_k(&decoder, ids, &format!("smollm2 on {label}"));
    }
}
