//! The two kinds of engine work a mismatch row needs: a timed rollout of the workload with
//! one format's copy of the model, and the trainer's teacher-forced scoring of exactly the
//! tokens it drew.
//!
//! Every request runs with the model's LoRA adapter when one is set (`--lora`), on both
//! sides. Both go through the engine as every command does, so the rollout's `logprobs` and the
//! scores are computed the same way (the kernels give a row the same result whatever
//! shares its batch): a model scored against itself gives back its rollout's log-probs bit
//! for bit, and a row's mismatch is the weights' alone.

use anyhow::{Result, bail};
use indicatif::ProgressBar;
use sprout::engine::EngineConfig;
use sprout::sched::{FinishedSample, Request, SamplingParams};
use std::time::Instant;

use crate::cli::bootstrap::Opened;
use crate::cli::progress;

/// A timed rollout: every sample, ordered by (prompt, sample), and its speed.
pub struct Rollout {
    pub samples: Vec<FinishedSample>,
    pub generated_tokens: usize,
    pub wall_s: f64,
}

impl Rollout {
    pub fn tokens_per_s(&self) -> f64 {
        self.generated_tokens as f64 / self.wall_s
    }
}

/// One group of completions to score: the prompt and its samples' tokens.
pub struct Group {
    pub prompt: Vec<u32>,
    pub completions: Vec<Vec<u32>>,
}

/// The requests of a rollout on `opened`: each runs with the model's LoRA adapter when it
/// has one.
fn requests(
    opened: &Opened,
    prompts: &[Vec<u32>],
    n: usize,
    params: &SamplingParams,
) -> Vec<Request> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| Request {
            index: i as u32,
            prompt: prompt.clone(),
            n,
            params: params.clone(),
            forced: Vec::new(),
            cache_salt: None,
            lora: opened.decoder.has_adapter(),
        })
        .collect()
}

fn run(
    opened: &Opened,
    config: &EngineConfig,
    requests: Vec<Request>,
    bar_template: Option<&str>,
) -> Result<(Vec<FinishedSample>, usize)> {
    let total = requests.iter().map(|r| r.n).sum::<usize>();
    let mut engine = opened.engine(config)?;
    for request in requests {
        engine.add_request(request)?;
    }
    let bar = match bar_template {
        Some(template) => progress::bar(template, total as u64),
        None => ProgressBar::hidden(),
    };
    let samples = pollster::block_on(engine.run_to_completion(|step| {
        bar.inc(step.finished.len() as u64);
    }))?;
    bar.finish_and_clear();
    Ok((samples, engine.stats().generated_tokens))
}

/// `n` samples of each prompt with `params`, on `opened`: first an untimed pass of at most
/// 4 new tokens (the driver compiles pipelines and sizes its caches on first use, which is
/// start-up, not throughput, as in `sprout bench`), then the timed rollout.
pub fn roll_out(
    opened: &Opened,
    config: &EngineConfig,
    prompts: &[Vec<u32>],
    n: usize,
    params: &SamplingParams,
    label: &str,
) -> Result<Rollout> {
    let warm = SamplingParams {
        max_tokens: params.max_tokens.min(4),
        ..params.clone()
    };
    run(opened, config, requests(opened, prompts, n, &warm), None)?;
    let template = format!("{label:<6} rollout {{bar:30}} {{pos}}/{{len}} samples");
    let started = Instant::now();
    let (samples, generated_tokens) = run(
        opened,
        config,
        requests(opened, prompts, n, params),
        Some(&template),
    )?;
    let wall_s = started.elapsed().as_secs_f64();
    if samples.len() != prompts.len() * n {
        bail!(
            "the {label} rollout returned {} of {} samples",
            samples.len(),
            prompts.len() * n
        );
    }
    Ok(Rollout {
        samples,
        generated_tokens,
        wall_s,
    })
}

/// The trainer's log-probability (temperature 1) of every token of every completion, in
/// the order given: per group, per completion, per token; with the trainer's LoRA adapter
/// when it has one.
pub fn score(
    trainer: &Opened,
    config: &EngineConfig,
    groups: &[Group],
    label: &str,
) -> Result<Vec<Vec<Vec<f32>>>> {
    let requests: Vec<Request> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| Request {
            index: i as u32,
            prompt: g.prompt.clone(),
            n: g.completions.len(),
            params: SamplingParams {
                temperature: 1.0,
                max_tokens: g.completions.iter().map(Vec::len).max().unwrap_or(1).max(1),
                stop_ids: Vec::new(),
                ..SamplingParams::default()
            },
            forced: g.completions.clone(),
            cache_salt: None,
            lora: trainer.decoder.has_adapter(),
        })
        .collect();
    let template = format!("{label:<6} scoring {{bar:30}} {{pos}}/{{len}} samples");
    let (samples, _) = run(trainer, config, requests, Some(&template))?;
    let mut out: Vec<Vec<Vec<f32>>> = groups
        .iter()
        .map(|g| vec![Vec::new(); g.completions.len()])
        .collect();
    for s in samples {
        let (g, k) = (s.request_index as usize, s.sample_index as usize);
        if s.logprobs.len() != groups[g].completions[k].len() {
            bail!(
                "scoring returned {} log-probs for a completion of {} tokens",
                s.logprobs.len(),
                groups[g].completions[k].len()
            );
        }
        out[g][k] = s.logprobs;
    }
    Ok(out)
}

/// The rollout's samples as groups to score, one per prompt.
pub fn groups(prompts: &[Vec<u32>], samples: &[FinishedSample]) -> Vec<Group> {
    let mut groups: Vec<Group> = prompts
        .iter()
        .map(|p| Group {
            prompt: p.clone(),
            completions: Vec::new(),
        })
        .collect();
    for s in samples {
        groups[s.request_index as usize]
            .completions
            .push(s.token_ids.clone());
    }
    groups
}
