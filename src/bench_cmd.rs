//! `sprout bench`: one rollout workload in several batching modes, side by side.
//!
//! Every mode generates the same samples' worth of tokens (see `bench_workload`) on the
//! same engine and KV budget; only how the work is batched differs:
//! - `sequential`: one sample at a time (one sequence per step, each sample its own
//!   request computing its own prompt), the way a plain generate loop runs.
//! - `static`: fixed batches of `--batch` samples, each batch run until its longest sample
//!   ends before the next starts; no prefix sharing.
//! - `continuous`: every sample its own request, joining and leaving the batch every step;
//!   prefix caching off, so each computes its prompt.
//! - `sprout`: each prompt one group of G samples sharing its prompt blocks, continuous
//!   batching and prefix caching on.
//!
//! Samples with a target length are ended by the bench when they reach it (end of
//! sequence is ignored), so the modes' token counts match exactly.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use sprout::engine::{Engine, EngineConfig, StepTimings};
use sprout::gpu::profile::KernelProfile;
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;
use sprout::sched::{FinishReason, Request, RequestId, SamplingParams};

use crate::bench_workload::{Lengths, SampleSpec, Workload};
use crate::cli_args::{EngineArgs, ModelArg};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Sequential,
    Static,
    Continuous,
    Sprout,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Static => "static",
            Mode::Continuous => "continuous",
            Mode::Sprout => "sprout",
        }
    }
}

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Prompts (P), cut from a built-in text.
    #[arg(long, default_value_t = 4)]
    prompts: usize,
    /// Samples per prompt (G).
    #[arg(short = 'n', default_value_t = 8)]
    n: usize,
    /// Tokens per prompt (L).
    #[arg(long, default_value_t = 64)]
    prompt_tokens: usize,
    /// New tokens per sample (N): exactly, or at most.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Output lengths: exactly N (fixed), until end of sequence capped at N (natural), or
    /// heavy-tailed capped at N, spanning 16x (heavy-tail).
    #[arg(long, value_enum, default_value_t = Lengths::Fixed)]
    lengths: Lengths,
    /// The modes to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "sequential,static,continuous,sprout"
    )]
    modes: Vec<Mode>,
    /// Samples per batch in the static mode (default: G).
    #[arg(long)]
    batch: Option<usize>,
    /// Sampling seed (temperature 1, no truncation).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the results as JSON to stdout.
    #[arg(long)]
    json: bool,
    /// Also time every kernel (each dispatch then runs alone, so the modes run slower; the
    /// shares between kernels are what this shows).
    #[arg(long)]
    profile: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

/// What one mode measured.
#[derive(Clone, Debug, Serialize)]
pub struct ModeResult {
    pub generated_tokens: usize,
    pub generated_tokens_per_s: f64,
    /// Against the sequential mode run beside it (when it ran).
    pub speedup_vs_sequential: Option<f64>,
    pub prefill_tokens_computed: usize,
    pub prefix_cache_hit_tokens: usize,
    pub peak_kv_blocks: usize,
    pub steps: usize,
    pub preemptions: usize,
    pub wall_s: f64,
    /// Where the steps' time went, summed over steps.
    pub time: StepTimings,
    /// Time per kernel, with `--profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelProfile>,
}

pub fn run(backend: BackendChoice, args: BenchArgs) -> Result<()> {
    if args.prompts == 0 || args.n == 0 || args.prompt_tokens == 0 || args.max_tokens == 0 {
        bail!("--prompts, -n, --prompt-tokens and --max-tokens must be at least 1");
    }
    if args.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    if args.modes.is_empty() {
        bail!("--modes needs at least one of sequential, static, continuous, sprout");
    }
    let config = args.engine.config()?;
    let opened = sprout::model::open::open(args.model.model.as_deref())?;
    let mut source = opened.source;
    let tokenizer = opened.tokenizer;
    let gpu = pollster::block_on(Gpu::open(backend))?;
    let decoder = crate::generate_cmd::load(&gpu, source.as_mut())?;
    let text_ids = tokenizer.encode(crate::bench_workload::text())?;
    let workload = Workload::new(
        &text_ids,
        args.prompts,
        args.prompt_tokens,
        args.n,
        args.max_tokens,
        args.lengths,
    );
    let longest = args.prompt_tokens + args.max_tokens;
    if longest > decoder.max_positions() {
        bail!(
            "a prompt of {} tokens and {} new ones exceed the model's context of {}",
            args.prompt_tokens,
            args.max_tokens,
            decoder.max_positions()
        );
    }
    let batch = args.batch.unwrap_or(args.n);
    let eos = decoder.config.eos_token_ids.clone();

    let mut results: Vec<(Mode, ModeResult)> = Vec::new();
    for &mode in &args.modes {
        let bar = progress(mode, workload.tokens());
        if args.profile {
            gpu.start_profiling();
        }
        let mut r = run_mode(
            &decoder, &config, &workload, mode, batch, args.seed, &eos, &bar,
        )?;
        r.kernels = gpu.finish_profiling();
        bar.finish_and_clear();
        if !args.json {
            eprintln!(
                "{:<10} {:>6} tokens in {:>7.1} s: {:>6.2} tokens/s",
                mode.name(),
                r.generated_tokens,
                r.wall_s,
                r.generated_tokens_per_s
            );
        }
        results.push((mode, r));
    }
    let sequential = results
        .iter()
        .find(|(m, _)| *m == Mode::Sequential)
        .map(|(_, r)| r.generated_tokens_per_s);
    for (_, r) in &mut results {
        r.speedup_vs_sequential = sequential.map(|s| r.generated_tokens_per_s / s);
    }

    if args.json {
        let modes: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|(m, r)| Ok((m.name().to_string(), serde_json::to_value(r)?)))
            .collect::<Result<_>>()?;
        let out = json!({
            "workload": {
                "prompts": args.prompts,
                "g": args.n,
                "prompt_tokens": args.prompt_tokens,
                "max_tokens": args.max_tokens,
                "lengths": args.lengths,
                "static_batch": batch,
                "seed": args.seed,
                "model_file": opened.info.name,
            },
            "adapter": {
                "backend": gpu.adapter.backend,
                "name": gpu.adapter.name,
                "driver": gpu.adapter.driver,
            },
            "modes": modes,
        });
        println!("{}", serde_json::to_string(&out)?);
    } else {
        print_table(&results);
        for (mode, r) in &results {
            if let Some(profile) = &r.kernels {
                print_profile(*mode, profile);
            }
        }
    }
    Ok(())
}

fn progress(mode: Mode, tokens: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = format!(
        "{:<10} {{bar:30}} {{pos}}/{{len}} tokens  {{msg}}",
        mode.name()
    );
    ProgressBar::new(tokens as u64)
        .with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}

/// The requests of one mode: a group per prompt (sprout), or one request per sample.
fn requests(
    workload: &Workload,
    mode: Mode,
    seed: u64,
    eos: &[u32],
) -> Vec<(Request, Vec<SampleSpec>)> {
    let params = |max_tokens: usize| SamplingParams {
        temperature: 1.0,
        seed,
        max_tokens,
        // Targets are enforced by the bench; natural lengths stop at end of sequence.
        stop_ids: match workload.lengths {
            Lengths::Natural => eos.to_vec(),
            _ => Vec::new(),
        },
        ..SamplingParams::default()
    };
    let n = workload.max_tokens;
    if mode == Mode::Sprout {
        return workload
            .prompts
            .iter()
            .enumerate()
            .map(|(p, prompt)| {
                let specs: Vec<SampleSpec> = workload.samples().filter(|s| s.prompt == p).collect();
                let request = Request {
                    index: p as u32,
                    prompt: prompt.clone(),
                    n: workload.g,
                    params: params(n),
                    forced: Vec::new(),
                };
                (request, specs)
            })
            .collect();
    }
    workload
        .samples()
        .enumerate()
        .map(|(i, s)| {
            let request = Request {
                index: i as u32,
                prompt: workload.prompts[s.prompt].clone(),
                n: 1,
                params: params(s.target.unwrap_or(n)),
                forced: Vec::new(),
            };
            (request, vec![s])
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn run_mode(
    decoder: &Decoder,
    config: &EngineConfig,
    workload: &Workload,
    mode: Mode,
    batch: usize,
    seed: u64,
    eos: &[u32],
    bar: &ProgressBar,
) -> Result<ModeResult> {
    let config = match mode {
        Mode::Sequential => EngineConfig {
            max_num_seqs: 1,
            prefix_caching: false,
            ..config.clone()
        },
        Mode::Static => EngineConfig {
            max_num_seqs: batch,
            prefix_caching: false,
            ..config.clone()
        },
        Mode::Continuous => EngineConfig {
            prefix_caching: false,
            ..config.clone()
        },
        Mode::Sprout => config.clone(),
    };
    let mut engine = Engine::new(decoder, &config)?;
    let all = requests(workload, mode, seed, eos);
    // Static batches wait for their longest member; the other modes queue everything.
    let chunk = match mode {
        Mode::Static => batch,
        _ => all.len(),
    };
    let started = Instant::now();
    let mut time = StepTimings::default();
    for wave in all.chunks(chunk) {
        // Per request: its samples' targets and tokens so far.
        let mut live: HashMap<u32, (RequestId, &[SampleSpec], Vec<usize>)> = HashMap::new();
        for (request, specs) in wave {
            let id = engine.add_request(request.clone())?;
            live.insert(request.index, (id, specs, vec![0; request.n]));
        }
        while engine.has_work() {
            let step = pollster::block_on(engine.step())?;
            time += step.timings;
            bar.inc(step.drawn.len() as u64);
            let done: Vec<(u32, u32)> = step
                .finished
                .iter()
                .map(|s| (s.request_index, s.sample_index))
                .collect();
            for d in &step.drawn {
                let (id, specs, counts) = live.get_mut(&d.request_index).expect("queued");
                let k = d.sample_index as usize;
                counts[k] += 1;
                let reached = specs[k].target == Some(counts[k]);
                if reached && !done.contains(&(d.request_index, d.sample_index)) {
                    engine.finish_sample(*id, d.sample_index, FinishReason::Length)?;
                }
            }
            let s = engine.stats();
            let rate = s.generated_tokens as f64 / started.elapsed().as_secs_f64();
            bar.set_message(format!("{rate:.1} tokens/s, {} steps", s.steps));
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let s = engine.stats();
    Ok(ModeResult {
        generated_tokens: s.generated_tokens,
        generated_tokens_per_s: s.generated_tokens as f64 / wall_s,
        speedup_vs_sequential: None,
        prefill_tokens_computed: s.prefill_tokens_computed,
        prefix_cache_hit_tokens: s.prefix_cache_hit_tokens,
        peak_kv_blocks: s.peak_kv_blocks,
        steps: s.steps,
        preemptions: s.preemptions,
        wall_s,
        time,
        kernels: None,
    })
}

fn print_table(results: &[(Mode, ModeResult)]) {
    println!(
        "{:<10} {:>9} {:>9} {:>7} {:>8} {:>6} {:>6} {:>8}   step time: schedule/encode/gpu/update",
        "mode", "tokens", "tokens/s", "x seq", "prefill", "peak", "steps", "wall s"
    );
    for (mode, r) in results {
        let t = &r.time;
        let total = (t.schedule_s + t.encode_s + t.gpu_s + t.update_s).max(1e-12);
        let pct = |x: f64| 100.0 * x / total;
        println!(
            "{:<10} {:>9} {:>9.2} {:>7} {:>8} {:>6} {:>6} {:>8.1}   {:.1}% / {:.1}% / {:.1}% / {:.1}%",
            mode.name(),
            r.generated_tokens,
            r.generated_tokens_per_s,
            r.speedup_vs_sequential
                .map_or("-".to_string(), |x| format!("{x:.2}")),
            r.prefill_tokens_computed,
            r.peak_kv_blocks,
            r.steps,
            r.wall_s,
            pct(t.schedule_s),
            pct(t.encode_s),
            pct(t.gpu_s),
            pct(t.update_s),
        );
    }
}

/// The kernels that took the most time in one mode, with their share of all kernel time.
fn print_profile(mode: Mode, profile: &KernelProfile) {
    const SHOWN: usize = 15;
    let total = profile.total_seconds().max(1e-12);
    println!(
        "\n{}: kernel time {:.1} s (each dispatch run alone)",
        mode.name(),
        total
    );
    println!(
        "{:<40} {:>8} {:>10} {:>12} {:>7}",
        "kernel", "calls", "total s", "ms per call", "share"
    );
    let rows = profile.by_time();
    for (name, t) in rows.iter().take(SHOWN) {
        println!(
            "{:<40} {:>8} {:>10.2} {:>12.3} {:>6.1}%",
            name,
            t.calls,
            t.seconds,
            1e3 * t.seconds / t.calls.max(1) as f64,
            100.0 * t.seconds / total
        );
    }
    if rows.len() > SHOWN {
        let rest: f64 = rows[SHOWN..].iter().map(|(_, t)| t.seconds).sum();
        println!(
            "{:<40} {:>8} {:>10.2} {:>12} {:>6.1}%",
            format!("({} more)", rows.len() - SHOWN),
            "",
            rest,
            "",
            100.0 * rest / total
        );
    }
}
