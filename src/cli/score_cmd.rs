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
//!
//! Records go out in the input's order as soon as they and every line before them are
//! scored, one write per step (`record_sink`), each scored record naming what scored it
//! (`scored_by`: the provenance of this run's model and adapter). `--resume` keeps the
//! whole lines an earlier run of the same command line wrote, checking each against the
//! input line in its place and its `scored_by`, and scores the rest.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
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
use crate::cli::cli_args::{EngineArgs, LoadedModel, LoraArg, ModelArg};
use crate::cli::record_sink::RecordSink;
use crate::cli::{json_out, progress, resume};
use sprout::trajectory::Provenance;

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    model: ModelArg,
    #[command(flatten)]
    lora: LoraArg,
    /// Rollout records (JSONL) with `prompt_token_ids` and `token_ids`.
    #[arg(long = "in")]
    input: PathBuf,
    /// Where to write the records with `scored_logprobs` added.
    #[arg(long)]
    out: PathBuf,
    /// Continue the --out file of an earlier run of this same command line that was
    /// stopped: keep its whole lines (cutting a torn last one) and score the rest.
    #[arg(long)]
    resume: bool,
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
    if !(args.tis_cap.is_finite() && args.tis_cap > 1.0) {
        bail!("--tis-cap must be a number above 1, not {}", args.tis_cap);
    }
    let model = match &args.trainer_model {
        None => args.model.open()?,
        Some(path) => open_trainer(path, &args.model)?,
    };
    let opened = bootstrap::open(backend, model, Kernels::Tuned)?;
    opened.apply_lora(&args.lora)?;
    let scored_by = json_out::to_value(&opened.provenance(config.weights_version)?)?;
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
    let mode = match args.trainer_model {
        None => Mode::Scored,
        Some(_) => Mode::Trainer(args.tis_cap),
    };
    // With --resume, the lines an earlier run of this command line wrote whole are kept.
    let (mut out, done) = match args.resume && args.out.exists() {
        true => {
            let kept = resumable(&args.out, &lines, mode, &scored_by)?;
            eprintln!(
                "resuming {}: {} records already written are skipped; cut {} bytes of a torn \
                 last line",
                args.out.display(),
                kept.lines,
                kept.torn_bytes
            );
            (RecordSink::resume(&args.out, kept.bytes)?, kept.lines)
        }
        false => (RecordSink::create(&args.out)?, 0),
    };

    // Lines with the same prompt form one request; completions with no tokens need no
    // computation (their score is the empty list).
    let mut groups: BTreeMap<Vec<u32>, Vec<usize>> = BTreeMap::new();
    for (i, input) in lines.iter().enumerate().skip(done) {
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
            cache_salt: None,
            lora: engine.decoder().has_adapter(),
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
    // Records go out in the input's order as soon as they and every line before them are
    // ready, in one write per step.
    let mut writer = InOrder {
        next: done,
        failed: lines[..done].iter().filter(|l| l.parsed.is_err()).count(),
        scored_by,
        mode,
        input: &args.input,
    };
    let start = Instant::now();
    while engine.has_work() {
        let step = pollster::block_on(engine.step())?;
        for sample in step.finished {
            let line = members[sample.request_index as usize][sample.sample_index as usize];
            scores[line] = Some(sample.logprobs);
            bar.inc(1);
        }
        writer.write_ready(&mut lines, &mut scores, &mut out, false)?;
        bar.set_message(format!("{} tokens scored", engine.stats().scored_tokens));
    }
    writer.write_ready(&mut lines, &mut scores, &mut out, true)?;
    let wall_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let failed = writer.failed;
    let s = engine.stats();
    let mut summary = json!({
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
    if args.resume {
        summary["skipped_records"] = done.into();
    }
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

/// What the scores are: the model's own (`scored_logprobs`), or a trainer's with its
/// truncated importance weights against the rollout (`trainer_logprobs`, `tis_weight`).
#[derive(Clone, Copy)]
enum Mode {
    Scored,
    /// With the cap C of `tis_weight`.
    Trainer(f64),
}

impl Mode {
    /// The keys this mode adds to a record (and `scored_by`).
    fn keys(self) -> &'static [&'static str] {
        match self {
            Mode::Scored => &["scored_logprobs", "scored_by"],
            Mode::Trainer(_) => &["trainer_logprobs", "tis_weight", "scored_by"],
        }
    }
}

/// Writes records in the input's order as they become ready.
struct InOrder<'a> {
    /// The first line not written yet.
    next: usize,
    /// Lines written without scores so far.
    failed: usize,
    /// What made the scores: each scored record says it.
    scored_by: Value,
    mode: Mode,
    input: &'a std::path::Path,
}

impl InOrder<'_> {
    /// Writes every line from `next` on whose scores are in (or that cannot be scored);
    /// at the `end`, every line left, a missing score being a failure.
    fn write_ready(
        &mut self,
        lines: &mut [Input],
        scores: &mut [Option<Vec<f32>>],
        out: &mut RecordSink,
        end: bool,
    ) -> Result<()> {
        let mut group = String::new();
        while self.next < lines.len() {
            let (input, score) = (&mut lines[self.next], scores[self.next].take());
            if score.is_none() && input.parsed.is_ok() && !end {
                break;
            }
            match (&mut input.parsed, score) {
                (Ok(line), Some(score)) => {
                    self.add_scores(line, score)?;
                    group.push_str(&json_out::to_line(&line.record)?);
                }
                (parsed, _) => {
                    self.failed += 1;
                    let why = match parsed {
                        Err(why) => why.as_str(),
                        Ok(_) => "the engine returned no scores",
                    };
                    eprintln!(
                        "error: {} line {}: {why}",
                        self.input.display(),
                        input.number
                    );
                    group.push_str(&input.text);
                }
            }
            group.push('\n');
            self.next += 1;
        }
        if !group.is_empty() {
            out.write_group(&group)?;
        }
        Ok(())
    }

    fn add_scores(&self, line: &mut Line, score: Vec<f32>) -> Result<()> {
        match self.mode {
            Mode::Scored => {
                line.record
                    .insert("scored_logprobs".into(), json_out::to_value(&score)?);
            }
            Mode::Trainer(cap) => {
                let rollout = rollout_logprobs(line).map_err(anyhow::Error::msg)?;
                let weights: Vec<f64> = rollout
                    .iter()
                    .zip(&score)
                    .map(|(&r, &t)| mismatch::tis_weight(r, t, cap))
                    .collect();
                line.record
                    .insert("trainer_logprobs".into(), json_out::to_value(&score)?);
                line.record
                    .insert("tis_weight".into(), json_out::to_value(&weights)?);
            }
        }
        line.record
            .insert("scored_by".into(), self.scored_by.clone());
        Ok(())
    }
}

/// What `--resume` keeps of an earlier run's `--out`.
struct Kept {
    /// Its whole lines, the first of the input's lines: this run skips them.
    lines: usize,
    bytes: u64,
    torn_bytes: u64,
}

/// Checks that each whole line of `path` is the record this run would write for the input
/// line in its place: the input's record with this mode's scores, made by this command
/// line (`scored_by`), or, for a line that could not be scored, the input line itself.
fn resumable(
    path: &std::path::Path,
    lines: &[Input],
    mode: Mode,
    scored_by: &Value,
) -> Result<Kept> {
    let file = path.display();
    let mut kept = Kept {
        lines: 0,
        bytes: 0,
        torn_bytes: 0,
    };
    kept.torn_bytes = resume::whole_lines(path, |number, text, end| {
        let Some(input) = lines.get(number - 1) else {
            bail!(
                "{file} has more lines than the input's {} records",
                lines.len()
            );
        };
        let unscored = text == input.text;
        let scored = || -> Result<bool> {
            let Ok(line) = &input.parsed else {
                return Ok(false);
            };
            let Ok(Value::Object(mut record)) = serde_json::from_str::<Value>(text) else {
                return Ok(false);
            };
            let made_by = record.remove("scored_by").unwrap_or(Value::Null);
            if made_by != *scored_by {
                let difference = serde_json::from_value::<Provenance>(made_by)
                    .ok()
                    .zip(serde_json::from_value::<Provenance>(scored_by.clone()).ok())
                    .and_then(|(a, b)| resume::first_difference(&a, &b))
                    .unwrap_or_else(|| "scored_by".into());
                bail!(
                    "{file} line {number} was scored by another command line ({difference}): \
                     --resume continues only the same one"
                );
            }
            let keys = &mode.keys()[..mode.keys().len() - 1];
            let has_scores = keys.iter().all(|k| record.remove(*k).is_some());
            Ok(has_scores && record == line.record)
        };
        if !unscored && !scored()? {
            bail!(
                "{file} line {number} is not what this command line writes for {} line {}: \
                 --resume continues only the same input and scoring",
                input.number,
                input.number
            );
        }
        kept.lines = number;
        kept.bytes = end;
        Ok(())
    })?;
    Ok(kept)
}
