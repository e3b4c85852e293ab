//! `sprout mismatch`: what each rollout format costs a full-precision trainer, with the
//! speed it buys.
//!
//! For each format of `--formats`, on one adapter: a copy of `--model` converted on load
//! (`f32` is the model as stored) rolls out one fixed workload (the same prompts, G, token
//! limit, temperature and seed for every format), timed after an untimed warm-up; then the
//! trainer (`--trainer-model`, by default `--model` as stored) scores exactly the tokens it
//! drew, teacher-forced, and the two lists of log-probs become a row of
//! [`sprout::mismatch::Mismatch`]. Both sides are the models' own temperature-1 log-probs (the
//! records' `logprobs`, what `sprout score` computes); `--temperature` changes which tokens
//! are drawn, not the distributions compared. A floor row ([`floor`]) sets sprout's own f32
//! against transformers' f32 on a fixture's tokens.
//!
//! With `--lora DIR` (LoRA RL: the trainer is base + adapter at full precision, the rollout
//! the quantized base + the same adapter) the adapter is checked against each model it
//! goes on (every format's copy and the trainer, which may be another model) and every
//! rollout and scoring request runs with it; the report names it (name and sha256, as
//! records do). The floor row is measured only when the fixture was made with that very
//! adapter ([`floor::Fixture::mismatch_with`]); else it is left out with the reason.
//!
//! Only one format's copy is on the GPU at a time beside the trainer, and only one engine
//! (with its KV cache) exists at a time.
//!
//! Files: `runs` (the engine work), `workload` (the prompts), `floor`, `report` (Markdown
//! and JSON), `plot`; the arithmetic is the library's, pure ([`sprout::mismatch`]), and so
//! is the check that a trainer which is another model has the same vocabulary
//! ([`sprout::tokenizer::vocabulary`]).

pub mod floor;
mod plot;
pub mod report;
mod runs;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use sprout::formats::WeightFormat;
use sprout::gpu::{BackendChoice, Gpu};
use sprout::mismatch::{DEFAULT_CAP, Mismatch, Sample};
use sprout::model::open::{model_sha256, open_quantized};
use sprout::model::quantize_on_load::{QUANTIZE_FORMATS, quantize_format_names};
use sprout::sched::SamplingParams;
use sprout::tokenizer::vocabulary;

use crate::cli::bootstrap::{self, Kernels, Opened};
use crate::cli::cli_args::{EngineArgs, LoadedModel, LoraArg, parse_weight_format};
use crate::cli::json_out;
use report::{Adapter, Report, Row, Speed, Workload};

#[derive(Args)]
pub struct MismatchArgs {
    /// The full-precision model (a Hugging Face directory, or a float GGUF) that each
    /// format's copy is converted from on load, and the trainer unless --trainer-model.
    #[arg(long)]
    model: PathBuf,
    /// The trainer, when it is another model file than --model (it must have the same
    /// vocabulary); loaded as stored.
    #[arg(long)]
    trainer_model: Option<PathBuf>,
    /// The rollout formats, comma-separated: f32 (--model as stored), f16, bf16, q8_0,
    /// q4_1, q4_0.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = parse_weight_format,
        default_value = "f32,f16,bf16,q8_0,q4_1,q4_0"
    )]
    formats: Vec<WeightFormat>,
    /// A prompts file (JSONL, as `sprout rollout --prompts` reads, without per-line
    /// sampling parameters); default: a built-in set of 4 instructions, rendered with the
    /// model's chat template.
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// Samples per prompt (G).
    #[arg(short = 'n', default_value_t = 8)]
    n: usize,
    /// The most new tokens per sample (a sample also ends at end of sequence).
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature of the rollouts (0 is greedy).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    temperature: f32,
    /// Seed of the rollouts' draws (the same for every format).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The TIS cap C: weights are min(p_train / p_rollout, C); ratios outside [1/C, C]
    /// are counted apart.
    #[arg(long, default_value_t = DEFAULT_CAP)]
    tis_cap: f64,
    /// The floor fixture (made by scripts/mismatch_floor.py); default: the built-in one,
    /// of the exported default model.
    #[arg(long, value_name = "FILE")]
    floor: Option<PathBuf>,
    /// Print everything as one JSON object instead of the Markdown tables.
    #[arg(long)]
    json: bool,
    /// Also draw the CDF of |r| per format and k3_kl by position into this .svg or .png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// With --lora, every format's copy and the trainer run with the adapter.
    #[command(flatten)]
    lora: LoraArg,
    #[command(flatten)]
    engine: EngineArgs,
}

/// `path` loaded onto `gpu`, converted to `format` on load (`None`: as stored), with the
/// LoRA adapter of `lora` (if any) checked against it and set.
fn load(
    gpu: &Arc<Gpu>,
    path: &Path,
    format: Option<WeightFormat>,
    lora: &LoraArg,
) -> Result<Opened> {
    let opened = open_quantized(Some(path), format)?;
    let model = LoadedModel {
        source: opened.source,
        tokenizer: Some(opened.tokenizer),
        chat_template: opened.chat_template,
        info: opened.info,
    };
    let opened = bootstrap::open_on(gpu.clone(), model, Kernels::Tuned)?;
    opened
        .apply_lora(lora)
        .with_context(|| format!("putting the LoRA adapter on {}", path.display()))?;
    Ok(opened)
}

fn check_args(args: &MismatchArgs) -> Result<SamplingParams> {
    if args.n == 0 || args.max_tokens == 0 {
        bail!("-n and --max-tokens must be at least 1");
    }
    if !(args.tis_cap.is_finite() && args.tis_cap > 1.0) {
        bail!("--tis-cap must be a number above 1, not {}", args.tis_cap);
    }
    if args.formats.is_empty() {
        bail!("--formats needs at least one format");
    }
    for (i, f) in args.formats.iter().enumerate() {
        if args.formats[..i].contains(f) {
            bail!("--formats names {f} twice");
        }
        // A rollout format is the model as stored or a format it is quantized to on load
        // (the K-quants, Q5_0 and Q5_1 are read from files, never made).
        if *f != WeightFormat::F32 && !QUANTIZE_FORMATS.contains(f) {
            bail!(
                "--formats {f}: a rollout format is f32 or one weights are quantized to on \
                 load ({})",
                quantize_format_names()
            );
        }
    }
    if let Some(path) = &args.plot {
        plot::extension(path)?;
    }
    let params = SamplingParams {
        temperature: args.temperature,
        seed: args.seed,
        max_tokens: args.max_tokens,
        ..SamplingParams::default()
    };
    params
        .validate()
        .map_err(|e| anyhow::anyhow!(e.message_for(&format!("--{}", e.param))))?;
    Ok(params)
}

pub fn run(backend: BackendChoice, args: MismatchArgs) -> Result<()> {
    let mut params = check_args(&args)?;
    let config = args.engine.config()?;
    let fixture = floor::read(args.floor.as_deref())?;
    let trainer_path = args.trainer_model.clone().unwrap_or(args.model.clone());
    let (model_name, trainer_name) = (
        args.model.display().to_string(),
        trainer_path.display().to_string(),
    );
    let gpu = pollster::block_on(Gpu::open(backend))?;
    let trainer = load(&gpu, &trainer_path, None, &args.lora)
        .with_context(|| format!("loading the trainer {trainer_name}"))?;
    let tokenizer = trainer.tokenizer()?;
    if args.trainer_model.is_some() {
        let rollout = open_quantized(Some(&args.model), None)?;
        vocabulary::check_same(
            &vocabulary::Side {
                name: &model_name,
                tokenizer: &rollout.tokenizer,
                logits: rollout.source.config().vocab_size,
            },
            &vocabulary::Side {
                name: &trainer_name,
                tokenizer,
                logits: trainer.decoder.config.vocab_size,
            },
        )?;
    }
    let trainer_format = trainer.decoder.weight_format();
    if trainer_format != "f32" {
        eprintln!(
            "warning: the trainer {trainer_name} is stored as {trainer_format}, not f32: the \
             rows measure against {trainer_format}"
        );
    }
    let template = trainer.chat_template(tokenizer, None)?;
    let prompts = workload::prompts(args.prompts.as_deref(), tokenizer, template.as_ref())?;
    params.stop_ids = trainer.decoder.config.eos_token_ids.clone();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0) + args.max_tokens;
    if longest > trainer.decoder.max_positions() {
        bail!(
            "a prompt of {} tokens and {} new ones exceed the model's context of {}",
            longest - args.max_tokens,
            args.max_tokens,
            trainer.decoder.max_positions()
        );
    }

    // The rows' labels say that both sides ran with the adapter.
    let with_lora = with_lora(&trainer);
    let mut rows = Vec::new();
    for &format in &args.formats {
        let label = format.name();
        // The f32 row of the trainer's own file is the trainer itself: no second copy.
        let copy = match (format, args.trainer_model.is_some()) {
            (WeightFormat::F32, false) => None,
            (WeightFormat::F32, true) => Some(load(&gpu, &args.model, None, &args.lora)?),
            (f, _) => Some(
                load(&gpu, &args.model, Some(f), &args.lora)
                    .with_context(|| format!("loading {model_name} as {f}"))?,
            ),
        };
        let rollout_model = copy.as_ref().unwrap_or(&trainer);
        let stored = rollout_model.decoder.weight_format();
        if stored != label {
            bail!(
                "--formats {label}: {model_name} loads as {stored}; f32 rollouts need a model \
                 stored in f32 (sprout export --dtype f32 writes one)"
            );
        }
        let rollout = runs::roll_out(rollout_model, &config, &prompts, args.n, &params, label)?;
        drop(copy);
        let groups = runs::groups(&prompts, &rollout.samples);
        let scores = runs::score(&trainer, &config, &groups, label)?;
        let samples: Vec<Sample> = rollout
            .samples
            .iter()
            .map(|s| Sample {
                rollout: s.logprobs.clone(),
                train: scores[s.request_index as usize][s.sample_index as usize].clone(),
            })
            .collect();
        let mismatch = Mismatch::of(&samples, args.tis_cap)
            .ok_or_else(|| anyhow::anyhow!("the {label} rollout drew no tokens"))?;
        let speed = Speed {
            generated_tokens: rollout.generated_tokens,
            wall_s: json_out::finite("wall_s", rollout.wall_s)?,
            tokens_per_s: json_out::finite("tokens_per_s", rollout.tokens_per_s())?,
            speedup_vs_f32: None,
        };
        if !args.json {
            eprintln!(
                "{label:<6} {} tokens in {:.1} s ({:.1} tokens/s); kl {:.3e}, chi2_token {:.3e}",
                speed.generated_tokens,
                speed.wall_s,
                speed.tokens_per_s,
                mismatch.tokens.kl,
                mismatch.tokens.chi2_token
            );
        }
        rows.push(Row {
            format: label.to_string(),
            rollout: format!("sprout {label}{with_lora}"),
            trainer: format!("sprout {trainer_format}{with_lora}"),
            health: mismatch.health(),
            speed: Some(speed),
            mismatch,
        });
    }
    report::set_speedups(&mut rows);

    let trainer_sha =
        model_sha256(&trainer_path).with_context(|| format!("hashing {trainer_name}"))?;
    let lora = trainer.lora();
    let floor_left_out = match fixture.mismatch_with(&trainer_sha, lora.as_ref()) {
        Some(why) => Some(why),
        None => {
            rows.push(floor_row(&trainer, &config, &fixture, args.tis_cap)?);
            None
        }
    };
    let report = Report {
        model: model_name,
        trainer_model: trainer_name,
        trainer_weight_format: trainer_format,
        lora,
        adapter: Adapter {
            backend: trainer.gpu.adapter.backend.clone(),
            name: trainer.gpu.adapter.name.clone(),
            driver: format!(
                "{} {}",
                trainer.gpu.adapter.driver, trainer.gpu.adapter.driver_info
            )
            .trim()
            .to_string(),
        },
        workload: Workload {
            prompts: prompts.len(),
            g: args.n,
            max_tokens: args.max_tokens,
            temperature: args.temperature,
            seed: args.seed,
            tis_cap: args.tis_cap,
        },
        rows,
        floor_left_out,
    };
    if let Some(path) = &args.plot {
        plot::write(path, &report.rows)?;
        if !args.json {
            eprintln!("plot: {}", path.display());
        }
    }
    match args.json {
        true => println!("{}", json_out::to_line(&report)?),
        false => print!("{}", report::markdown(&report)),
    }
    Ok(())
}

/// What a row's label adds for a model running a LoRA adapter.
fn with_lora(opened: &Opened) -> String {
    opened
        .decoder
        .adapter()
        .map_or(String::new(), |a| format!(" + LoRA {}", a.name))
}

/// The floor: the trainer (sprout, f32, with its adapter when the fixture has the same)
/// scores the fixture's tokens, and its log-probs are the "rollout" side against
/// transformers' as the trainer.
fn floor_row(
    trainer: &Opened,
    config: &sprout::engine::EngineConfig,
    fixture: &floor::Fixture,
    cap: f64,
) -> Result<Row> {
    let vocab = trainer.decoder.config.vocab_size;
    let groups: Vec<runs::Group> = fixture
        .samples
        .iter()
        .map(|s| runs::Group {
            prompt: s.prompt_token_ids.clone(),
            completions: vec![s.token_ids.clone()],
        })
        .collect();
    if let Some(bad) = groups
        .iter()
        .flat_map(|g| g.prompt.iter().chain(&g.completions[0]))
        .find(|&&id| id as usize >= vocab)
    {
        bail!(
            "the floor fixture holds token id {bad}, outside the trainer's vocabulary of {vocab}"
        );
    }
    let scores = runs::score(trainer, config, &groups, "floor")?;
    let samples: Vec<Sample> = fixture
        .samples
        .iter()
        .zip(scores)
        .map(|(s, mut scored)| Sample {
            rollout: scored.remove(0),
            train: s.logprobs.clone(),
        })
        .collect();
    let mismatch = Mismatch::of(&samples, cap)
        .ok_or_else(|| anyhow::anyhow!("the floor fixture holds no tokens"))?;
    Ok(Row {
        format: "floor".into(),
        rollout: format!(
            "sprout {}{}",
            trainer.decoder.weight_format(),
            with_lora(trainer)
        ),
        trainer: fixture.describe(),
        health: mismatch.health(),
        speed: None,
        mismatch,
    })
}
