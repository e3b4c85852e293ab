//! `sprout generate`: one sample from a prompt, streamed to the terminal or as JSON.

use std::io::Write;

use anyhow::{Context, Result, bail};
use clap::Args;

use serde_json::json;
use sprout::generate::{GenerateParams, generate};
use sprout::gpu::BackendChoice;
use sprout::sched::{SamplingParams, request_adjustments};

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{ModelArg, SamplingArgs};
use crate::cli::json_out;
use crate::cli::warnings;

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
    refuse_unused_flags(&args.sampling)?;
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
    // The same cap as a rollout's: the sample ends where the model's context does.
    let asked = SamplingParams {
        max_tokens: params.max_tokens,
        ..SamplingParams::default()
    };
    let (context, vocab) = (decoder.max_positions(), decoder.config.vocab_size);
    for a in request_adjustments(prompt_ids.len(), &asked, context, vocab) {
        warnings::warn(&warnings::flag(a.param), &a);
    }
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

/// `generate` samples with temperature alone: a truncation or stop flag would be silently
/// ignored, so it is an error that points at `rollout`, which has them all.
fn refuse_unused_flags(s: &SamplingArgs) -> Result<()> {
    let given = [
        ("--top-k", s.top_k != 0),
        ("--top-p", s.top_p != 1.0),
        ("--min-p", s.min_p != 0.0),
        ("--min-tokens", s.min_tokens != 0),
        ("--stop", !s.stop.is_empty()),
        ("--stop-token-ids", !s.stop_token_ids.is_empty()),
        ("--top-logprobs", s.top_logprobs != 0),
        ("--logit-bias", !s.logit_bias.is_empty()),
        ("--allowed-token-ids", s.allowed_token_ids.is_some()),
        ("--bad-word", !s.bad_words.is_empty()),
        ("--repetition-penalty", s.repetition_penalty != 1.0),
        ("--presence-penalty", s.presence_penalty != 0.0),
        ("--frequency-penalty", s.frequency_penalty != 0.0),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => bail!(
            "sprout generate samples with --temperature, --seed, --max-tokens and --ignore-eos \
             only; use sprout rollout for {flag}"
        ),
        None => Ok(()),
    }
}
