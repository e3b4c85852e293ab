//! `sprout tune`: times every kernel variant that can serve the model's matmuls and its
//! attention, at the model's real shapes and the row counts steps use, on this adapter,
//! and writes the winners to the adapter's tune file (`gpu::tune_file`), which every
//! command then uses.
//!
//! Every variant computes bitwise the same result, so tuning changes speed only. A time is
//! the wall time of one submit of many dispatches (enough for a few milliseconds), divided
//! by their number, the best of three (`sprout::gpu::timing`); the first dispatch of each
//! variant (which builds its pipeline) is not timed. A variant that takes far longer than
//! the best one so far is dropped after one timing. Matmuls are timed with a plain store of
//! their outputs: the fused prologues and epilogues cost every shape alike.
//!
//! A variant is timed only after one run whose output has the default's bits on this
//! device; one that differs (a driver may contract `a*b+c` differently in two shaders) is
//! dropped and named in the report. Without `--budget-s` a slot (a site at a row count, or
//! attention) times a few likely candidates; with it, the whole generated space
//! (`MatmulShape::space`), each slot taking an even share of the time left, the smallest
//! row counts first, and slots the budget does not reach keep their defaults.

use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use indicatif::ProgressBar;
use serde_json::json;
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::attention::{AttentionFixture, AttentionVariant, SplitRows};
use sprout::gpu::kernels::matmul::{MatmulFixture, MatmulShape};
use sprout::gpu::timing;
use sprout::gpu::tune_file::{self, TuneFile};
use sprout::gpu::tuning::{AttentionChoice, KernelChoices, MatmulChoice, MatmulKey, ROW_BUCKETS};
use sprout::gpu::{BackendChoice, Gpu, Recorder};
use sprout::model::decoder::Decoder;

use crate::cli::bootstrap::{self, Kernels};
use crate::cli::cli_args::{LoadArgs, ModelArg};
use crate::cli::json_out;

#[derive(Args)]
pub struct TuneArgs {
    #[command(flatten)]
    model: ModelArg,
    #[command(flatten)]
    load: LoadArgs,
    /// The most rows a step computes that are tuned for (decodes and prefill chunks); row
    /// counts run 1, 2, 4, ... up to it.
    #[arg(long, default_value_t = 512)]
    max_rows: usize,
    /// Keys each query row attends in the attention measured.
    #[arg(long, default_value_t = 256)]
    attention_keys: usize,
    /// Explore the whole generated space of kernel variants (`MatmulShape::space`) for
    /// about this many seconds, the smallest row counts (decode) first, rather than the
    /// usual few candidates. The default of every site and row count reached is always
    /// timed; row counts the budget does not reach keep their defaults.
    #[arg(long, value_name = "SECONDS")]
    budget_s: Option<f64>,
    /// Print the results as JSON to stdout.
    #[arg(long)]
    json: bool,
}

/// One submit should take about this long when timing.
const SUBMIT_TARGET: Duration = Duration::from_millis(3);
const MAX_CALLS: u32 = 256;
/// A variant this many times slower than the best so far is timed once, not three times.
const HOPELESS: f64 = 8.0;

pub fn run(backend: BackendChoice, args: TuneArgs) -> Result<()> {
    if args.max_rows == 0 || args.attention_keys == 0 {
        anyhow::bail!("--max-rows and --attention-keys must be at least 1");
    }
    if let Some(b) = args.budget_s
        && !(b.is_finite() && b > 0.0)
    {
        anyhow::bail!("--budget-s must be a positive number of seconds, not {b}");
    }
    let opened = bootstrap::open(backend, args.load.open(&args.model, 0)?, Kernels::Untuned)?;
    let (decoder, gpu) = (&opened.decoder, &opened.gpu);
    let defaults = KernelChoices::defaults(gpu.cpu_shaped_defaults());
    let buckets: Vec<usize> = ROW_BUCKETS
        .iter()
        .copied()
        .take_while(|&m| m <= args.max_rows.max(1))
        .collect();
    let weights = decoder.weights()?;
    let sites = weights.matmul_sites();
    // Row counts in increasing order, every site at each: under a budget the decode row
    // counts, which rollouts spend their steps in, are tuned first.
    let slots = (sites.len() + 1) * buckets.len();
    let bar = progress(slots);
    let mut file = TuneFile::new(&gpu.adapter);
    file.models.push(opened.info.name.clone());
    let mut sweep = Sweep::new(args.budget_s, slots);
    for &m in &buckets {
        for &(site, weight) in &sites {
            let key = MatmulKey {
                site,
                format: weight.format,
                n: weight.rows,
                k: weight.cols,
            };
            bar.set_message(format!("{site:?} m={m}"));
            let Some(deadline) = sweep.next_slot() else {
                sweep.untuned.push(format!("{site:?} m={m}"));
                bar.inc(1);
                continue;
            };
            let fixture = MatmulFixture::new(gpu, weight, &pattern(m * weight.cols), m);
            let default = defaults.default_shape(&gpu.caps, key, m);
            let (k, n) = (weight.cols, weight.rows);
            let explored = match args.budget_s {
                Some(_) => MatmulShape::space(&gpu.caps, m, n, k),
                None => MatmulShape::candidates(&gpu.caps, m, n, k),
            };
            let mut shapes = vec![default];
            shapes.extend(explored.into_iter().filter(|s| *s != default));
            let reference = pollster::block_on(fixture.run(gpu, default))?;
            let mut best: Option<(MatmulShape, f64)> = None;
            let mut default_micros = f64::NAN;
            for shape in shapes {
                if shape != default && Instant::now() >= deadline {
                    break;
                }
                // A variant is timed only once it gives the default's bits on this device.
                if shape != default
                    && !bitwise_equal(&pollster::block_on(fixture.run(gpu, shape))?, &reference)
                {
                    sweep
                        .rejected
                        .push(format!("{site:?} m={m} {}", shape.key()));
                    continue;
                }
                let record = |rec: &mut Recorder| fixture.encode(gpu, rec, shape);
                let seconds = time_calls(gpu, &record, best.map(|b| b.1));
                sweep.timed += 1;
                if shape == default {
                    default_micros = 1e6 * seconds;
                }
                if best.is_none_or(|(_, t)| seconds < t) {
                    best = Some((shape, seconds));
                }
            }
            let (shape, seconds) = best.expect("the default gives its own bits");
            file.matmul.push(MatmulChoice {
                key,
                max_rows: m,
                shape,
                micros: 1e6 * seconds,
                default_micros,
            });
            bar.inc(1);
        }
        bar.set_message(format!("attention rows={m}"));
        match sweep.next_slot() {
            Some(_) => {
                let choice = tune_attention(gpu, decoder, m, args.attention_keys, &mut sweep)?;
                file.attention.push(choice);
            }
            None => sweep.untuned.push(format!("attention m={m}")),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    file.written_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = tune_file::path_for(&gpu.adapter)?;
    let measured = file.clone();
    let mut merged =
        tune_file::read(&path, &gpu.adapter)?.unwrap_or_else(|| TuneFile::new(&gpu.adapter));
    merged.merge(file);
    tune_file::write(&path, &merged)?;
    if args.json {
        let out = json!({
            "path": path.display().to_string(),
            "adapter": gpu.adapter,
            "model": opened.info.name,
            "matmul": json_out::to_value(&measured.matmul)?,
            "attention": json_out::to_value(&measured.attention)?,
            "sweep": sweep.summary(),
        });
        println!("{}", json_out::to_line(&out)?);
    } else {
        print_table(&measured);
        sweep.print();
        println!("tuned {}: {}", gpu.adapter.label(), path.display());
    }
    Ok(())
}

/// Seconds per call of `record`: the best of three submits of enough calls, or the first
/// timing alone when it is hopeless against `best`.
fn time_calls(gpu: &Gpu, record: &dyn Fn(&mut Recorder), best: Option<f64>) -> f64 {
    let hopeless = |t: Duration| best.is_some_and(|b| t.as_secs_f64() > HOPELESS * b);
    let found = timing::calibrate(gpu, record, (SUBMIT_TARGET, MAX_CALLS), &hopeless);
    if hopeless(found.per_call) {
        return found.per_call.as_secs_f64();
    }
    (0..2)
        .map(|_| timing::per_call(gpu, found.calls, record))
        .fold(found.per_call, Duration::min)
        .as_secs_f64()
}

/// Times every attention variant that gives the default's bits on `rows` decode rows of
/// `keys` keys each (blocks of 16 in order) and picks the fastest.
fn tune_attention(
    gpu: &Gpu,
    decoder: &Decoder,
    rows: usize,
    keys: usize,
    sweep: &mut Sweep,
) -> Result<AttentionChoice> {
    const BLOCK: usize = 16;
    let c = &decoder.config;
    let shape = decoder.attention_shape(rows, BLOCK);
    let per_seq = keys.div_ceil(BLOCK);
    let pool = pattern(rows * per_seq * BLOCK * c.kv_dim());
    let tables: Vec<u32> = (0..(rows * per_seq) as u32).collect();
    let rowinfo: Vec<RowInfo> = (0..rows)
        .map(|r| RowInfo::new((r * per_seq) as u32, keys as u32 - 1, 0))
        .collect();
    let q = pattern(shape.q_len());
    let fixture = AttentionFixture::new(
        gpu,
        shape,
        (&q, &pool, &pool),
        &tables,
        &rowinfo,
        SplitRows::Decodes,
    );
    // What the engine runs untuned: the default's query loads give way to direct ones
    // where the query does not fit them (a head of 128 and more).
    let default = decoder.attention_variant(rows);
    let default = AttentionVariant {
        q_loads: default.q_loads_for(&shape),
        ..default
    };
    let reference = pollster::block_on(fixture.run(gpu, default))?;
    let mut best: Option<(AttentionVariant, f64)> = None;
    let mut default_micros = f64::NAN;
    for variant in AttentionVariant::all() {
        if !variant.q_loads.fits(&shape) {
            continue;
        }
        if variant != default
            && !bitwise_equal(&pollster::block_on(fixture.run(gpu, variant))?, &reference)
        {
            let name = format!("{:?}-{:?}", variant.split, variant.q_loads);
            sweep.rejected.push(format!("attention m={rows} {name}"));
            continue;
        }
        sweep.timed += 1;
        let planned = fixture.plan(gpu, variant.split);
        let record = |rec: &mut Recorder| fixture.encode(gpu, rec, variant.q_loads, &planned);
        let seconds = time_calls(gpu, &record, best.map(|b| b.1));
        if variant == default {
            default_micros = 1e6 * seconds;
        }
        if best.is_none_or(|(_, t)| seconds < t) {
            best = Some((variant, seconds));
        }
    }
    let (variant, seconds) = best.expect("the default gives its own bits");
    Ok(AttentionChoice {
        head_dim: c.head_dim,
        group: shape.group(),
        max_rows: rows,
        variant,
        micros: 1e6 * seconds,
        default_micros,
    })
}

/// Whether two outputs hold the same bits (NaN included).
fn bitwise_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The tuning's time budget, and what it timed, dropped and left out.
struct Sweep {
    /// With a budget: when it ends, and the slots (a site at a row count, or attention)
    /// not yet started.
    budget: Option<(Instant, usize)>,
    budget_s: Option<f64>,
    started: Instant,
    timed: usize,
    /// Variants whose output differed from the default's on this device.
    rejected: Vec<String>,
    /// Slots the budget did not reach (they keep their defaults).
    untuned: Vec<String>,
}

impl Sweep {
    fn new(budget_s: Option<f64>, slots: usize) -> Sweep {
        let budget = budget_s.map(|b| (Instant::now() + Duration::from_secs_f64(b), slots));
        Sweep {
            budget,
            budget_s,
            started: Instant::now(),
            timed: 0,
            rejected: Vec::new(),
            untuned: Vec::new(),
        }
    }

    /// Starts the next slot: the time by which it should stop exploring (its even share of
    /// what is left, so time a slot leaves passes on to the next), or `None` when the
    /// budget is spent. Without a budget a slot times all its candidates.
    fn next_slot(&mut self) -> Option<Instant> {
        let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let Some((end, left)) = &mut self.budget else {
            return Some(far);
        };
        let now = Instant::now();
        if now >= *end {
            return None;
        }
        let share = (*end - now) / (*left).max(1) as u32;
        *left = left.saturating_sub(1);
        Some(now + share)
    }

    fn summary(&self) -> serde_json::Value {
        json!({
            "budget_s": self.budget_s,
            "seconds": self.started.elapsed().as_secs_f64(),
            "variants_timed": self.timed,
            "rejected": self.rejected,
            "untuned": self.untuned,
        })
    }

    fn print(&self) {
        let seconds = self.started.elapsed().as_secs_f64();
        println!(
            "{} variants timed in {seconds:.1} s; {} dropped for giving other bits than the \
             default{}",
            self.timed,
            self.rejected.len(),
            match self.untuned.len() {
                0 => String::new(),
                n => format!("; {n} untuned (budget spent), keeping their defaults"),
            }
        );
        for r in &self.rejected {
            println!("  dropped: {r}");
        }
    }
}

fn print_table(file: &TuneFile) {
    println!(
        "{:<9} {:>6} {:>6} {:>6} {:>5}  {:<24} {:>10} {:>12} {:>7}",
        "site", "format", "n", "k", "rows", "fastest", "µs", "default µs", "gain"
    );
    for c in &file.matmul {
        println!(
            "{:<9} {:>6} {:>6} {:>6} {:>5}  {:<24} {:>10.2} {:>12.2} {:>6.2}x",
            format!("{:?}", c.key.site),
            c.key.format.name(),
            c.key.n,
            c.key.k,
            c.max_rows,
            c.shape.key(),
            c.micros,
            c.default_micros,
            c.default_micros / c.micros
        );
    }
    for a in &file.attention {
        println!(
            "{:<9} {:>6} {:>6} {:>6} {:>5}  {:<24} {:>10.2} {:>12.2} {:>6.2}x",
            "attention",
            "-",
            a.head_dim,
            a.group,
            a.max_rows,
            format!("{:?}-{:?}", a.variant.split, a.variant.q_loads),
            a.micros,
            a.default_micros,
            a.default_micros / a.micros
        );
    }
}

fn progress(total: usize) -> ProgressBar {
    crate::cli::progress::bar("tuning {bar:30} {pos}/{len}  {msg}", total as u64)
}

/// Values in [-0.5, 0.5), deterministic.
fn pattern(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 1000.0)
        .collect()
}
