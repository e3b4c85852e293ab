//! `sprout rollout`: G samples for each of a list of prompts, as JSONL, with a summary.
//!
//! Samples are written in (prompt, sample) order: a prompt's lines go out as soon as it
//! and every prompt before it have finished, so an interrupted run keeps what it finished
//! and two runs of the same rollout write byte-identical files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{EngineArgs, ModelArg, SamplingArgs};
use crate::cli::draft_corpus;
use crate::cli::json_out;
use crate::cli::prompts_file;
use crate::cli::warnings::{self, FlagWarnings};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sprout::gpu::BackendChoice;
use sprout::prompts::{LineError, LineParams, PromptInput, PromptLine};
use sprout::sched::{FinishedSample, Request, SamplingParams};
use sprout::spec::SpecMode;
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::ChatTemplate;
use sprout::trajectory::{Provenance, SampleRecord};

#[derive(Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    model: ModelArg,
    /// One prompt (special tokens such as <|im_start|> are recognised).
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    prompt: Option<String>,
    /// A JSONL file, one prompt per line: `{"prompt": "..."}`, `{"prompt_token_ids":
    /// [...]}` or `{"messages": [{"role", "content"}, ...]}` (rendered with the model's chat
    /// template), each optionally with its own "n", "max_tokens", "min_tokens",
    /// "temperature", "seed", "top_k", "top_p", "min_p", "ignore_eos", "stop" (a string or
    /// a list), "stop_token_ids", "top_logprobs". A line that cannot be used is reported
    /// with its number and skipped.
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// Samples per prompt (G); a prompt is computed once and shared by its samples.
    #[arg(short = 'n', default_value_t = 1)]
    n: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Write one JSON line per sample here (default: stdout, or inside the --json summary).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print a JSON summary to stdout (with the samples in it when there is no --out).
    #[arg(long)]
    json: bool,
    /// Earlier rollouts to draft from with --speculative (e.g. the last epoch's output of
    /// this command): JSON lines with `prompt_token_ids` and `token_ids`.
    #[arg(long, value_name = "FILE.jsonl")]
    draft_corpus: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Writes samples in (prompt, sample) order as prompts complete.
struct OrderedWriter<'a> {
    out: Box<dyn Write + 'a>,
    tokenizer: &'a Tokenizer,
    provenance: &'a Provenance,
    /// Every queued prompt by index: its sampling parameters and sample count.
    expected: BTreeMap<u32, (SamplingParams, usize)>,
    pending: BTreeMap<u32, Vec<FinishedSample>>,
    /// Lines kept for the --json summary instead of being written.
    kept: Option<Vec<serde_json::Value>>,
}

impl OrderedWriter<'_> {
    fn push(&mut self, sample: FinishedSample) -> Result<()> {
        self.pending
            .entry(sample.request_index)
            .or_default()
            .push(sample);
        while let Some((&index, (_, n))) = self.expected.first_key_value() {
            if self.pending.get(&index).is_none_or(|s| s.len() < *n) {
                break;
            }
            let (params, _) = self.expected.remove(&index).expect("checked");
            let mut samples = self.pending.remove(&index).expect("checked");
            samples.sort_by_key(|s| s.sample_index);
            for s in &samples {
                let text = match &s.stopped_by {
                    Some(m) => m.text.clone(),
                    None => self.tokenizer.decode_with(&s.token_ids, true)?,
                };
                let tokenizer = self.tokenizer;
                let token_text = |id| tokenizer.decode_with(&[id], false).unwrap_or_default();
                let line = SampleRecord::new(s, text, token_text, &params, self.provenance);
                match &mut self.kept {
                    Some(kept) => kept.push(json_out::to_value(&line)?),
                    None => writeln!(self.out, "{}", json_out::to_line(&line)?)?,
                }
            }
            self.out.flush()?;
        }
        Ok(())
    }
}

pub fn run(backend: BackendChoice, args: RolloutArgs) -> Result<()> {
    args.sampling.check()?;
    if args.n == 0 {
        bail!("-n must be at least 1");
    }
    let config = args.engine.config()?;
    let lines = match (&args.prompt, &args.prompts) {
        (Some(p), _) => vec![Ok(PromptLine {
            line: 1,
            input: PromptInput::Text(p.clone()),
            params: LineParams::default(),
        })],
        (None, Some(path)) => prompts_file::read(path)?,
        (None, None) => bail!("give --prompt TEXT or --prompts FILE.jsonl"),
    };
    if lines.is_empty() {
        bail!("the prompts file holds no prompts");
    }
    let out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    };

    let opened = bootstrap::open(backend, args.model.open()?, Kernels::Tuned)?;
    let (decoder, tokenizer, gpu) = (&opened.decoder, opened.tokenizer()?, &opened.gpu);
    let mut engine = opened.engine(&config)?;
    if let Some(path) = &args.draft_corpus {
        if config.speculative == SpecMode::Off {
            bail!("--draft-corpus gives drafts to --speculative suffix or auto; it is off");
        }
        let records = draft_corpus::read(path, decoder.config.vocab_size)?;
        for (prompt, completion) in &records {
            engine.add_draft_corpus(prompt, completion);
        }
    }
    let model_path = std::path::PathBuf::from(&opened.info.path);
    let (sprout_version, git_commit) = Provenance::build();
    let provenance = Provenance {
        sprout_version,
        git_commit,
        model_file: opened.info.name.clone(),
        model_sha256: sprout::model::open::model_sha256(&model_path)
            .with_context(|| format!("hashing {}", model_path.display()))?,
        weights_version: config.weights_version,
        tokenizer_sha256: tokenizer.sha256()?,
        weight_format: decoder.weight_format(),
        backend: gpu.adapter.backend.clone(),
        adapter: gpu.adapter.name.clone(),
        driver: format!("{} {}", gpu.adapter.driver, gpu.adapter.driver_info)
            .trim()
            .to_string(),
    };
    let template = opened.chat_template(tokenizer, None)?;
    args.engine.warn_adjusted(engine.adjusted());
    let file = args.prompts.as_deref().unwrap_or(Path::new("--prompt"));
    // Each prompt keeps its index among the file's non-blank lines (part of its draw
    // keys), whether or not other lines fail.
    let mut expected = BTreeMap::new();
    let mut errors: Vec<LineError> = Vec::new();
    let mut flag_warnings = FlagWarnings::default();
    for (index, line) in lines.into_iter().enumerate() {
        let index = index as u32;
        let queued = line.and_then(|line| {
            let fail = |e: anyhow::Error| LineError {
                line: line.line,
                error: format!("{e:#}"),
            };
            let request =
                build_request(index, &line, &args, decoder, tokenizer, &template).map_err(fail)?;
            let adjusted = engine.request_adjustments(&request);
            let (params, n) = (request.params.clone(), request.n);
            engine.add_request(request).map_err(|e| fail(e.into()))?;
            // Said once queued: a refused line's error is the one thing to read about it.
            for a in adjusted {
                if line.params.sets(a.param) {
                    let at = format!("{} line {}", file.display(), line.line);
                    warnings::warn(&format!("{at}: \"{}\"", a.param), &a);
                } else {
                    let place = args
                        .prompts
                        .as_ref()
                        .map(|_| format!("{} line {}", file.display(), line.line));
                    flag_warnings.note(a, place);
                }
            }
            Ok((params, n))
        });
        match queued {
            Ok(entry) => {
                expected.insert(index, entry);
            }
            Err(e) => {
                eprintln!("warning: {} line {}: {}", file.display(), e.line, e.error);
                errors.push(e);
            }
        }
    }
    flag_warnings.print();
    if expected.is_empty() {
        bail!("no prompt could be used ({} lines failed)", errors.len());
    }

    let total: usize = expected.values().map(|(_, n)| n).sum();
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(total as u64).with_style(
            ProgressStyle::with_template("rollout {bar:30} {pos}/{len} samples  {msg}")
                .expect("a valid template"),
        )
    } else {
        ProgressBar::hidden()
    };
    let mut writer = OrderedWriter {
        out,
        tokenizer,
        provenance: &provenance,
        expected,
        pending: BTreeMap::new(),
        kept: (args.json && args.out.is_none()).then(Vec::new),
    };
    let start = Instant::now();
    while engine.has_work() {
        let step = pollster::block_on(engine.step())?;
        for sample in step.finished {
            bar.inc(1);
            writer.push(sample)?;
        }
        let generated = engine.stats().generated_tokens;
        let rate = generated as f64 / start.elapsed().as_secs_f64();
        bar.set_message(format!("{generated} tokens, {rate:.1} tokens/s"));
    }
    let wall_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let s = engine.stats();
    let mut summary = json!({
        "requests": s.requests,
        "samples": total,
        "prompt_tokens": s.prompt_tokens,
        "prefill_tokens_computed": s.prefill_tokens_computed,
        "prefix_cache_hit_tokens": s.prefix_cache_hit_tokens,
        "generated_tokens": s.generated_tokens,
        "steps": s.steps,
        "preemptions": s.preemptions,
        "peak_kv_blocks": s.peak_kv_blocks,
        "kv_blocks": engine.num_blocks(),
        "speculation": json_out::to_value(engine.spec_stats())?,
        "wall_s": json_out::finite("wall_s", wall_s)?,
        "generated_tokens_per_s": json_out::finite(
            "generated_tokens_per_s",
            s.generated_tokens as f64 / wall_s,
        )?,
    });
    if args.json {
        if !errors.is_empty() {
            summary["errors"] = json_out::to_value(&errors)?;
        }
        if let Some(kept) = writer.kept.take() {
            summary["sample_lines"] = serde_json::Value::Array(kept);
        }
        println!("{}", json_out::to_line(&summary)?);
    } else {
        eprintln!(
            "{} samples, {} generated tokens in {wall_s:.2} s ({:.1} tokens/s); prefill computed \
             {} of {} prompt tokens ({} from the prefix cache); {} steps, {} preemptions, peak \
             {} of {} KV blocks",
            total,
            s.generated_tokens,
            s.generated_tokens as f64 / wall_s,
            s.prefill_tokens_computed,
            s.prompt_tokens,
            s.prefix_cache_hit_tokens,
            s.steps,
            s.preemptions,
            s.peak_kv_blocks,
            engine.num_blocks()
        );
    }
    Ok(())
}

/// The request a prompt line asks for: its text, ids or messages as token ids, and the
/// command's sampling parameters with the line's overrides.
fn build_request(
    index: u32,
    line: &PromptLine,
    args: &RolloutArgs,
    decoder: &sprout::model::decoder::Decoder,
    tokenizer: &Tokenizer,
    template: &Option<ChatTemplate>,
) -> Result<Request> {
    let prompt = match &line.input {
        PromptInput::Text(text) => tokenizer.encode(text)?,
        PromptInput::TokenIds(ids) => ids.clone(),
        PromptInput::Messages(messages) => match template {
            Some(t) => t.prompt_ids(tokenizer, messages)?,
            None => bail!("\"messages\" needs a chat template, and this model has none"),
        },
    };
    let (p, a) = (&line.params, &args.sampling);
    // End-of-sequence (unless ignored) and the stop token ids asked for, each once.
    let mut stop_ids = match p.ignore_eos.unwrap_or(a.ignore_eos) {
        true => Vec::new(),
        false => decoder.config.eos_token_ids.clone(),
    };
    for &id in p.stop_token_ids.as_ref().unwrap_or(&a.stop_token_ids) {
        if id as usize >= decoder.config.vocab_size {
            bail!(
                "stop token id {id} is outside the vocabulary of {}",
                decoder.config.vocab_size
            );
        }
        if !stop_ids.contains(&id) {
            stop_ids.push(id);
        }
    }
    let base = a.params();
    let params = SamplingParams {
        temperature: p.temperature.unwrap_or(base.temperature),
        seed: p.seed.unwrap_or(base.seed),
        own_seed: p.seed.is_some(),
        max_tokens: p.max_tokens.unwrap_or(base.max_tokens),
        top_k: p.top_k.unwrap_or(base.top_k),
        top_p: p.top_p.unwrap_or(base.top_p),
        min_p: p.min_p.unwrap_or(base.min_p),
        stop_ids,
        min_tokens: p.min_tokens.unwrap_or(base.min_tokens),
        stop: p.stop.clone().unwrap_or(base.stop),
        top_logprobs: p.top_logprobs.unwrap_or(base.top_logprobs),
    };
    // The flags were checked already, so a broken rule comes from the line.
    params
        .validate()
        .map_err(|e| anyhow!(e.message_for(&format!("\"{}\"", e.param))))?;
    Ok(Request {
        index,
        prompt,
        n: p.n.unwrap_or(args.n),
        params,
        forced: Vec::new(),
    })
}
