//! Per-request options end to end, on every adapter: top log-probs are the model's most
//! likely tokens with their log-probs (and change no draw), `min_tokens` keeps stop tokens
//! out of the first tokens while `logprobs` stay the model's and `sampling_logprobs` are
//! renormalised without them, and stop strings cut a sample's text where they begin and
//! its tokens to those that reach that point.

mod common;

use common::{gpus, log_softmax_f64 as log_softmax, smollm2, tiny_llama};
use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::model::decoder::Decoder;
use sprout::sched::{FinishReason, FinishedSample, Request, SamplingParams};
use sprout::tokenizer::Tokenizer;

fn request(prompt: Vec<u32>, n: usize, params: SamplingParams) -> Request {
    Request {
        index: 0,
        prompt,
        n,
        params,
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }
}

fn params(temperature: f32, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: 9,
        max_tokens,
        ..SamplingParams::default()
    }
}

fn run(decoder: &Decoder, tokenizer: Option<&Tokenizer>, r: &Request) -> Vec<FinishedSample> {
    let config = EngineConfig {
        kv: KvSize::Blocks(64),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(decoder, &config).unwrap();
    if let Some(t) = tokenizer {
        engine = engine.with_tokenizer(t);
    }
    engine.add_request(r.clone()).unwrap();
    pollster::block_on(engine.run_to_completion(|_| {})).unwrap()
}

/// The model's logits after `prompt` and each of `tokens` but the last, one row each.
fn rows(decoder: &Decoder, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let ids: Vec<u32> = prompt.iter().chain(tokens).copied().collect();
    let vocab = decoder.config.vocab_size;
    let logits = pollster::block_on(sprout::generate::logits(decoder, &ids)).unwrap();
    (0..tokens.len())
        .map(|i| logits[(prompt.len() - 1 + i) * vocab..][..vocab].to_vec())
        .collect()
}

fn prompt(len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + (i * 11) % 300).collect()
}

fn check_top_logprobs(decoder: &Decoder, prompt: Vec<u32>, label: &str) {
    let mut p = params(1.0, 6);
    p.top_logprobs = 5;
    let with = run(decoder, None, &request(prompt.clone(), 3, p.clone()));
    p.top_logprobs = 0;
    let without = run(decoder, None, &request(prompt.clone(), 3, p));
    for (s, plain) in with.iter().zip(&without) {
        // Asking for alternatives changes no draw and no log-prob.
        assert_eq!(s.token_ids, plain.token_ids, "{label}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&s.logprobs), bits(&plain.logprobs), "{label}");
        assert!(plain.top_logprobs.is_empty(), "{label}");
        assert_eq!(s.top_logprobs.len(), s.token_ids.len(), "{label}");
        for (i, row) in rows(decoder, &prompt, &s.token_ids).iter().enumerate() {
            let want = log_softmax(row);
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            let top = &s.top_logprobs[i];
            let ids: Vec<u32> = top.iter().map(|t| t.token).collect();
            let want_ids: Vec<u32> = order[..5].iter().map(|&c| c as u32).collect();
            assert_eq!(ids, want_ids, "{label}: position {i}");
            for t in top {
                let w = want[t.token as usize];
                assert!(
                    (t.logprob as f64 - w).abs() < 1e-4,
                    "{label}: position {i} token {}: {} against {w}",
                    t.token,
                    t.logprob
                );
                if t.token == s.token_ids[i] {
                    assert_eq!(t.logprob.to_bits(), s.logprobs[i].to_bits(), "{label}");
                }
            }
        }
    }
}

#[test]
fn top_logprobs_are_the_models_most_likely_tokens() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        check_top_logprobs(
            &tiny_llama(&gpu),
            prompt(19),
            &format!("tiny-llama on {label}"),
        );
        let (decoder, tokenizer) = smollm2(&gpu);
        let ids = tokenizer.encode("The capital of France is").unwrap();
        check_top_logprobs(&decoder, ids, &format!("smollm2 on {label}"));
    }
}

#[test]
fn min_tokens_keeps_stop_tokens_out_and_renormalises_without_them() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let decoder = tiny_llama(&gpu);
        let prompt = prompt(17);
        // The greedy first token becomes the stop token: without min_tokens the greedy
        // sample stops at once.
        let greedy = run(&decoder, None, &request(prompt.clone(), 1, params(0.0, 8)));
        let stop = greedy[0].token_ids[0];
        let mut p = params(0.0, 8);
        p.stop_ids = vec![stop];
        let stopped = run(&decoder, None, &request(prompt.clone(), 1, p.clone()));
        assert_eq!(stopped[0].token_ids, [stop], "{label}");
        assert_eq!(stopped[0].finish_reason, FinishReason::Stop, "{label}");
        p.min_tokens = 4;
        let held = run(&decoder, None, &request(prompt.clone(), 1, p));
        let held = &held[0];
        assert!(held.token_ids.len() > 4, "{label}: {:?}", held.token_ids);
        assert!(!held.token_ids[..4].contains(&stop), "{label}");
        // Greedy over the rest: the first token is the second most likely, and its
        // log-prob is still the model's own.
        let first = rows(&decoder, &prompt, &held.token_ids[..1]).remove(0);
        let want = log_softmax(&first);
        let mut order: Vec<usize> = (0..first.len()).collect();
        order.sort_by(|&a, &b| first[b].total_cmp(&first[a]).then(a.cmp(&b)));
        assert_eq!(order[0] as u32, stop, "{label}");
        assert_eq!(held.token_ids[0], order[1] as u32, "{label}");
        assert!(
            (held.logprobs[0] as f64 - want[order[1]]).abs() < 1e-4,
            "{label}"
        );

        // Sampled at temperature 1: before min_tokens each sampling log-prob is the raw
        // one renormalised without the stop token; after it, the raw one.
        let mut p = params(1.0, 8);
        p.stop_ids = vec![stop];
        p.min_tokens = 4;
        for s in run(&decoder, None, &request(prompt.clone(), 4, p)) {
            assert!(!s.token_ids[..4].contains(&stop), "{label}");
            for (i, row) in rows(&decoder, &prompt, &s.token_ids).iter().enumerate() {
                let lp = log_softmax(row);
                let raw = lp[s.token_ids[i] as usize];
                assert!((s.logprobs[i] as f64 - raw).abs() < 1e-4, "{label}");
                let want = match i < 4 {
                    true => raw - (1.0 - lp[stop as usize].exp()).ln(),
                    false => raw,
                };
                let got = s.sampling_logprobs[i] as f64;
                assert!(
                    (got - want).abs() < 1e-4,
                    "{label}: position {i}: sampling log-prob {got}, want {want}"
                );
            }
        }
    }
}

/// The expected cut, by a plain scan: the text before the first match, and the fewest
/// tokens whose text reaches it.
fn expected_cut(tokenizer: &Tokenizer, tokens: &[u32], stop: &str) -> (String, usize) {
    let text = tokenizer.decode_with(tokens, true).unwrap();
    let start = text.find(stop).expect("the stop string is in the text");
    let keep = (0..=tokens.len())
        .find(|&j| tokenizer.decode_with(&tokens[..j], true).unwrap().len() >= start)
        .unwrap();
    (text[..start].to_string(), keep)
}

#[test]
fn stop_strings_cut_text_and_tokens() {
    for gpu in gpus() {
        let label = gpu.adapter.label();
        let (decoder, tokenizer) = smollm2(&gpu);
        let ids = tokenizer.encode("The three primary colors are").unwrap();
        let full = run(&decoder, None, &request(ids.clone(), 1, params(0.0, 16)));
        let tokens = &full[0].token_ids;
        assert_eq!(tokens.len(), 16, "{label}: {tokens:?}");
        let text_of = |range: std::ops::Range<usize>| {
            let a = tokenizer.decode_with(&tokens[..range.start], true).unwrap();
            let b = tokenizer.decode_with(&tokens[..range.end], true).unwrap();
            b[a.len()..].to_string()
        };
        // One stop string on a token boundary, one beginning inside a token.
        let boundary = text_of(6..8);
        let inside: String = {
            let i = (4..14)
                .find(|&i| text_of(i..i + 1).trim().chars().count() >= 3)
                .expect("a token of 3 or more characters");
            let t = text_of(i..i + 2);
            let from = t.char_indices().nth(1).map(|(at, _)| at).unwrap();
            t[from..].to_string()
        };
        for stop in [boundary, inside] {
            let (want_text, want_keep) = expected_cut(&tokenizer, tokens, &stop);
            let mut p = params(0.0, 16);
            p.stop = vec!["never appears \u{1F331}".into(), stop.clone()];
            let out = run(
                &decoder,
                Some(&tokenizer),
                &request(ids.clone(), 1, p.clone()),
            );
            let s = &out[0];
            let m = s.stopped_by.as_ref().expect("a stop string ended it");
            assert_eq!(m.stop, stop, "{label}");
            assert_eq!(m.text, want_text, "{label}: stop {stop:?}");
            assert_eq!(s.token_ids, tokens[..want_keep], "{label}: stop {stop:?}");
            assert_eq!(s.logprobs, full[0].logprobs[..want_keep], "{label}");
            assert_eq!(s.finish_reason, FinishReason::Stop, "{label}");
            let kept = tokenizer.decode_with(&s.token_ids, true).unwrap();
            assert!(kept.starts_with(&m.text), "{label}: {kept:?}");

            // Without the tokenizer the engine refuses stop strings, naming them.
            let config = EngineConfig::default();
            let mut engine = Engine::new(&decoder, &config).unwrap();
            let err = engine.add_request(request(ids.clone(), 1, p)).unwrap_err();
            assert!(err.to_string().contains("stop strings"), "{err}");
        }
    }
}
