//! `sprout generate`: one sample from a prompt, streamed to the terminal or as JSON.

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;

use serde_json::json;
use sprout::generate::{GenerateParams, generate};
use sprout::gpu::BackendChoice;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{ModelArg, SamplingArgs};
use crate::cli::json_out;

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
    let opened = bootstrap::open(backend, args.model.open()?, Kernels::Tuned)?;
    let (decoder, tokenizer, gpu) = (&opened.decoder, opened.tokenizer()?, &opened.gpu);
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
    let sample = pollster::block_on(generate(decoder, &prompt_ids, &params, |id, _| {
        if args.json || failed.is_some() {
            return;
        }
        match stream.push(tokenizer, id) {
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
        println!("{}", stream.finish(tokenizer)?);
        return Ok(());
    }
    let text = tokenizer.decode_with(&sample.token_ids, true)?;
    let out = json!({
        "prompt_token_ids": prompt_ids,
        "samples": [{
            "token_ids": sample.token_ids,
            "logprobs": json_out::to_value(&sample.logprobs)?,
            "text": text,
            "finish_reason": sample.finish_reason,
        }],
        "model": opened.info,
        "device": gpu.adapter,
    });
    println!("{}", json_out::to_line(&out)?);
    Ok(())
}
