//! `sprout rollout`: G samples for each of a list of prompts, as JSONL, with a summary.
//!
//! Samples are written in (prompt, sample) order: a prompt's lines go out as soon as it
//! and every prompt before it have finished, so an interrupted run keeps what it finished
//! and two runs of the same rollout write byte-identical files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::cli_args::{EngineArgs, ModelArg, SamplingArgs};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sprout::engine::Engine;
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::tokenizer::Tokenizer;
use sprout::sched::{FinishedSample, Request, SamplingParams};
use sprout::trajectory::{Provenance, SampleRecord};

#[derive(Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    model: ModelArg,
    /// One prompt (special tokens such as <|im_start|> are recognised).
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    prompt: Option<String>,
    /// A JSONL file of prompts, one `{"prompt": "..."}` object per line.
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
    #[command(flatten)]
    engine: EngineArgs,
}

/// Reads prompts: one `{"prompt": "..."}` object per line; blank lines are skipped.
fn read_prompts(path: &Path) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        prompt: String,
    }
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut prompts = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line).with_context(|| {
            format!(
                "{} line {}: expected {{\"prompt\": \"...\"}}",
                path.display(),
                i + 1
            )
        })?;
        prompts.push(parsed.prompt);
    }
    if prompts.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(prompts)
}

/// Writes samples in (prompt, sample) order as prompts complete.
struct OrderedWriter<'a> {
    out: Box<dyn Write + 'a>,
    tokenizer: &'a Tokenizer,
    params: &'a SamplingParams,
    provenance: &'a Provenance,
    n: usize,
    pending: BTreeMap<u32, Vec<FinishedSample>>,
    next_prompt: u32,
    /// Lines kept for the --json summary instead of being written.
    kept: Option<Vec<serde_json::Value>>,
}

impl OrderedWriter<'_> {
    fn push(&mut self, sample: FinishedSample) -> Result<()> {
        self.pending
            .entry(sample.request_index)
            .or_default()
            .push(sample);
        while self
            .pending
            .get(&self.next_prompt)
            .is_some_and(|s| s.len() == self.n)
        {
            let mut samples = self.pending.remove(&self.next_prompt).expect("checked");
            samples.sort_by_key(|s| s.sample_index);
            for s in &samples {
                let text = self.tokenizer.decode_with(&s.token_ids, true)?;
                let line = SampleRecord::new(s, text, self.params, self.provenance);
                match &mut self.kept {
                    Some(kept) => kept.push(serde_json::to_value(&line)?),
                    None => writeln!(self.out, "{}", serde_json::to_string(&line)?)?,
                }
            }
            self.out.flush()?;
            self.next_prompt += 1;
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
    let prompts = match (&args.prompt, &args.prompts) {
        (Some(p), _) => vec![p.clone()],
        (None, Some(path)) => read_prompts(path)?,
        (None, None) => bail!("give --prompt TEXT or --prompts FILE.jsonl"),
    };
    let out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    };

    let opened = sprout::model::open::open(args.model.model.as_deref())?;
    let mut source = opened.source;
    let tokenizer = opened.tokenizer;
    let gpu = pollster::block_on(Gpu::open(backend))?;
    let decoder = crate::generate_cmd::load(&gpu, source.as_mut())?;
    let mut engine = Engine::new(&decoder, &config)?;
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
    let params = SamplingParams {
        temperature: args.sampling.temperature,
        seed: args.sampling.seed,
        max_tokens: args.sampling.max_tokens,
        stop_ids: decoder.config.eos_token_ids.clone(),
    };
    for (i, text) in prompts.iter().enumerate() {
        let prompt = tokenizer.encode(text)?;
        engine
            .add_request(Request {
                index: i as u32,
                prompt,
                n: args.n,
                params: params.clone(),
            })
            .with_context(|| format!("prompt {i}"))?;
    }

    let total = (prompts.len() * args.n) as u64;
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(total).with_style(
            ProgressStyle::with_template("rollout {bar:30} {pos}/{len} samples  {msg}")
                .expect("a valid template"),
        )
    } else {
        ProgressBar::hidden()
    };
    let mut writer = OrderedWriter {
        out,
        tokenizer: &tokenizer,
        params: &params,
        provenance: &provenance,
        n: args.n,
        pending: BTreeMap::new(),
        next_prompt: 0,
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
        "samples": prompts.len() * args.n,
        "prompt_tokens": s.prompt_tokens,
        "prefill_tokens_computed": s.prefill_tokens_computed,
        "prefix_cache_hit_tokens": s.prefix_cache_hit_tokens,
        "generated_tokens": s.generated_tokens,
        "steps": s.steps,
        "preemptions": s.preemptions,
        "peak_kv_blocks": s.peak_kv_blocks,
        "kv_blocks": engine.num_blocks(),
        "wall_s": wall_s,
        "generated_tokens_per_s": s.generated_tokens as f64 / wall_s,
    });
    if args.json {
        if let Some(kept) = writer.kept.take() {
            summary["sample_lines"] = serde_json::Value::Array(kept);
        }
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        eprintln!(
            "{} samples, {} generated tokens in {wall_s:.2} s ({:.1} tokens/s); prefill computed \
             {} of {} prompt tokens ({} from the prefix cache); {} steps, {} preemptions, peak \
             {} of {} KV blocks",
            prompts.len() * args.n,
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
