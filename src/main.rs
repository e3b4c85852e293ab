//! The `sprout` command line: a thin layer over the library.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use sprout::gpu::{AdapterSummary, BackendChoice, list_adapters, tune_file};

mod bench_cmd;
mod bench_workload;
mod cli_args;
mod device;
mod generate_cmd;
mod prompts_file;
mod rollout_cmd;
mod score_cmd;
mod tune_cmd;

#[derive(Parser)]
#[command(
    name = "sprout",
    version,
    about = "Portable LLM inference for RL rollouts, on wgpu"
)]
struct Cli {
    /// Graphics backend: auto, vulkan, metal, dx12 or gl.
    #[arg(long, global = true, env = "SPROUT_BACKEND", default_value = "auto")]
    backend: BackendChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter wgpu finds, best first.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Generate one sample from a prompt.
    Generate(generate_cmd::GenerateArgs),
    /// Sample each prompt G times (one shared prompt computation per group, continuous
    /// batching, prefix caching) and write every sample as a JSON line.
    Rollout(rollout_cmd::RolloutArgs),
    /// Add teacher-forced log-probabilities (`scored_logprobs`) to rollout records.
    Score(score_cmd::ScoreArgs),
    /// Run one rollout workload in several batching modes and compare their speed.
    Bench(bench_cmd::BenchArgs),
    /// Time every kernel variant at the model's shapes on this adapter and keep the
    /// fastest (in a tune file every command then uses).
    Tune(tune_cmd::TuneArgs),
    /// Print the default model's path, fetching and caching it first if needed.
    ModelPath,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Devices { json } => devices(cli.backend, json),
        Command::Generate(args) => generate_cmd::run(cli.backend, args),
        Command::Rollout(args) => rollout_cmd::run(cli.backend, args),
        Command::Score(args) => score_cmd::run(cli.backend, args),
        Command::Bench(args) => bench_cmd::run(cli.backend, args),
        Command::Tune(args) => tune_cmd::run(cli.backend, args),
        Command::ModelPath => sprout::model::default_model::path()
            .map(|p| println!("{}", p.display()))
            .map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The message names the problem and what to do; a backtrace would only bury it.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn devices(backend: BackendChoice, json: bool) -> Result<()> {
    let adapters: Vec<AdapterSummary> = pollster::block_on(list_adapters(backend))
        .iter()
        .map(AdapterSummary::of)
        .collect();
    // Each adapter's tune file, when `sprout tune` has written one for it.
    let tuned: Vec<Option<String>> = adapters
        .iter()
        .map(|a| {
            let path = tune_file::path_for(a).ok()?;
            tune_file::read(&path, a).ok()??;
            Some(path.display().to_string())
        })
        .collect();
    if json {
        let list: Vec<serde_json::Value> = adapters
            .iter()
            .zip(&tuned)
            .map(|(a, t)| {
                let mut v = serde_json::to_value(a)?;
                v["tune_file"] = serde_json::json!(t);
                Ok(v)
            })
            .collect::<Result<_>>()?;
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if adapters.is_empty() {
        return Err(sprout::SproutError::NoAdapter(backend).into());
    }
    println!(
        "{:<3} {:<7} {:<40} {:<14} {:<5} {:<9} {:>11} {:>11}  driver",
        "#", "backend", "name", "type", "f16", "subgroups", "max bind", "max buffer"
    );
    for (i, (a, tuned)) in adapters.iter().zip(&tuned).enumerate() {
        println!(
            "{:<3} {:<7} {:<40} {:<14} {:<5} {:<9} {:>11} {:>11}  {} {}",
            i,
            a.backend,
            a.name,
            a.device_type,
            yes_no(a.shader_f16),
            yes_no(a.subgroups),
            mib(a.max_storage_buffer_binding_size),
            mib(a.max_buffer_size),
            a.driver,
            a.driver_info
        );
        match tuned {
            Some(path) => println!("    tuned: {path}"),
            None => println!("    not tuned (sprout tune measures it)"),
        }
    }
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}
