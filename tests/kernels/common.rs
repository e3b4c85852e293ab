//! Shared machinery of the kernel suite: adapters, cases, tolerances, the summary table.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use libtest_mimic::{Failed, Trial};
use sprout::formats::WeightFormat;
use sprout::gpu::kernels::Logits;
use sprout::gpu::{BackendChoice, Gpu, Recorder, Tensor, list_adapters};

/// `k` rounded up to whole blocks of `format`: a case's row length for every format, the
/// same for the float and 32-value formats, and whole super-blocks of 256 for the K-quants.
pub fn whole_blocks(format: WeightFormat, k: usize) -> usize {
    k.next_multiple_of(format.block_len())
}

/// What a passing case measured: its worst NMSE against the reference, and the bound.
pub struct Outcome {
    pub nmse: f64,
    pub tolerance: f64,
}

type CaseFn = dyn Fn(&Gpu) -> Result<Outcome, String> + Send + Sync;

/// A feature a case needs (its name), and whether an adapter has it.
type Need = (&'static str, fn(&Gpu) -> bool);

impl Outcome {
    /// A case checked bit for bit against its reference.
    pub fn exact() -> Outcome {
        Outcome {
            nmse: 0.0,
            tolerance: 0.0,
        }
    }
}

/// One kernel check, run once per adapter.
pub struct Case {
    pub kernel: &'static str,
    pub name: String,
    pub run: Arc<CaseFn>,
    /// A feature the case needs, and whether an adapter has it; on adapters without it
    /// the case is reported as ignored, never as passed.
    pub needs: Option<Need>,
}

impl Case {
    pub fn new(
        kernel: &'static str,
        name: impl Into<String>,
        run: impl Fn(&Gpu) -> Result<Outcome, String> + Send + Sync + 'static,
    ) -> Case {
        Case {
            kernel,
            name: name.into(),
            run: Arc::new(run),
            needs: None,
        }
    }

    /// The case runs only on adapters for which `has` holds (`feature` names it).
    pub fn needing(mut self, feature: &'static str, has: fn(&Gpu) -> bool) -> Case {
        self.needs = Some((feature, has));
        self
    }
}

/// Every adapter wgpu finds, opened once for the whole suite.
pub fn gpus() -> &'static [Arc<Gpu>] {
    static GPUS: OnceLock<Vec<Arc<Gpu>>> = OnceLock::new();
    GPUS.get_or_init(|| {
        pollster::block_on(async {
            let mut out = Vec::new();
            // SPROUT_BACKEND narrows the suite to one backend (a GPU machine's Vulkan, say).
            let choice = BackendChoice::from_env().expect("SPROUT_BACKEND names a backend");
            for adapter in list_adapters(choice).await {
                match Gpu::from_adapter(&adapter).await {
                    Ok(gpu) => out.push(gpu),
                    Err(e) => eprintln!("could not open {}: {e}", adapter.get_info().name),
                }
            }
            out
        })
    })
}

fn require_gpu() -> bool {
    std::env::var("SPROUT_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    worst: f64,
}

fn summary() -> &'static Mutex<BTreeMap<(String, &'static str), Tally>> {
    static SUMMARY: OnceLock<Mutex<BTreeMap<(String, &'static str), Tally>>> = OnceLock::new();
    SUMMARY.get_or_init(Default::default)
}

/// A case that cannot run here: reported ignored, and failing if someone runs it anyway
/// (`--include-ignored`), so it can never count as passed.
fn not_run(name: String, why: &str) -> Trial {
    let why = format!("not run: {why}");
    Trial::test(name, move || Err(why.into())).with_ignored_flag(true)
}

/// One trial per (adapter, case); a failing placeholder when a GPU is required and absent.
pub fn trials(cases: Vec<Case>) -> Vec<Trial> {
    let gpus = gpus();
    if gpus.is_empty() {
        if require_gpu() {
            return vec![Trial::test("no-gpu-adapter", || {
                Err("SPROUT_REQUIRE_GPU=1 but wgpu found no adapter \
                     (on Linux: apt-get install mesa-vulkan-drivers libvulkan1)"
                    .into())
            })];
        }
        eprintln!("no GPU adapter found: the kernel tests are reported as ignored");
        return cases
            .into_iter()
            .map(|c| {
                not_run(
                    format!("{}::{}", c.kernel, c.name),
                    "no GPU adapter was found",
                )
            })
            .collect();
    }
    let mut trials = Vec::new();
    // CI names the backends it installed (SPROUT_REQUIRE_BACKENDS=vulkan,gl): each must be
    // found, so a missing driver cannot shrink the suite to fewer adapters unnoticed.
    let required = std::env::var("SPROUT_REQUIRE_BACKENDS").unwrap_or_default();
    for backend in required.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let found = gpus.iter().any(|g| g.adapter.backend == backend);
        let backend = backend.to_string();
        trials.push(Trial::test(format!("adapter-present::{backend}"), move || {
            if found {
                Ok(())
            } else {
                Err(format!("SPROUT_REQUIRE_BACKENDS names {backend}, but wgpu found no {backend} adapter").into())
            }
        }));
    }
    for gpu in gpus {
        let label = gpu.adapter.label();
        // wgpu's GL backend holds its one context while it waits on a fence, and another
        // thread that wants it gives up after a few seconds: run GL cases one at a time.
        let one_at_a_time = Arc::new(Mutex::new(()));
        let serial = gpu.adapter.backend == "gl";
        for case in &cases {
            if let Some((feature, has)) = case.needs
                && !has(gpu)
            {
                let name = format!("{label}::{}::{} (needs {feature})", case.kernel, case.name);
                trials.push(not_run(name, &format!("{label} lacks {feature}")));
                continue;
            }
            let gpu = gpu.clone();
            let run = case.run.clone();
            let kernel = case.kernel;
            let adapter = label.clone();
            let lock = one_at_a_time.clone();
            trials.push(
                Trial::test(
                    format!("{label}::{}::{}", case.kernel, case.name),
                    move || {
                        let result = {
                            let _turn =
                                serial.then(|| lock.lock().unwrap_or_else(|e| e.into_inner()));
                            run(&gpu)
                        };
                        let mut s = summary().lock().unwrap();
                        let t = s.entry((adapter, kernel)).or_default();
                        match result {
                            Ok(o) => {
                                t.passed += 1;
                                t.worst = t.worst.max(o.nmse / o.tolerance.max(f64::MIN_POSITIVE));
                                Ok(())
                            }
                            Err(e) => {
                                t.failed += 1;
                                Err(Failed::from(e))
                            }
                        }
                    },
                )
                .with_kind(case.kernel),
            );
        }
    }
    trials
}

/// The per-adapter table printed after the run.
pub fn print_summary() {
    let s = summary().lock().unwrap();
    if s.is_empty() {
        return;
    }
    println!("\nkernel suite, per adapter (worst = largest NMSE / tolerance over the cases):");
    println!(
        "{:<28} {:<14} {:>6} {:>6} {:>10}",
        "adapter", "kernel", "passed", "failed", "worst"
    );
    let mut totals: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for ((adapter, kernel), t) in s.iter() {
        println!(
            "{:<28} {:<14} {:>6} {:>6} {:>10.2e}",
            adapter, kernel, t.passed, t.failed, t.worst
        );
        let e = totals.entry(adapter).or_default();
        e.0 += t.passed;
        e.1 += t.failed;
    }
    for (adapter, (p, f)) in totals {
        println!("{adapter}: {p} passed, {f} failed");
    }
}

/// Normalised mean squared error: Σ(a - b)² / Σb².
pub fn nmse(actual: &[f32], expected: &[f32]) -> f64 {
    let mut err = 0.0f64;
    let mut norm = 0.0f64;
    for (a, b) in actual.iter().zip(expected) {
        let d = *a as f64 - *b as f64;
        err += d * d;
        norm += *b as f64 * *b as f64;
    }
    if norm == 0.0 { err } else { err / norm }
}

/// Passes when the lengths agree, every value is finite and the NMSE is within `tolerance`.
pub fn check_close(actual: &[f32], expected: &[f32], tolerance: f64) -> Result<Outcome, String> {
    if actual.len() != expected.len() {
        return Err(format!(
            "length {} != expected {}",
            actual.len(),
            expected.len()
        ));
    }
    if let Some(i) = actual.iter().position(|v| !v.is_finite()) {
        return Err(format!("value {i} is {}", actual[i]));
    }
    let e = nmse(actual, expected);
    if e > tolerance {
        let worst = actual
            .iter()
            .zip(expected)
            .enumerate()
            .max_by(|a, b| (a.1.0 - a.1.1).abs().total_cmp(&(b.1.0 - b.1.1).abs()))
            .map(|(i, (a, b))| format!("worst at {i}: {a} vs {b}"))
            .unwrap_or_default();
        return Err(format!("NMSE {e:.3e} exceeds {tolerance:.1e} ({worst})"));
    }
    Ok(Outcome { nmse: e, tolerance })
}

/// Passes when `a` and `b` are bitwise identical.
pub fn check_bitwise(what: &str, a: &[f32], b: &[f32]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{what}: lengths {} and {}", a.len(), b.len()));
    }
    match a
        .iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(format!("{what}: value {i} differs: {} vs {}", a[i], b[i])),
    }
}

pub fn read_f32(gpu: &Gpu, t: &Tensor) -> Vec<f32> {
    pollster::block_on(gpu.read_f32(t)).expect("read-back")
}

pub fn read_u32(gpu: &Gpu, t: &Tensor) -> Vec<u32> {
    pollster::block_on(gpu.read_u32(t)).expect("read-back")
}

/// `logits` (`[rows, vocab]`) changed in place by what `encode` records, once for each of
/// `chunkings` (rows per chunk of the [`Logits`]; `None`: the largest chunks the adapter
/// binds): the first run's values read back, once every other run gave the same bits.
pub fn changed_in_chunks(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    chunkings: &[Option<usize>],
    encode: impl Fn(&mut Recorder, &Logits),
) -> Result<Vec<f32>, String> {
    let runs: Vec<Vec<f32>> = chunkings
        .iter()
        .map(|&chunk_rows| {
            let l = Logits::upload(gpu, logits, vocab, chunk_rows);
            let mut rec = gpu.recorder();
            encode(&mut rec, &l);
            rec.submit();
            pollster::block_on(l.read(gpu, l.rows)).expect("read-back")
        })
        .collect();
    for (chunk_rows, run) in chunkings.iter().zip(&runs).skip(1) {
        check_bitwise(
            &format!("in chunks of {chunk_rows:?} rows vs {:?}", chunkings[0]),
            run,
            &runs[0],
        )?;
    }
    Ok(runs.into_iter().next().expect("at least one chunking"))
}
