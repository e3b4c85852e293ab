//! `sprout rollout`: G samples for each of a list of prompts, as JSONL, with a summary.
//!
//! Samples are written in (prompt, sample) order: a prompt's lines go out, in one write,
//! as soon as it and every prompt before it have finished, so an interrupted run keeps
//! every prompt it finished and two runs of the same rollout write byte-identical files. A
//! write that fails cuts `--out` back to its last whole prompt and ends the run with an
//! error (`record_sink`). `--resume` keeps the whole prompts an earlier run of the same
//! command line wrote, checks that they are what this run would write (`resume`), and runs
//! the rest with the same seeds, so the file ends as an uninterrupted run's would.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use clap::Args;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{EngineArgs, LoraArg, ModelArg, SamplingArgs};
use crate::cli::draft_corpus;
use crate::cli::json_out;
use crate::cli::prompts_file;
use crate::cli::record_sink::RecordSink;
use crate::cli::resume::{self, WrittenRollout};
use crate::cli::warnings::{self, FlagWarnings};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sprout::gpu::BackendChoice;
use sprout::prompts::{LineError, LineParams, PromptInput, PromptLine};
use sprout::sched::{FinishedSample, LogitProcessing, Request, SamplingParams};
use sprout::spec::SpecMode;
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::ChatTemplate;
use sprout::trajectory::{Provenance, SampleRecord, SamplingRecord};

#[derive(Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    model: ModelArg,
    #[command(flatten)]
    lora: LoraArg,
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
    /// Continue the --out file of an earlier run of this same command line that was
    /// stopped: keep its whole prompts (cutting a torn last line), skip them, and run the
    /// rest with the same seeds; a file written another way is refused.
    #[arg(long, requires = "out")]
    resume: bool,
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
    out: RecordSink,
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
            let mut group = String::new();
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
                    None => {
                        group.push_str(&json_out::to_line(&line)?);
                        group.push('\n');
                    }
                }
            }
            if self.kept.is_none() {
                self.out.write_group(&group)?;
            }
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
    // An earlier run's file is read (and a file that is not one refused) before the model
    // loads; it is cut only once this run's requests are known to match it.
    let written = match &args.out {
        Some(path) if args.resume && path.exists() => Some(resume::read_rollout(path)?),
        _ => None,
    };

    let opened = bootstrap::open(backend, args.model.open()?, Kernels::Tuned)?;
    opened.apply_lora(&args.lora)?;
    let (decoder, tokenizer) = (&opened.decoder, opened.tokenizer()?);
    args.sampling.check_tokens(decoder.config.vocab_size)?;
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
    let provenance = opened.provenance(config.weights_version)?;
    let template = opened.chat_template(tokenizer, None)?;
    args.engine.warn_adjusted(engine.adjusted());
    let file = args.prompts.as_deref().unwrap_or(Path::new("--prompt"));
    // Each prompt keeps its index among the file's non-blank lines (part of its draw
    // keys), whether or not other lines fail.
    let mut built = Vec::new();
    for (index, line) in lines.into_iter().enumerate() {
        let index = index as u32;
        built.push(line.and_then(|line| {
            let request = build_request(index, &line, &args, decoder, tokenizer, &template);
            let request = request.map_err(|e| LineError {
                line: line.line,
                error: format!("{e:#}"),
            })?;
            Ok((line, request))
        }));
    }
    let requests = built.iter().filter_map(|b| b.as_ref().ok().map(|(_, r)| r));
    let (done, out) = match (&args.out, written) {
        (Some(path), Some(written)) => {
            let keep = resumable(path, &written, requests, &provenance)?;
            let skipped = written.groups.len() - usize::from(keep.unfinished > 0);
            eprintln!(
                "resuming {}: {} prompts ({} records) already written are skipped; cut {} \
                 bytes of a torn last line and {} records of an unfinished prompt",
                path.display(),
                keep.done.len(),
                written.groups[..skipped]
                    .iter()
                    .map(|g| g.samples)
                    .sum::<usize>(),
                written.torn_bytes,
                keep.unfinished
            );
            (keep.done, RecordSink::resume(path, keep.bytes)?)
        }
        (Some(path), None) => (BTreeSet::new(), RecordSink::create(path)?),
        (None, _) => (BTreeSet::new(), RecordSink::Stdout),
    };
    let mut expected = BTreeMap::new();
    let mut errors: Vec<LineError> = Vec::new();
    let mut flag_warnings = FlagWarnings::default();
    for queued in built {
        let queued = queued.and_then(|(line, request)| {
            let fail = |e: anyhow::Error| LineError {
                line: line.line,
                error: format!("{e:#}"),
            };
            let index = request.index;
            if done.contains(&index) {
                return Ok(None);
            }
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
            Ok(Some((index, (params, n))))
        });
        match queued {
            Ok(Some((index, entry))) => {
                expected.insert(index, entry);
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("warning: {} line {}: {}", file.display(), e.line, e.error);
                errors.push(e);
            }
        }
    }
    flag_warnings.print();
    if expected.is_empty() && done.is_empty() {
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
        if args.resume {
            summary["skipped_prompts"] = done.len().into();
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

/// What `--resume` keeps of an earlier run's file.
struct Kept {
    /// The prompts it wrote whole: this run skips them.
    done: BTreeSet<u32>,
    /// The bytes they take; the rest is cut.
    bytes: u64,
    /// Records of an unfinished last prompt, cut to be run again.
    unfinished: usize,
}

/// Checks that every prompt `written` holds is one this run would write the same way, in
/// this run's order (`requests`: this run's, by prompt), with the same prompt, seed,
/// sampling and provenance, and says what to keep.
fn resumable<'a>(
    path: &Path,
    written: &WrittenRollout,
    mut requests: impl Iterator<Item = &'a Request>,
    provenance: &Provenance,
) -> Result<Kept> {
    let file = path.display();
    let mut kept = Kept {
        done: BTreeSet::new(),
        bytes: 0,
        unfinished: 0,
    };
    for (i, group) in written.groups.iter().enumerate() {
        let index = group.prompt_index;
        let Some(request) = requests.next() else {
            bail!("{file} holds prompt {index}, past this run's prompts");
        };
        if index != request.index {
            bail!(
                "{file} holds prompt {index} where this run's next prompt is {}: it was written \
                 from another prompts file",
                request.index
            );
        }
        let record = &group.first;
        let refuse = |what: String| {
            anyhow!(
                "{file} was written by another command line ({what}): --resume continues only the same one"
            )
        };
        if let Some(d) = resume::first_difference(&record.provenance, provenance) {
            return Err(refuse(d));
        }
        if record.prompt_token_ids != request.prompt {
            return Err(refuse(format!("prompt {index}'s token ids differ")));
        }
        if record.seed != request.params.seed {
            let seeds = format!(
                "the file's {}, this run's {}",
                record.seed, request.params.seed
            );
            return Err(refuse(format!("prompt {index}'s seed: {seeds}")));
        }
        let sampling = SamplingRecord::from(&request.params);
        if let Some(d) = resume::first_difference(&record.sampling, &sampling) {
            return Err(refuse(format!("prompt {index}'s sampling {d}")));
        }
        if group.samples > request.n {
            let n = format!("{} samples, this run asks for {}", group.samples, request.n);
            return Err(refuse(format!("prompt {index} has {n}")));
        }
        if group.samples == request.n {
            kept.done.insert(index);
            kept.bytes = group.end;
        } else if i + 1 == written.groups.len() {
            kept.unfinished = group.samples;
        } else {
            bail!(
                "{file}: prompt {index} has {} of its {} samples, yet prompts after it were \
                 written: the file was edited",
                group.samples,
                request.n
            );
        }
    }
    Ok(kept)
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
    let words = p.bad_words.as_ref().unwrap_or(&a.bad_words);
    let mut bad_words = Vec::new();
    for word in words {
        let spelled = match p.bad_words.is_some() {
            true => "\"bad_words\"",
            false => "--bad-word",
        };
        let ids = tokenizer
            .bad_word_ids(word)
            .map_err(|e| anyhow!("{spelled} {word:?}: {e}"))?;
        bad_words.extend(ids);
    }
    let b = &base.processing;
    let processing = LogitProcessing {
        allowed_token_ids: p.allowed_token_ids.clone().or(b.allowed_token_ids.clone()),
        bad_words,
        logit_bias: p.logit_bias.clone().unwrap_or(b.logit_bias.clone()),
        repetition_penalty: p.repetition_penalty.unwrap_or(b.repetition_penalty),
        presence_penalty: p.presence_penalty.unwrap_or(b.presence_penalty),
        frequency_penalty: p.frequency_penalty.unwrap_or(b.frequency_penalty),
    };
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
        processing,
    };
    // The flags were checked already, so a broken rule comes from the line, or from a
    // token id past the vocabulary (the flags' or the line's: named as the line has it
    // when it gives the field).
    let spelled = |param: &str| match (p.sets(param), param) {
        (true, _) => format!("\"{param}\""),
        (false, "bad_words") => "--bad-word".into(),
        (false, _) => format!("--{}", param.replace('_', "-")),
    };
    params
        .validate()
        .map_err(|e| anyhow!(e.message_for(&spelled(e.param))))?;
    params
        .validate_tokens(decoder.config.vocab_size)
        .map_err(|e| anyhow!(e.message_for(&spelled(e.param))))?;
    Ok(Request {
        index,
        prompt,
        n: p.n.unwrap_or(args.n),
        params,
        forced: Vec::new(),
        cache_salt: None,
        lora: decoder.has_adapter(),
    })
}
