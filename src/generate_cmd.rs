//! `sprout generate`: one sample from a prompt, streamed to the terminal or as JSON.

use std::io::{IsTerminal, Write};

use anyhow::{Context, Result};
use clap::Args;

use crate::cli_args::{ModelArg, SamplingArgs};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sprout::generate::{GenerateParams, generate};
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The prompt text (special tokens such as <|im_start|> are recognised).
    #[arg(long)]
    prompt: String,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
}

pub fn run(backend: BackendChoice, args: GenerateArgs) -> Result<()> {
    args.sampling.check()?;
    let opened = sprout::model::open::open(args.model.model.as_deref())?;
    let mut source = opened.source;
    let tokenizer = opened.tokenizer;
    let gpu = crate::device::open(backend)?;
    let decoder = load(&gpu, source.as_mut())?;
    let prompt_ids = tokenizer.encode(&args.prompt)?;
    let params = GenerateParams {
        max_tokens: args.sampling.max_tokens,
        temperature: args.sampling.temperature,
        seed: args.sampling.seed,
        stop_ids: match args.sampling.ignore_eos {
            true => Vec::new(),
            false => decoder.config.eos_token_ids.clone(),
        },
    };
    let mut stream = tokenizer.stream(true);
    let mut stdout = std::io::stdout();
    let mut failed = None;
    let sample = pollster::block_on(generate(&decoder, &prompt_ids, &params, |id, _| {
        if args.json || failed.is_some() {
            return;
        }
        match stream.push(&tokenizer, id) {
            Ok(Some(text)) => {
                let _ = write!(stdout, "{text}");
                let _ = stdout.flush();
            }
            Ok(None) => {}
            Err(e) => failed = Some(e),
        }
    }))?;
    if let Some(e) = failed {
        return Err(e).context("decoding the generated tokens");
    }
    if !args.json {
        println!("{}", stream.finish(&tokenizer)?);
        return Ok(());
    }
    let text = tokenizer.decode_with(&sample.token_ids, true)?;
    let out = json!({
        "prompt_token_ids": prompt_ids,
        "samples": [{
            "token_ids": sample.token_ids,
            "logprobs": sample.logprobs,
            "text": text,
            "finish_reason": sample.finish_reason,
        }],
        "model": opened.info,
        "device": gpu.adapter,
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Uploads the weights, with a progress bar when stderr is a terminal, and puts the
/// adapter's tuned kernel choices in force.
pub(crate) fn load(
    gpu: &std::sync::Arc<Gpu>,
    source: &mut dyn sprout::model::source::WeightSource,
) -> Result<Decoder> {
    let decoder = load_untuned(gpu, source)?;
    crate::device::tune(&decoder)?;
    Ok(decoder)
}

/// As `load`, with the adapter's untuned kernel choices (what `sprout tune` measures).
pub(crate) fn load_untuned(
    gpu: &std::sync::Arc<Gpu>,
    source: &mut dyn sprout::model::source::WeightSource,
) -> Result<Decoder> {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(0).with_style(
            ProgressStyle::with_template("loading weights {bar:30} {pos}/{len} tensors")
                .expect("a valid template"),
        )
    } else {
        ProgressBar::hidden()
    };
    let decoder = Decoder::load(gpu.clone(), source, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    Ok(decoder)
}
