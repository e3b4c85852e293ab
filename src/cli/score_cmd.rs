//! `sprout score`: teacher-forced log-probabilities of rollout completions.
//!
//! Each input line (a rollout record, or any object with `prompt_token_ids` and
//! `token_ids`) comes back with `scored_logprobs`: the log-probability of each of its
//! `token_ids` given the prompt and the tokens before it, under the model (temperature 1).
//! Lines with the same prompt form one request whose prompt is computed once and shared by
//! its completions, and all requests run batched; the kernels compute a row the same way
//! whatever shares its batch, so scoring a rollout with the model and adapter that produced
//! it gives back exactly its `logprobs`.
//!
//! With `--trainer-model DIR` the full-precision trainer scores instead, and each line gets
//! `trainer_logprobs` (its log-probs, temperature 1) and `tis_weight`: per token the
//! truncated importance weight `min(p_train / p_rollout, C)` against the line's own
//! `logprobs` (the rollout's, temperature 1), C from `--tis-cap` (2). A trainer applies TIS
//! (multiply each token's loss by it) or MIS (drop tokens whose ratio leaves [1/C, C])
//! without a forward pass of its own. `--model` then names the model that rolled the
//! records out (the default model when not given): it is not loaded, but its vocabulary
//! must be the trainer's, or the command stops with an error naming both.
//!
//! A line that cannot be scored (not JSON, no ids, a token id outside the model's
//! vocabulary, ...) is an error reported with its line number; it is still copied to the
//! output, without scores, so nothing is lost, and the command exits 1 after writing
//! everything. A score that is not a finite number is never written (JSON has no NaN).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};
use sprout::gpu::BackendChoice;
use sprout::mismatch;
use sprout::sched::{Request, SamplingParams};
use sprout::tokenizer::vocabulary;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{EngineArgs, LoadedModel, ModelArg};
use crate::cli::{json_out, progress};

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Rollout records (JSONL) with `prompt_token_ids` and `token_ids`.
    #[arg(long = "in")]
    input: PathBuf,
    /// Where to write the records with `scored_logprobs` added.
    #[arg(long)]
    out: PathBuf,
    /// Print a JSON summary to stdout.
    #[arg(long)]
    json: bool,
    /// Score with this full-precision trainer (a Hugging Face directory or GGUF, as
    /// stored) instead, adding `trainer_logprobs` and `tis_weight` (against each line's
    /// `logprobs`) rather than `scored_logprobs`; --model names the rollout model, whose
    /// vocabulary must be the trainer's.
    #[arg(long, value_name = "DIR", conflicts_with = "quantize")]
    trainer_model: Option<PathBuf>,
    /// The cap C of `tis_weight = min(p_train / p_rollout, C)` (with --trainer-model).
    #[arg(long, default_value_t = mismatch::DEFAULT_CAP)]
    tis_cap: f64,
    #[command(flatten)]
    engine: EngineArgs,
}

/// One non-blank input line: its number, its text, and what it asks to score (or why it
/// cannot be scored).
struct Input {
    number: usize,
    text: String,
    parsed: Result<Line, String>,
}

/// What a usable line asks to score.
struct Line {
    record: serde_json::Map<String, Value>,
    prompt: Vec<u32>,
    completion: Vec<u32>,
}

/// The line's own `logprobs` (the rollout's), one per token: what `tis_weight` divides by.
fn rollout_logprobs(line: &Line) -> Result<Vec<f32>, String> {
    let list = line
        .record
        .get("logprobs")
        .and_then(Value::as_array)
        .ok_or("no \"logprobs\" list: tis_weight needs the rollout's log-probs")?;
    let values: Vec<f32> = list
        .iter()
        .map(|v| {
            v.as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| format!("\"logprobs\" holds {v}, not a number"))
        })
        .collect::<Result<_, _>>()?;
    if values.len() != line.completion.len() {
        return Err(format!(
            "\"logprobs\" has {} values for {} token ids",
            values.len(),
            line.completion.len()
        ));
    }
    Ok(values)
}

fn ids(record: &serde_json::Map<String, Value>, key: &str) -> Result<Vec<u32>, String> {
    let list = record
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no \"{key}\" list"))?;
    list.iter()
        .map(|v| {
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("\"{key}\" holds {v}, not a token id"))
        })
        .collect()
}

fn parse(text: &str) -> Result<Line, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Object(record) = value else {
        return Err("not a JSON object".into());
    };
    let prompt = ids(&record, "prompt_token_ids")?;
    let completion = ids(&record, "token_ids")?;
    if prompt.is_empty() {
        return Err("\"prompt_token_ids\" is empty".into());
    }
    Ok(Line {
        record,
        prompt,
        completion,
    })
}

/// The first id of `line` outside a vocabulary of `vocab` tokens, as an error.
fn check_vocabulary(line: &Line, vocab: usize) -> Result<(), String> {
    for (key, list) in [
        ("prompt_token_ids", &line.prompt),
        ("token_ids", &line.completion),
    ] {
        if let Some(bad) = list.iter().find(|&&id| id as usize >= vocab) {
            return Err(format!(
                "\"{key}\" holds {bad}, outside the model's vocabulary of {vocab} tokens"
            ));
        }
    }
    Ok(())
}

/// The trainer at `path`, as stored, after checking that the rollout model `rollout` (its
/// tokenizer only is read) has the same vocabulary.
fn open_trainer(path: &std::path::Path, rollout: &ModelArg) -> Result<LoadedModel> {
    let trainer = sprout::model::open::open(Some(path))?;
    let rolled = rollout.open_model()?;
    let rollout_name = rolled.info.path.clone();
    let trainer_name = path.display().to_string();
    vocabulary::check_same(
        &vocabulary::Side {
            name: &rollout_name,
            tokenizer: &rolled.tokenizer,
            logits: rolled.source.config().vocab_size,
        },
        &vocabulary::Side {
            name: &trainer_name,
            tokenizer: &trainer.tokenizer,
            logits: trainer.source.config().vocab_size,
        },
    )?;
    Ok(LoadedModel {
        source: trainer.source,
        tokenizer: Some(trainer.tokenizer),
        chat_template: trainer.chat_template,
        info: trainer.info,
    })
}

pub fn run(backend: BackendChoice, args: ScoreArgs) -> Result<()> {
    let config = args.engine.config()?;
    let file =
        File::open(&args.input).with_context(|| format!("opening {}", args.input.display()))?;
    let mut lines: Vec<Input> = Vec::new();
    for (i, text) in BufReader::new(file).lines().enumerate() {
        let text = text.with_context(|| format!("reading {}", args.input.display()))?;
        if text.trim().is_empty() {
            continue;
        }
        let parsed = parse(&text);
        lines.push(Input {
            number: i + 1,
            text,
            parsed,
        });
    }
    if lines.is_empty() {
        bail!("{} holds no records", args.input.display());
    }
    let mut out = std::io::BufWriter::new(
        File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?,
    );

    if !(args.tis_cap.is_finite() && args.tis_cap > 1.0) {
        bail!("--tis-cap must be a number above 1, not {}", args.tis_cap);
    }
    let model = match &args.trainer_model {
        None => args.model.open()?,
        Some(path) => open_trainer(path, &args.model)?,
    };
    let opened = bootstrap::open(backend, model, Kernels::Tuned)?;
    let mut engine = opened.engine(&config)?;
    args.engine.warn_adjusted(engine.adjusted());
    let vocab = opened.decoder.config.vocab_size;
    for input in &mut lines {
        if let Ok(line) = &input.parsed {
            let checked = check_vocabulary(line, vocab).and_then(|()| match args.trainer_model {
                Some(_) => rollout_logprobs(line).map(|_| ()),
                None => Ok(()),
            });
            if let Err(e) = checked {
                input.parsed = Err(e);
            }
        }
    }

    // Lines with the same prompt form one request; completions with no tokens need no
    // computation (their score is the empty list).
    let mut groups: BTreeMap<Vec<u32>, Vec<usize>> = BTreeMap::new();
    for (i, input) in lines.iter().enumerate() {
        match &input.parsed {
            Ok(line) if !line.completion.is_empty() => {
                groups.entry(line.prompt.clone()).or_default().push(i);
            }
            _ => {}
        }
    }
    let mut scores: Vec<Option<Vec<f32>>> = lines
        .iter()
        .map(|l| match &l.parsed {
            Ok(l) if l.completion.is_empty() => Some(Vec::new()),
            _ => None,
        })
        .collect();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (prompt, group) in groups {
        let forced: Vec<Vec<u32>> = group
            .iter()
            .map(|&i| {
                lines[i]
                    .parsed
                    .as_ref()
                    .expect("grouped lines parsed")
                    .completion
                    .clone()
            })
            .collect();
        let longest = forced.iter().map(Vec::len).max().unwrap_or(1);
        let request = Request {
            index: members.len() as u32,
            prompt,
            n: forced.len(),
            params: SamplingParams {
                temperature: 1.0,
                seed: 0,
                max_tokens: longest,
                stop_ids: Vec::new(),
                ..SamplingParams::default()
            },
            forced,
        };
        match engine.add_request(request) {
            Ok(_) => members.push(group),
            Err(e) => {
                for &i in &group {
                    lines[i].parsed = Err(e.to_string());
                }
                members.push(Vec::new());
            }
        }
    }

    let total: usize = members.iter().map(Vec::len).sum();
    let bar = progress::bar(
        "score {bar:30} {pos}/{len} completions  {msg}",
        total as u64,
    );
    let start = Instant::now();
    while engine.has_work() {
        let step = pollster::block_on(engine.step())?;
        for sample in step.finished {
            let line = members[sample.request_index as usize][sample.sample_index as usize];
            scores[line] = Some(sample.logprobs);
            bar.inc(1);
        }
        bar.set_message(format!("{} tokens scored", engine.stats().scored_tokens));
    }
    let wall_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let mut failed = 0;
    for (input, score) in lines.iter_mut().zip(scores) {
        match (&mut input.parsed, score) {
            (Ok(line), Some(score)) => {
                match args.trainer_model {
                    None => {
                        line.record
                            .insert("scored_logprobs".into(), json_out::to_value(&score)?);
                    }
                    Some(_) => {
                        let rollout = rollout_logprobs(line).map_err(anyhow::Error::msg)?;
                        let weights: Vec<f64> = rollout
                            .iter()
                            .zip(&score)
                            .map(|(&r, &t)| mismatch::tis_weight(r, t, args.tis_cap))
                            .collect();
                        line.record
                            .insert("trainer_logprobs".into(), json_out::to_value(&score)?);
                        line.record
                            .insert("tis_weight".into(), json_out::to_value(&weights)?);
                    }
                }
                writeln!(out, "{}", json_out::to_line(&line.record)?)?;
            }
            (parsed, _) => {
                failed += 1;
                let why = match parsed {
                    Err(why) => why.as_str(),
                    Ok(_) => "the engine returned no scores",
                };
                eprintln!(
                    "error: {} line {}: {why}",
                    args.input.display(),
                    input.number
                );
                writeln!(out, "{}", input.text)?;
            }
        }
    }
    out.flush()?;
    let s = engine.stats();
    let summary = json!({
        "records": lines.len(),
        "scored_records": lines.len() - failed,
        "failed_records": failed,
        "prompt_tokens": s.prompt_tokens,
        "prefill_tokens_computed": s.prefill_tokens_computed,
        "prefix_cache_hit_tokens": s.prefix_cache_hit_tokens,
        "scored_tokens": s.scored_tokens,
        "steps": s.steps,
        "preemptions": s.preemptions,
        "wall_s": json_out::finite("wall_s", wall_s)?,
    });
    if args.json {
        println!("{}", json_out::to_line(&summary)?);
    } else {
        eprintln!(
            "scored {} tokens of {total} completions in {wall_s:.2} s ({} prompt tokens \
             computed for {} prompt tokens); {failed} lines failed",
            s.scored_tokens, s.prefill_tokens_computed, s.prompt_tokens
        );
    }
    if failed > 0 {
        bail!(
            "{failed} of {} lines of {} could not be scored (see above); {} holds them unscored",
            lines.len(),
            args.input.display(),
            args.out.display()
        );
    }
    Ok(())
}
