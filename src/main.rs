//! The `sprout` command line: a thin layer over the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sprout::gpu::BackendChoice;

mod cli;

use cli::{
    bench, check, devices_cmd, export_cmd, generate_cmd, mismatch, rollout_cmd, score_cmd, serve,
    tune_cmd,
};

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
    /// Serve the model over HTTP with OpenAI's completions API: every client's requests
    /// join one continuous batch.
    Serve(serve::ServeArgs),
    /// Measure, per rollout format (f32, f16, bf16, q8_0, q4_1, q4_0), how far its rollouts'
    /// log-probs are from a full-precision trainer's on the same tokens (KL, chi-square, TIS
    /// weights, sequence ESS, by token probability and position), and the speed it buys.
    Mismatch(mismatch::MismatchArgs),
    /// Run one rollout workload in several batching modes and compare their speed.
    Bench(bench::BenchArgs),
    /// Time every kernel variant at the model's shapes on this adapter and keep the
    /// fastest (in a tune file every command then uses).
    Tune(tune_cmd::TuneArgs),
    /// Run a fixed suite (rollouts, scoring, kernel self-checks) on every adapter against
    /// built-in goldens and across adapters; exit 1 on a regression.
    ///
    /// On each adapter: greedy, seeded and truncated-sampling rollouts of a few short prompts
    /// (16 new tokens), teacher-forced scoring of fixed continuations, and q4_1 matmul,
    /// attention and sampling kernels against their CPU references. Token ids must equal
    /// the goldens' (and the first adapter's) exactly; log-probs must agree within 1e-3
    /// (absolute), kernel outputs within 1e-4 of the reference. The goldens are the default
    /// model's; with --model the first adapter is the reference and there are no goldens.
    Check(check::CheckArgs),
    /// Write the model as a Hugging Face directory (model.safetensors in f32 or bf16,
    /// config.json, tokenizer.json, tokenizer_config.json with the chat template,
    /// generation_config.json) that transformers loads.
    Export(export_cmd::ExportArgs),
    /// Print a named model's path (default: the default model), fetching and caching it
    /// first if needed. An unknown name lists the known ones.
    ModelPath {
        /// A named model, e.g. gemma3-270m (a base model, no chat template).
        name: Option<String>,
    },
}

fn main() -> ExitCode {
    cli::runtime_dir::ensure();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Devices { json } => devices_cmd::run(cli.backend, json),
        Command::Generate(args) => generate_cmd::run(cli.backend, args),
        Command::Rollout(args) => rollout_cmd::run(cli.backend, args),
        Command::Score(args) => score_cmd::run(cli.backend, args),
        Command::Serve(args) => serve::run(cli.backend, args),
        Command::Mismatch(args) => mismatch::run(cli.backend, args),
        Command::Bench(args) => bench::run(cli.backend, args),
        Command::Tune(args) => tune_cmd::run(cli.backend, args),
        Command::Check(args) => check::run(cli.backend, args),
        Command::Export(args) => export_cmd::run(args),
        Command::ModelPath { name } => {
            let model = match name.as_deref() {
                Some(name) => sprout::model::named::lookup(name),
                None => Ok(sprout::model::named::DEFAULT),
            };
            model
                .and_then(|m| m.path())
                .map(|p| println!("{}", p.display()))
                .map_err(Into::into)
        }
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
