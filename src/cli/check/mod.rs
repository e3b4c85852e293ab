//! `sprout check`: cross-backend regression tests a user can run. The fixed suite
//! (`suite`) and the kernel self-check (`kernels`) run on every adapter found; each
//! adapter's results are compared (`compare`) with the committed goldens (`goldens`, for
//! the default model only) and with the first adapter's, and reported (`report`) as a
//! table or JSON.
//!
//! Invariant: the command exits 0 only when every row was compared and passed; anything
//! that diverged, drifted past its tolerance or failed to run is listed and exits 1.

pub mod compare;
pub mod goldens;
pub mod kernels;
pub mod report;
pub mod suite;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;
use sprout::gpu::{AdapterSummary, BackendChoice, Gpu, list_adapters};

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{ModelArg, Quantize, parse_quantize};
use crate::cli::json_out;
use compare::{LOGPROB_TOLERANCE, compare};
use goldens::{CaseResult, Goldens};
use kernels::KERNEL_TOLERANCE;
use report::Row;

#[derive(Args)]
pub struct CheckArgs {
    /// Check this model (a .gguf file or a Hugging Face directory) across this machine's
    /// adapters instead of the default model against its goldens: the first adapter is the
    /// reference.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Convert --model's float matrices on load: f16, bf16, q8_0, q4_0, q4_1 or none (as every
    /// command that loads a model takes it).
    #[arg(long, value_parser = parse_quantize, default_value = "none", value_name = "FORMAT")]
    quantize: Quantize,
    /// Print the report as JSON to stdout.
    #[arg(long)]
    json: bool,
    /// Compare with these goldens (an insta snapshot or bare JSON, as --print-goldens
    /// writes) instead of the built-in ones.
    #[arg(long, value_name = "FILE", conflicts_with = "model")]
    goldens: Option<PathBuf>,
    /// Run the suite on the first adapter only and print its results as goldens JSON (what
    /// the built-in goldens' snapshot test records); compare nothing.
    #[arg(long)]
    print_goldens: bool,
}

/// One adapter's run: its label and what the suite gave (or why it did not run).
struct AdapterRun {
    label: String,
    cases: Result<Vec<CaseResult>, String>,
}

pub fn run(backend: BackendChoice, args: CheckArgs) -> Result<()> {
    let model = ModelArg {
        model: args.model.clone(),
        quantize: args.quantize,
    };
    let adapters = pollster::block_on(list_adapters(backend));
    if adapters.is_empty() {
        return Err(sprout::SproutError::NoAdapter(backend).into());
    }
    // The model file and its hash, read once: every adapter loads the same file.
    let info = model.open()?.info;
    let model_path = PathBuf::from(&info.path);
    let model_sha256 = sprout::model::open::model_sha256(&model_path)
        .with_context(|| format!("hashing {}", model_path.display()))?;

    if args.print_goldens {
        let gpu = pollster::block_on(Gpu::from_adapter(&adapters[0]))?;
        let cases = run_suite(gpu, &model)?;
        let goldens = Goldens {
            model: info.name,
            model_sha256,
            cases,
        };
        println!("{}", json_out::to_pretty(&goldens)?);
        return Ok(());
    }

    let (goldens, goldens_from) = match (&args.model, &args.goldens) {
        (Some(_), _) => (None, None),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let parsed = goldens::parse(&text).with_context(|| path.display().to_string())?;
            (Some(parsed), Some(path.display().to_string()))
        }
        (None, None) => (
            Some(goldens::parse(goldens::BUILT_IN)?),
            Some("built-in".into()),
        ),
    };
    if let Some(g) = goldens.as_ref().filter(|g| g.model_sha256 != model_sha256) {
        bail!(
            "the goldens are for {} (SHA-256 {}), but {} is {model_sha256}: they would \
             compare nothing (regenerate them, or give --model to check across adapters)",
            g.model,
            g.model_sha256,
            info.name
        );
    }

    let mut rows = Vec::new();
    let mut runs: Vec<AdapterRun> = Vec::new();
    let labels = labels(&adapters);
    for (adapter, label) in adapters.iter().zip(&labels) {
        if !args.json {
            eprintln!("checking {label} ...");
        }
        let mut kernel_rows = Vec::new();
        let cases = pollster::block_on(Gpu::from_adapter(adapter))
            .map_err(anyhow::Error::from)
            .and_then(|gpu| {
                kernel_rows = kernels::run(&gpu);
                run_suite(gpu, &model)
            })
            .map_err(|e| format!("{e:#}"));
        runs.push(AdapterRun {
            label: label.clone(),
            cases,
        });
        let this = runs.last().expect("just pushed");
        let reference = runs.iter().find(|r| r.cases.is_ok());
        rows.extend(compare_run(this, goldens.as_ref(), reference));
        rows.extend(kernel_rows.iter().map(|k| Row::kernel(label, k)));
    }

    let regressions: Vec<String> = rows
        .iter()
        .filter(|r| !r.passed)
        .map(Row::regression)
        .collect();
    if args.json {
        let report = json!({
            "model": info.name,
            "goldens": goldens_from,
            "logprob_tolerance": LOGPROB_TOLERANCE,
            "kernel_tolerance": KERNEL_TOLERANCE,
            "adapters": labels,
            "rows": json_out::to_value(&rows)?,
            "regressions": regressions,
            "passed": regressions.is_empty(),
        });
        println!("{}", json_out::to_pretty(&report)?);
    } else {
        println!(
            "model {} ({} goldens); log-prob tolerance {LOGPROB_TOLERANCE:.0e}, kernel \
             tolerance {KERNEL_TOLERANCE:.0e}",
            info.name,
            goldens_from.as_deref().unwrap_or("no"),
        );
        print!("{}", report::table(&rows));
        if runs.len() == 1 && goldens.is_none() {
            println!("one adapter and no goldens: only the kernels were compared");
        }
    }
    if !regressions.is_empty() {
        bail!(
            "{} regression(s):\n  {}",
            regressions.len(),
            regressions.join("\n  ")
        );
    }
    Ok(())
}

/// Loads the model onto `gpu` (with its tuned kernels, as every command runs it) and runs
/// the suite.
fn run_suite(gpu: std::sync::Arc<Gpu>, model: &ModelArg) -> Result<Vec<CaseResult>> {
    let opened = bootstrap::open_on(gpu, model.open()?, Kernels::Tuned)?;
    suite::run(&opened)
}

/// The rows of `this` run: against the goldens (when there are any), and against the
/// `reference` run (the first adapter that ran) when that is another adapter.
fn compare_run(
    this: &AdapterRun,
    goldens: Option<&Goldens>,
    reference: Option<&AdapterRun>,
) -> Vec<Row> {
    let cases = match &this.cases {
        Ok(cases) => cases,
        Err(e) => return vec![Row::error(&this.label, "-", "suite", e.clone())],
    };
    let mut against: Vec<(&str, &[CaseResult])> = Vec::new();
    if let Some(g) = goldens {
        against.push(("goldens", &g.cases));
    }
    if let Some((label, Ok(cases))) = reference
        .filter(|r| r.label != this.label)
        .map(|r| (&r.label, &r.cases))
    {
        against.push((label, cases));
    }
    let mut rows = Vec::new();
    for (name, expected) in against {
        for e in expected {
            rows.push(match cases.iter().find(|c| c.case == e.case) {
                Some(got) => Row::case(
                    &this.label,
                    name,
                    &e.case,
                    compare(e, got),
                    LOGPROB_TOLERANCE,
                ),
                None => Row::error(
                    &this.label,
                    name,
                    &e.case,
                    "the run has no such case".into(),
                ),
            });
        }
        // A case the expected results lack would otherwise go unchecked.
        for c in cases
            .iter()
            .filter(|c| expected.iter().all(|e| e.case != c.case))
        {
            let why = format!("{name} have no such case");
            rows.push(Row::error(&this.label, name, &c.case, why));
        }
    }
    rows
}

/// Each adapter's label, numbered where two would otherwise read the same.
fn labels(adapters: &[wgpu::Adapter]) -> Vec<String> {
    let plain: Vec<String> = adapters
        .iter()
        .map(|a| AdapterSummary::of(a).label())
        .collect();
    plain
        .iter()
        .enumerate()
        .map(|(i, l)| match plain.iter().filter(|o| *o == l).count() {
            1 => l.clone(),
            _ => format!("{l}#{i}"),
        })
        .collect()
}
