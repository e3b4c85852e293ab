//! `sprout bench`: one rollout workload in several batching modes, side by side.
//!
//! Every mode generates the same samples' worth of tokens (see `workload`) on the
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
//!
//! With `--load-format dummy` the weights are random (see `sprout::model::dummy`) and the
//! prompts random token ids, so a machine without a model file can still be measured.
//!
//! With `--rounds R` the whole list of modes runs R times, one round after another, so that
//! a burst of other work on a shared machine lands on every mode alike; each mode reports
//! its median round (see `median_round`), and every round's tokens/s.
//!
//! With `--plot FILE.svg|png` the results are also drawn as a chart (`plot`).
//!
//! Files: `workload` (the prompts and the samples' lengths), `plot` (the chart).

mod plot;
mod workload;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use sprout::engine::{Engine, EngineConfig, StepTimings, sizes};
use sprout::gpu::BackendChoice;
use sprout::gpu::profile::KernelProfile;
use sprout::model::decoder::Decoder;
use sprout::sched::{FinishReason, Request, RequestId, SamplingParams, SpecStats};
use sprout::spec::SpecMode;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{EngineArgs, LoadArgs, LoraArg, ModelArg};
use crate::cli::json_out;
use crate::cli::warnings;
use plot::{ModeBar, PlotFormat};
use workload::{Lengths, SampleSpec, Workload};

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
    #[command(flatten)]
    lora: LoraArg,
    #[command(flatten)]
    load: LoadArgs,
    /// Prompts (P), cut from a built-in text or --text (random token ids with dummy
    /// weights).
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
    /// Sampling seed (no truncation); also draws dummy weights and prompts.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Sampling temperature (0 is greedy): a low one stands in for a confident policy.
    #[arg(long, default_value_t = 1.0)]
    temperature: f32,
    /// Print the results as JSON to stdout.
    #[arg(long)]
    json: bool,
    /// Also draw the results into this .svg or .png file: tokens/s per mode, and each
    /// mode's step-time split (schedule, encode, GPU, update).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Also time every kernel (each dispatch then runs alone, so the modes run slower; the
    /// shares between kernels are what this shows).
    #[arg(long)]
    profile: bool,
    /// Run every mode this many times, the modes in turn each round, and report each
    /// mode's median round.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// A second epoch: first run the workload once more (untimed, the next seed) and give
    /// its samples to --speculative as drafts, as the last epoch's rollouts would be.
    #[arg(long)]
    second_epoch: bool,
    /// Cut the prompts from this text file instead of the built-in text (e.g. JSON
    /// records or code, to measure speculation on structured text).
    #[arg(long, value_name = "FILE")]
    text: Option<std::path::PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// What one mode measured.
#[derive(Clone, Debug, Serialize)]
pub struct ModeResult {
    pub generated_tokens: usize,
    pub generated_tokens_per_s: f64,
    /// Every round's tokens/s, in the order they ran; the figures above are the median
    /// round's.
    pub rounds_tokens_per_s: Vec<f64>,
    /// Against the sequential mode run beside it (when it ran), median against median.
    pub speedup_vs_sequential: Option<f64>,
    pub prefill_tokens_computed: usize,
    pub prefix_cache_hit_tokens: usize,
    pub peak_kv_blocks: usize,
    pub steps: usize,
    pub preemptions: usize,
    pub wall_s: f64,
    /// Kernel dispatches per step, averaged over the steps that only decode (no prompt
    /// computed): the fixed cost a step pays on a GPU.
    pub dispatches_per_step: Option<f64>,
    /// The host's CPU time to pack, record and submit a step, per dispatch, over the steps
    /// that only decode (on platforms with a per-thread clock): what each dispatch costs
    /// before the GPU sees it.
    pub encode_us_per_dispatch: Option<f64>,
    /// Where the steps' time went, summed over steps.
    pub time: StepTimings,
    /// Time per kernel, with `--profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelProfile>,
    /// The `--speculative` mode, and what its drafts did.
    pub speculative: String,
    pub speculation: SpecSummary,
    /// Every sample's (prompt, tokens): a second epoch's draft corpus.
    #[serde(skip)]
    pub samples: Vec<(Vec<u32>, Vec<u32>)>,
}

/// What speculative decoding did in one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SpecSummary {
    pub steps: usize,
    pub drafts: usize,
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    /// Accepted / drafted tokens (None without drafts).
    pub acceptance_rate: Option<f64>,
    /// Accepted tokens per verified draft.
    pub mean_accepted_length: Option<f64>,
}

impl SpecSummary {
    fn of(s: &SpecStats) -> SpecSummary {
        let per = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
        SpecSummary {
            steps: s.steps,
            drafts: s.drafts,
            drafted_tokens: s.drafted_tokens,
            accepted_tokens: s.accepted_tokens,
            acceptance_rate: per(s.accepted_tokens, s.drafted_tokens),
            mean_accepted_length: per(s.accepted_tokens, s.drafts),
        }
    }
}

pub fn run(backend: BackendChoice, args: BenchArgs) -> Result<()> {
    if args.prompts == 0 || args.n == 0 || args.prompt_tokens == 0 || args.max_tokens == 0 {
        bail!("--prompts, -n, --prompt-tokens and --max-tokens must be at least 1");
    }
    if args.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if !(args.temperature.is_finite() && args.temperature >= 0.0) {
        bail!(
            "--temperature must be a finite number at least 0, not {}",
            args.temperature
        );
    }
    let sampling = Sampling {
        seed: args.seed,
        temperature: args.temperature,
    };
    if args.modes.is_empty() {
        bail!("--modes needs at least one of sequential, static, continuous, sprout");
    }
    if let Some(path) = &args.plot {
        PlotFormat::of(path)?;
    }
    let spec_modes = args.engine.speculative_modes().to_vec();
    let config = args.engine.config_with(SpecMode::Off)?;
    let opened = bootstrap::open(
        backend,
        args.load.open(&args.model, args.seed)?,
        Kernels::Tuned,
    )?;
    opened.apply_lora(&args.lora)?;
    let (decoder, gpu) = (&opened.decoder, &opened.gpu);
    let text_ids = match &opened.tokenizer {
        Some(tokenizer) => match &args.text {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --text {}", path.display()))?;
                let ids = tokenizer.encode(&text)?;
                let need = Workload::text_len(args.prompts, args.prompt_tokens);
                if ids.len() < need {
                    bail!(
                        "--text {} has {} tokens; {} prompts of {} need {need}",
                        path.display(),
                        ids.len(),
                        args.prompts,
                        args.prompt_tokens
                    );
                }
                ids
            }
            None => tokenizer.encode(workload::text())?,
        },
        // No vocabulary (dummy weights): as many random ids as the prompts need.
        None => {
            let c = &decoder.config;
            let len = Workload::text_len(args.prompts, args.prompt_tokens);
            let mut avoid = c.eos_token_ids.clone();
            avoid.extend(c.bos_token_id);
            workload::random_text_ids(len, c.vocab_size, &avoid, args.seed)?
        }
    };
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
    args.engine
        .warn_adjusted(&sizes(gpu, &decoder.config, &config)?.adjusted);
    if args.batch.is_some() && args.modes.contains(&Mode::Static) {
        // The static mode runs its batches as the engine's sequences per step.
        let static_config = mode_config(&config, Mode::Static, batch);
        let adjusted = sizes(gpu, &decoder.config, &static_config)?.adjusted;
        for a in adjusted.iter().filter(|a| a.param == "max_num_seqs") {
            warnings::warn("--batch", a);
        }
    }

    // An untimed pass first: the driver compiles pipelines and sizes its caches on first
    // use (llvmpipe JIT-compiles each shader then), which is start-up, not throughput.
    // Every prompt and the full batch width, 4 new tokens.
    let warm = Workload::new(
        &text_ids,
        args.prompts,
        args.prompt_tokens,
        args.n,
        args.max_tokens.min(4),
        Lengths::Fixed,
    );
    let hidden = ProgressBar::hidden();
    run_mode(
        decoder,
        &config,
        &warm,
        Mode::Sprout,
        batch,
        sampling,
        &eos,
        &hidden,
        &[],
    )?;

    // A second epoch: the samples of a first run (another seed, not timed) to draft from.
    let corpus = match args.second_epoch {
        false => Vec::new(),
        true => {
            let first = run_mode(
                decoder,
                &config,
                &workload,
                Mode::Sprout,
                batch,
                Sampling {
                    seed: args.seed + 1,
                    ..sampling
                },
                &eos,
                &hidden,
                &[],
            )?;
            first.samples
        }
    };

    // Every (mode, speculative mode)'s rounds, in the order given.
    let runs: Vec<(Mode, SpecMode, String)> = args
        .modes
        .iter()
        .flat_map(|&mode| spec_modes.iter().map(move |&spec| (mode, spec)))
        .map(|(mode, spec)| {
            let name = match spec_modes[..] {
                [SpecMode::Off] => mode.name().to_string(),
                _ => format!("{}/{}", mode.name(), spec.name()),
            };
            (mode, spec, name)
        })
        .collect();
    let mut rounds: Vec<Vec<ModeResult>> = vec![Vec::new(); runs.len()];
    for round in 1..=args.rounds {
        for (i, (mode, spec, name)) in runs.iter().enumerate() {
            let (mode, config) = (*mode, args.engine.config_with(*spec)?);
            let label = match args.rounds {
                1 => name.clone(),
                n => format!("{name} {round}/{n}"),
            };
            let bar = progress(&label, workload.tokens());
            if args.profile {
                gpu.start_profiling();
            }
            let mut r = run_mode(
                decoder, &config, &workload, mode, batch, sampling, &eos, &bar, &corpus,
            )?;
            r.kernels = gpu.finish_profiling();
            bar.finish_and_clear();
            if !args.json {
                eprintln!(
                    "{:<14} {:>6} tokens in {:>7.1} s: {:>6.2} tokens/s",
                    label, r.generated_tokens, r.wall_s, r.generated_tokens_per_s
                );
            }
            rounds[i].push(r);
        }
    }
    let mut results: Vec<(String, ModeResult)> = runs
        .iter()
        .zip(rounds)
        .map(|((_, _, name), runs)| (name.clone(), median_round(runs)))
        .collect();
    let sequential = runs
        .iter()
        .zip(&results)
        .find(|((m, s, _), _)| *m == Mode::Sequential && *s == spec_modes[0])
        .map(|(_, (_, r))| r.generated_tokens_per_s);
    for (_, r) in &mut results {
        r.speedup_vs_sequential = sequential.map(|s| r.generated_tokens_per_s / s);
    }

    if let Some(path) = &args.plot {
        let title = format!(
            "sprout bench: {} ({}), {}, {} prompts x {} samples, {}+{} tokens",
            gpu.adapter.name,
            gpu.adapter.backend,
            opened.info.name,
            args.prompts,
            args.n,
            args.prompt_tokens,
            args.max_tokens
        );
        let bars: Vec<ModeBar> = results
            .iter()
            .map(|(mode, r)| ModeBar {
                label: mode,
                tokens_per_s: r.generated_tokens_per_s,
                time: r.time,
            })
            .collect();
        plot::draw(path, &title, &bars)?;
        eprintln!("chart: {}", path.display());
    }
    if args.json {
        let modes: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|(m, r)| Ok((m.clone(), json_out::to_value(r)?)))
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
                "temperature": args.temperature,
                "rounds": args.rounds,
                "second_epoch": args.second_epoch,
                "model_file": opened.info.name,
            },
            "adapter": {
                "backend": gpu.adapter.backend,
                "name": gpu.adapter.name,
                "driver": gpu.adapter.driver,
                "driver_info": gpu.adapter.driver_info,
            },
            "tuning": json_out::to_value(&decoder.tuned_from())?,
            "modes": modes,
        });
        println!("{}", json_out::to_line(&out)?);
    } else {
        println!("{}", opened.describe_kernels());
        print_table(&results);
        for (mode, r) in &results {
            if let Some(profile) = &r.kernels {
                print_profile(mode, profile);
            }
        }
    }
    Ok(())
}

/// The round with the median tokens/s (the lower of the two middle ones for an even
/// count), with every round's tokens/s in the order they ran.
fn median_round(runs: Vec<ModeResult>) -> ModeResult {
    let all: Vec<f64> = runs.iter().map(|r| r.generated_tokens_per_s).collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| all[a].total_cmp(&all[b]));
    let median = order[(runs.len() - 1) / 2];
    let mut r = runs.into_iter().nth(median).expect("at least one round");
    r.rounds_tokens_per_s = all;
    r
}

fn progress(label: &str, tokens: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = format!("{label:<14} {{bar:30}} {{pos}}/{{len}} tokens  {{msg}}");
    ProgressBar::new(tokens as u64)
        .with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}

/// How the bench samples: temperature and seed, no truncation.
#[derive(Clone, Copy)]
struct Sampling {
    seed: u64,
    temperature: f32,
}

/// The requests of one mode: a group per prompt (sprout), or one request per sample.
fn requests(
    workload: &Workload,
    mode: Mode,
    sampling: Sampling,
    eos: &[u32],
) -> Vec<(Request, Vec<SampleSpec>)> {
    let params = |max_tokens: usize| SamplingParams {
        temperature: sampling.temperature,
        seed: sampling.seed,
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
                    cache_salt: None,
                    lora: false,
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
                cache_salt: None,
                lora: false,
            };
            (request, vec![s])
        })
        .collect()
}

/// The engine config a mode runs with: the command's, batched as the mode batches.
fn mode_config(config: &EngineConfig, mode: Mode, batch: usize) -> EngineConfig {
    match mode {
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
    }
}

#[allow(clippy::too_many_arguments)]
fn run_mode(
    decoder: &Decoder,
    config: &EngineConfig,
    workload: &Workload,
    mode: Mode,
    batch: usize,
    sampling: Sampling,
    eos: &[u32],
    bar: &ProgressBar,
    corpus: &[(Vec<u32>, Vec<u32>)],
) -> Result<ModeResult> {
    let config = mode_config(config, mode, batch);
    let mut engine = Engine::new(decoder, &config)?;
    for (prompt, completion) in corpus {
        engine.add_draft_corpus(prompt, completion);
    }
    let mut all = requests(workload, mode, sampling, eos);
    // With `--lora`, every request runs with the adapter.
    for (request, _) in &mut all {
        request.lora = decoder.has_adapter();
    }
    let mut samples = Vec::new();
    // Static batches wait for their longest member; the other modes queue everything.
    let chunk = match mode {
        Mode::Static => batch,
        _ => all.len(),
    };
    let started = Instant::now();
    let mut time = StepTimings::default();
    let (mut decode_steps, mut decode_dispatches) = (0usize, 0usize);
    let mut decode_encode_cpu_s = Some(0.0);
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
            if step.decode_only && step.tokens > 0 {
                decode_steps += 1;
                decode_dispatches += step.dispatches;
                decode_encode_cpu_s = decode_encode_cpu_s
                    .zip(step.encode_cpu_s)
                    .map(|(sum, s)| sum + s);
            }
            bar.inc(step.drawn.len() as u64);
            let mut done: Vec<(u32, u32)> = step
                .finished
                .iter()
                .map(|s| (s.request_index, s.sample_index))
                .collect();
            let mut finished = step.finished;
            for d in &step.drawn {
                let (id, specs, counts) = live.get_mut(&d.request_index).expect("queued");
                let k = d.sample_index as usize;
                counts[k] += 1;
                let reached = specs[k].target == Some(counts[k]);
                // A step with drafts may draw a sample several tokens: the first that
                // reaches the target ends it.
                if reached && !done.contains(&(d.request_index, d.sample_index)) {
                    finished.push(engine.finish_sample(
                        *id,
                        d.sample_index,
                        FinishReason::Length,
                    )?);
                    done.push((d.request_index, d.sample_index));
                }
            }
            samples.extend(
                finished
                    .into_iter()
                    .map(|s| (s.prompt_token_ids, s.token_ids)),
            );
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
        rounds_tokens_per_s: Vec::new(),
        speedup_vs_sequential: None,
        prefill_tokens_computed: s.prefill_tokens_computed,
        prefix_cache_hit_tokens: s.prefix_cache_hit_tokens,
        peak_kv_blocks: s.peak_kv_blocks,
        steps: s.steps,
        preemptions: s.preemptions,
        wall_s,
        dispatches_per_step: (decode_steps > 0)
            .then(|| decode_dispatches as f64 / decode_steps as f64),
        encode_us_per_dispatch: decode_encode_cpu_s
            .filter(|_| decode_dispatches > 0)
            .map(|s| 1e6 * s / decode_dispatches as f64),
        time,
        kernels: None,
        speculative: config.speculative.name().to_string(),
        speculation: SpecSummary::of(engine.spec_stats()),
        samples,
    })
}

fn print_table(results: &[(String, ModeResult)]) {
    let several = results.iter().any(|(_, r)| r.rounds_tokens_per_s.len() > 1);
    if several {
        println!("median round of each mode; every round's tokens/s:");
        for (mode, r) in results {
            let all: Vec<String> = r
                .rounds_tokens_per_s
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect();
            println!("  {:<16} {}", mode, all.join(", "));
        }
    }
    println!(
        "{:<16} {:>9} {:>9} {:>7} {:>8} {:>6} {:>6} {:>8} {:>10} {:>9} {:>7} {:>7}   step time: schedule/encode/gpu/update",
        "mode",
        "tokens",
        "tokens/s",
        "x seq",
        "prefill",
        "peak",
        "steps",
        "wall s",
        "dispatches",
        "enc µs/d",
        "accept",
        "acc len"
    );
    for (mode, r) in results {
        let t = &r.time;
        let total = (t.schedule_s + t.encode_s + t.gpu_s + t.update_s).max(1e-12);
        let pct = |x: f64| 100.0 * x / total;
        let spec = &r.speculation;
        let or_dash = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:<16} {:>9} {:>9.2} {:>7} {:>8} {:>6} {:>6} {:>8.1} {:>10} {:>9} {:>7} {:>7}   {:.1}% / {:.1}% / {:.1}% / {:.1}%",
            mode,
            r.generated_tokens,
            r.generated_tokens_per_s,
            r.speedup_vs_sequential
                .map_or("-".to_string(), |x| format!("{x:.2}")),
            r.prefill_tokens_computed,
            r.peak_kv_blocks,
            r.steps,
            r.wall_s,
            r.dispatches_per_step
                .map_or("-".to_string(), |x| format!("{x:.1}")),
            or_dash(r.encode_us_per_dispatch),
            or_dash(spec.acceptance_rate),
            or_dash(spec.mean_accepted_length),
            pct(t.schedule_s),
            pct(t.encode_s),
            pct(t.gpu_s),
            pct(t.update_s),
        );
    }
}

/// The kernels that took the most time in one mode, with their share of all kernel time.
fn print_profile(mode: &str, profile: &KernelProfile) {
    const SHOWN: usize = 15;
    let total = profile.total_seconds().max(1e-12);
    println!(
        "\n{}: kernel time {:.3} s ({})",
        mode,
        total,
        profile.method.describe()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_at(tokens_per_s: f64) -> ModeResult {
        ModeResult {
            generated_tokens: 100,
            generated_tokens_per_s: tokens_per_s,
            rounds_tokens_per_s: Vec::new(),
            speedup_vs_sequential: None,
            prefill_tokens_computed: 0,
            prefix_cache_hit_tokens: 0,
            peak_kv_blocks: 0,
            steps: 0,
            preemptions: 0,
            wall_s: 100.0 / tokens_per_s,
            dispatches_per_step: None,
            encode_us_per_dispatch: None,
            time: StepTimings::default(),
            kernels: None,
            speculative: "off".into(),
            speculation: SpecSummary::default(),
            samples: Vec::new(),
        }
    }

    #[test]
    fn the_median_round_is_reported_with_every_round_in_order() {
        let r = median_round(vec![run_at(9.0), run_at(4.0), run_at(6.0)]);
        assert_eq!(r.generated_tokens_per_s, 6.0);
        assert_eq!(r.wall_s, 100.0 / 6.0, "the median round's own figures");
        assert_eq!(r.rounds_tokens_per_s, vec![9.0, 4.0, 6.0]);
        let even = median_round(vec![run_at(8.0), run_at(2.0), run_at(5.0), run_at(3.0)]);
        assert_eq!(even.generated_tokens_per_s, 3.0, "the lower middle");
        assert_eq!(
            median_round(vec![run_at(7.0)]).rounds_tokens_per_s,
            vec![7.0]
        );
    }
}
