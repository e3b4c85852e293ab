//! The fixed golden suite `sprout check` runs on each adapter: a few short prompts, their
//! token ids, greedy and seeded sampled rollouts of them (plain and truncated sampling,
//! through the engine as `sprout rollout` runs it), and teacher-forced scoring of fixed
//! continuations (as `sprout score` runs it).
//!
//! Invariant: the suite is a constant. The prompts, parameters, seeds and request indices
//! (which key every draw) never depend on the adapter or the run, so two runs of the same
//! model give the same tokens wherever the kernels compute the same numbers; changing
//! anything here changes the goldens, which are then regenerated and reviewed.

use anyhow::Result;
use sprout::engine::EngineConfig;
use sprout::sched::{FinishedSample, Request, SamplingParams};

use super::goldens::{CaseResult, SampleResult};
use crate::cli::bootstrap::Opened;

/// The prompts: plain text, a chat turn (SmolLM2's special tokens) and code.
pub const PROMPTS: &[&str] = &[
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about rust.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):",
];

/// Continuations scored after each prompt (by prompt index); a prompt with two is one
/// request whose prompt is computed once for both.
const CONTINUATIONS: &[(usize, &str)] = &[
    (0, " Paris, and its largest city is also Paris."),
    (0, " Lyon."),
    (
        1,
        "Rust never sleeps,\nIron turns to orange dust,\nTime eats all metal.<|im_end|>",
    ),
    (
        2,
        "\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
    ),
];

/// New tokens per rollout sample, at most (end-of-sequence may stop one sooner).
const MAX_TOKENS: usize = 16;

/// A rollout case: its name, samples per prompt and sampling parameters.
struct Rollout {
    case: &'static str,
    n: usize,
    params: SamplingParams,
}

fn rollouts(eos: &[u32]) -> Vec<Rollout> {
    let base = SamplingParams {
        max_tokens: MAX_TOKENS,
        stop_ids: eos.to_vec(),
        ..SamplingParams::default()
    };
    vec![
        Rollout {
            case: "greedy",
            n: 1,
            params: SamplingParams {
                temperature: 0.0,
                ..base.clone()
            },
        },
        Rollout {
            case: "sampled",
            n: 2,
            params: SamplingParams {
                temperature: 1.0,
                seed: 7,
                ..base.clone()
            },
        },
        Rollout {
            case: "truncated",
            n: 2,
            params: SamplingParams {
                temperature: 0.7,
                top_k: 40,
                top_p: 0.9,
                min_p: 0.05,
                seed: 11,
                ..base
            },
        },
    ]
}

/// Runs the whole suite on `opened`: the cases `prompts`, `greedy`, `sampled`, `truncated`
/// and `score`, in that order.
pub fn run(opened: &Opened) -> Result<Vec<CaseResult>> {
    let tokenizer = opened.tokenizer()?;
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tokenizer.encode(p))
        .collect::<Result<_, _>>()?;
    let mut cases = vec![CaseResult {
        case: "prompts".into(),
        samples: prompts
            .iter()
            .enumerate()
            .map(|(i, ids)| SampleResult {
                prompt: i as u32,
                sample: 0,
                token_ids: ids.clone(),
                logprobs: Vec::new(),
            })
            .collect(),
    }];

    // Every rollout case in one engine run, batched as a rollout batches them; request
    // index `case * prompts + prompt` keys the draws.
    let config = EngineConfig::default();
    let mut engine = opened.engine(&config)?;
    let specs = rollouts(&opened.decoder.config.eos_token_ids);
    for (c, spec) in specs.iter().enumerate() {
        for (p, prompt) in prompts.iter().enumerate() {
            engine.add_request(Request {
                index: (c * prompts.len() + p) as u32,
                prompt: prompt.clone(),
                n: spec.n,
                params: spec.params.clone(),
                forced: Vec::new(),
                cache_salt: None,
                lora: false,
            })?;
        }
    }
    let finished = pollster::block_on(engine.run_to_completion(|_| {}))?;
    drop(engine);
    for (c, spec) in specs.iter().enumerate() {
        let first = (c * prompts.len()) as u32;
        let mine = finished
            .iter()
            .filter(|s| (first..first + prompts.len() as u32).contains(&s.request_index));
        cases.push(case(spec.case, mine, |s| s.request_index - first));
    }

    cases.push(score(opened, &config, &prompts)?);
    Ok(cases)
}

/// Teacher-forced log-probs of [`CONTINUATIONS`]: request `p` scores prompt `p`'s.
fn score(opened: &Opened, config: &EngineConfig, prompts: &[Vec<u32>]) -> Result<CaseResult> {
    let tokenizer = opened.tokenizer()?;
    let mut engine = opened.engine(config)?;
    for (p, prompt) in prompts.iter().enumerate() {
        let forced: Vec<Vec<u32>> = CONTINUATIONS
            .iter()
            .filter(|(of, _)| *of == p)
            .map(|(_, text)| tokenizer.encode(text))
            .collect::<Result<_, _>>()?;
        let longest = forced.iter().map(Vec::len).max().unwrap_or(1);
        engine.add_request(Request {
            index: p as u32,
            prompt: prompt.clone(),
            n: forced.len(),
            params: SamplingParams {
                max_tokens: longest,
                ..SamplingParams::default()
            },
            forced,
            cache_salt: None,
            lora: false,
        })?;
    }
    let finished = pollster::block_on(engine.run_to_completion(|_| {}))?;
    Ok(case("score", finished.iter(), |s| s.request_index))
}

/// The case `name` of `samples`, sorted by (prompt, sample); `prompt` names a sample's
/// prompt.
fn case<'a>(
    name: &str,
    samples: impl Iterator<Item = &'a FinishedSample>,
    prompt: impl Fn(&FinishedSample) -> u32,
) -> CaseResult {
    let mut samples: Vec<SampleResult> = samples
        .map(|s| SampleResult {
            prompt: prompt(s),
            sample: s.sample_index,
            token_ids: s.token_ids.clone(),
            logprobs: s.logprobs.clone(),
        })
        .collect();
    samples.sort_by_key(|s| (s.prompt, s.sample));
    CaseResult {
        case: name.into(),
        samples,
    }
}
