//! Kernel benchmarks at a model's shapes, against the adapter's own copy bandwidth.
//!
//! The shapes come from `SPROUT_BENCH_MODEL`: a built-in config name or a Hugging Face
//! `config.json` (the names `--load-format dummy` takes; default `smollm2-135m`). The weights
//! are random, in every format, so no model file is needed. The figures below name
//! SmolLM2-135M's shapes. The kernel variants are the ones the adapter's tune file chooses
//! (`sprout tune`), or its untuned defaults (always with `SPROUT_BENCH_UNTUNED=1`); with
//! `SPROUT_BENCH_SHAPES=all` the CPU-shaped and GPU-shaped defaults are measured too, and
//! the benchmark ids name the matmul shape and attention variant.
//!
//! What is measured, on the adapter `SPROUT_BACKEND` picks (default: the best one found):
//!
//! - `copy/buffer_to_buffer/64MiB`: `encoder.copy_buffer_to_buffer` of a 64 MiB buffer into
//!   another, and `copy/kernel_vec4/64MiB`: a trivial WGSL kernel (`dst[i] = src[i]` over
//!   `vec4<f32>`, defined here) over the same buffers. Their bytes count both the read and
//!   the write (2 x 64 MiB), so they are the bandwidth ceilings the other rows are held to:
//!   what the driver's copy reaches, and what a compute kernel can reach.
//! - `copy/fma_vec4/<invocations>`: the arithmetic ceiling, a WGSL kernel (defined here)
//!   whose invocations run four independent chains of vec4 fma and load nothing: the
//!   GFLOP/s an adapter's compute units reach, which the other rows' GFLOP/s are held to
//!   ("of fma").
//! - `matmul/<format>/<in>x<out>/m<rows>`: `y[m, out] = x[m, in] · Wᵀ` for every weight format
//!   at the decode batches m = 1, 8, 32 and a prefill chunk m = 128, on the shape sprout
//!   uses for m rows (`KernelChoices::matmul_shape`), for the MLP up/gate (576 x 1536) and down
//!   (1536 x 576) projections; the vocabulary projection (576 x 49152) only in q8_0 (what
//!   SmolLM2's GGUF stores it in) and f16. Bytes are the weight's stored bytes + `x` read +
//!   `y` written, each counted once (the least traffic; a shape may read a weight more than
//!   once).
//! - `lora/...`: the adapter path on a sample of shapes, at a decode batch of m = 8 rows,
//!   every row with the adapter. `lora/a_product/f32/<in>x<out>/m8`: a LoRA A product, the
//!   stacked A of q, k and v (3 x rank 16 = 48 rows) over the hidden size, stored f32 (the
//!   narrow weights' own shapes); `lora/gate_up/q4_1/<in>x<out>/m8/{base,lora_r32}`: the
//!   gate|up weight (2 x 1536 rows) in q4_1 without and with the +LoRA term of rank 32 (gate's
//!   and up's rank 16 each), so their difference is what the term costs the base product;
//!   `.../rms_norm/{base,lora_r32}`: the same with x read through an RMSNorm, as the base
//!   model runs gate|up (with an adapter the decoder normalises x once beforehand and runs
//!   the plain product: the fused norm and the term together cost more than apart).
//!   Bytes and flops add the term's t and B' (and 2·m·out·rank) to the matmul's.
//! - `attention/decode/32x256`: one decode step of 32 sequences with 256 keys each (the
//!   query row is position 255), and `attention/prefill/128x128`: a first prefill chunk of
//!   128 query rows over its own 128 keys (causal: row p attends keys 0 ..= p); SmolLM2's
//!   9 query heads over 3 KV heads of dim 64, blocks of 16 keys in a shuffled pool. Bytes are
//!   q and out + every cached key and value once + block tables and row descriptors.
//!
//! How (`sprout::gpu::timing`): each sample records `calls` dispatches (or copies) into one
//! command encoder, then times `queue.submit` + `Gpu::wait_idle` and divides by `calls`, so
//! a figure is the kernel's own time plus its share of one submit, not submit latency; the
//! recording is not timed. `calls` is calibrated once per benchmark (growing from 1, at
//! most 1024) until one submit takes about 10 ms. The inputs are set up by the kernels'
//! own fixtures (`MatmulFixture`, `AttentionFixture`), as the kernel suite's are. The same buffers are used every call, so on
//! a GPU whose cache holds a whole weight a small kernel can beat the memory bandwidth.
//! Every group takes 10 samples, flat sampling, 0.5 s warm-up and about 2 s of measurement
//! (longer when one submit is longer), so the suite runs in a few minutes on lavapipe.
//!
//! How to run: `SPROUT_BACKEND=vulkan cargo bench --bench kernels` (all), or with a filter
//! on the ids above, e.g. `cargo bench --bench kernels -- matmul/q8_0` or `-- copy`.
//!
//! How to read the table printed at the end: one line per benchmark this run measured
//! (read from criterion's `<target>/criterion/<id>/new/estimates.json`, the mean), with the
//! dispatches per submit, the mean time per call, the bandwidth (the bytes above / time),
//! the arithmetic rate (matmul: 2·m·in·out flops; attention: see [`attention`]) and that
//! bandwidth as a fraction of `copy/buffer_to_buffer` ("of b2b") and of `copy/kernel_vec4`
//! ("of kcopy"), when those were measured in the same run. A memory-bound kernel near 100%
//! of kcopy is as fast as its traffic allows; one far below is limited by something else
//! (arithmetic, latency, too few workgroups). Criterion compares each result with the
//! previous run in the same target directory, whatever adapter that one used.

use std::cell::OnceCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use sprout::formats::{WeightFormat, quantize};
use sprout::gpu::grid::grid;
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::attention::{
    AttentionFixture, AttentionShape, AttentionVariant, SplitRows,
};
use sprout::gpu::kernels::matmul::{LoraInputs, MatmulFixture, MatmulShape};
use sprout::gpu::pipelines::{Access, KernelSpec};
use sprout::gpu::timing;
use sprout::gpu::tuning::{KernelChoices, MatmulKey, MatmulSite};
use sprout::gpu::{BackendChoice, Gpu, GpuWeight, Recorder};
use sprout::rng::SplitMix64;

/// The model whose shapes are measured: hidden size, MLP size, vocabulary, heads.
struct Dims {
    hidden: usize,
    intermediate: usize,
    vocab: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl Dims {
    /// `SPROUT_BENCH_MODEL`'s config, or SmolLM2-135M's.
    fn from_env() -> Dims {
        let name = std::env::var("SPROUT_BENCH_MODEL").unwrap_or_else(|_| "smollm2-135m".into());
        let c = sprout::model::open::dummy_config(&name).expect("SPROUT_BENCH_MODEL");
        Dims {
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            vocab: c.vocab_size,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
        }
    }
}

const BLOCK_SIZE: usize = 16;

/// Rows of `x`: three decode batches and a prefill chunk.
const ROWS: [usize; 4] = [1, 8, 32, 128];
/// Formats of the vocabulary projection (the MLP shapes take every format).
const VOCAB_FORMATS: [WeightFormat; 2] = [WeightFormat::Q8_0, WeightFormat::F16];
/// Bytes of each copy buffer.
const COPY_BYTES: u64 = 64 << 20;

/// One submit should take about this long; calls per submit stop doubling there.
const SUBMIT_TARGET: Duration = Duration::from_millis(10);
const MAX_CALLS: u32 = 1024;

/// The arithmetic ceiling: FMA_STEPS steps of four independent vec4 fma chains per
/// invocation, whose sum is stored so that nothing is optimised away.
const FMA_WGSL: &str = r#"
struct Params {
    steps: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(64)
fn fma_vec4(@builtin(global_invocation_id) gid: vec3<u32>) {
    let seed = f32(gid.x) * 1e-6;
    var a = vec4<f32>(seed);
    var b = vec4<f32>(seed + 1.0);
    var c = vec4<f32>(seed + 2.0);
    var d = vec4<f32>(seed + 3.0);
    let m = vec4<f32>(0.999);
    let k = vec4<f32>(1e-3);
    for (var i = 0u; i < p.steps; i += 1u) {
        a = fma(a, m, k);
        b = fma(b, m, k);
        c = fma(c, m, k);
        d = fma(d, m, k);
    }
    dst[gid.x] = (a + b) + (c + d);
}
"#;
const FMA_STEPS: u32 = 4096;
const FMA_WORKGROUPS: u32 = 256;

const COPY_WGSL: &str = r#"
struct Params {
    n: u32, // vec4s to copy
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<f32>>;

// ceil(n / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn copy_vec4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i < p.n) {
        dst[i] = src[i];
    }
}
"#;

/// The ceilings' own kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ceiling {
    Fma,
    Copy,
}

impl KernelSpec for Ceiling {
    fn name(&self) -> String {
        format!("bench/{}", self.entry())
    }

    fn source(&self) -> String {
        match self {
            Ceiling::Fma => FMA_WGSL.into(),
            Ceiling::Copy => COPY_WGSL.into(),
        }
    }

    fn entry(&self) -> &'static str {
        match self {
            Ceiling::Fma => "fma_vec4",
            Ceiling::Copy => "copy_vec4",
        }
    }

    fn storage(&self) -> &'static [Access] {
        match self {
            Ceiling::Fma => &[Access::ReadWrite],
            Ceiling::Copy => &[Access::Read, Access::ReadWrite],
        }
    }
}

/// A benchmark this binary registered: enough to find its estimate and rate it.
struct Entry {
    group: &'static str,
    function: String,
    parameter: String,
    bytes: u64,
    /// Floating-point operations per call (0: not counted).
    flops: u64,
    /// Dispatches per submit; set once the benchmark runs (so unset when filtered out).
    calls: Rc<OnceCell<u32>>,
}

impl Entry {
    fn id(&self) -> String {
        format!("{}/{}/{}", self.group, self.function, self.parameter)
    }
}

/// Registers and (unless filtered out) runs one benchmark of `record` in `group`.
struct Bench<'a> {
    gpu: &'a Gpu,
    group_name: &'static str,
    entries: &'a mut Vec<Entry>,
}

impl Bench<'_> {
    fn run(
        &mut self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        (function, parameter): (String, String),
        (bytes, flops): (u64, u64),
        record: &dyn Fn(&mut Recorder),
    ) {
        let calls = Rc::new(OnceCell::new());
        self.entries.push(Entry {
            group: self.group_name,
            function: function.clone(),
            parameter: parameter.clone(),
            bytes,
            flops,
            calls: calls.clone(),
        });
        let gpu = self.gpu;
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function(BenchmarkId::new(function, parameter), |b| {
            let calls = *calls.get_or_init(|| {
                timing::calibrate(gpu, record, (SUBMIT_TARGET, MAX_CALLS), &|_| false).calls
            });
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| timing::per_call(gpu, calls, record))
                    .sum()
            })
        });
    }
}

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
}

/// Values in [-0.5, 0.5), deterministic.
fn pattern(len: usize, salt: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i + salt) * 7919 % 1000) as f32 - 500.0) / 1000.0)
        .collect()
}

/// The copy ceilings: the driver's buffer copy and a plain vec4 copy kernel.
fn copy(c: &mut Criterion, gpu: &Gpu, entries: &mut Vec<Entry>) {
    let mut group = c.benchmark_group("copy");
    configure(&mut group);
    let mut bench = Bench {
        gpu,
        group_name: "copy",
        entries,
    };
    // Both copies bind a whole buffer: keep it within the adapter's binding limit.
    let size = COPY_BYTES.min(gpu.caps.max_binding.min(gpu.caps.max_buffer) / 16 * 16);
    let label = format!("{}MiB", size >> 20);
    let src = gpu.upload(&pattern(size as usize / 4, 1));
    let dst = gpu.zeros(size as usize / 4);
    bench.run(
        &mut group,
        ("buffer_to_buffer".into(), label.clone()),
        (2 * size, 0),
        &|rec| {
            rec.encoder()
                .copy_buffer_to_buffer(&src.buffer, 0, &dst.buffer, 0, size)
        },
    );

    let fma = gpu.pipeline(&Ceiling::Fma);
    let invocations = 64 * FMA_WORKGROUPS;
    let sums = gpu.zeros(4 * invocations as usize);
    let fma_params: [u32; 4] = [FMA_STEPS, 0, 0, 0];
    let flops = u64::from(invocations) * u64::from(FMA_STEPS) * 4 * 4 * 2;
    bench.run(
        &mut group,
        ("fma_vec4".into(), invocations.to_string()),
        (16 * u64::from(invocations), flops),
        &|enc| {
            enc.dispatch(
                &fma,
                bytemuck::bytes_of(&fma_params),
                &[&sums.buffer],
                [FMA_WORKGROUPS, 1, 1],
            )
        },
    );

    let kernel = gpu.pipeline(&Ceiling::Copy);
    let n = (size / 16) as usize;
    let params: [u32; 4] = [n as u32, 0, 0, 0];
    let groups = grid(gpu, n.div_ceil(256));
    bench.run(
        &mut group,
        ("kernel_vec4".into(), label),
        (2 * size, 0),
        &|enc| {
            enc.dispatch(
                &kernel,
                bytemuck::bytes_of(&params),
                &[&src.buffer, &dst.buffer],
                groups,
            )
        },
    );
    group.finish();
}

/// Every weight format at SmolLM2-135M's MLP shapes (each shape whose rows it can store),
/// q8_0 and f16 at the vocabulary.
fn matmul(
    c: &mut Criterion,
    gpu: &Gpu,
    choices: &KernelChoices,
    d: &Dims,
    entries: &mut Vec<Entry>,
) {
    let mut group = c.benchmark_group("matmul");
    configure(&mut group);
    let mut bench = Bench {
        gpu,
        group_name: "matmul",
        entries,
    };
    let max_rows = ROWS[ROWS.len() - 1];
    let shapes: [(usize, usize, &[WeightFormat]); 3] = [
        (d.hidden, d.intermediate, &WeightFormat::ALL),
        (d.intermediate, d.hidden, &WeightFormat::ALL),
        (d.hidden, d.vocab, &VOCAB_FORMATS),
    ];
    for (k, n, formats) in shapes {
        let values = pattern(n * k, 0);
        let x = pattern(max_rows * k, 3);
        // The K-quants store rows of whole 256-value super-blocks: SmolLM2's hidden size
        // (576) is not one, its intermediate size (1536) is.
        for &format in formats.iter().filter(|f| f.row_bytes(k).is_ok()) {
            let bytes = quantize(format, &values, k).expect("quantizing the weight");
            let weight = GpuWeight::upload(gpu, format, &bytes, n, k).expect("uploading");
            for m in ROWS {
                let fixture = MatmulFixture::new(gpu, &weight, &x[..m * k], m);
                let traffic = bytes.len() as u64 + 4 * (m * k + m * n) as u64;
                let flops = 2 * (m * k * n) as u64;
                let key = MatmulKey {
                    site: MatmulSite::Down,
                    format,
                    n,
                    k,
                };
                for shape in bench_shapes(gpu, choices, key, m) {
                    bench.run(
                        &mut group,
                        (
                            format.name().into(),
                            format!("{k}x{n}/m{m}/{}", shape.key()),
                        ),
                        (traffic, flops),
                        &|rec| fixture.encode(gpu, rec, shape),
                    );
                }
            }
        }
    }
    group.finish();
}

/// Rows of x in the LoRA cases: a decode batch.
const LORA_ROWS: usize = 8;
/// Rank of each adapted projection in the LoRA cases.
const LORA_RANK: usize = 16;

/// The adapter path on a sample of shapes: an A product (q|k|v's stacked A, f32) and the
/// gate|up product in q4_1 without and with its +LoRA term.
fn lora(c: &mut Criterion, gpu: &Gpu, choices: &KernelChoices, d: &Dims, entries: &mut Vec<Entry>) {
    let mut group = c.benchmark_group("lora");
    configure(&mut group);
    let mut bench = Bench {
        gpu,
        group_name: "lora",
        entries,
    };
    let m = LORA_ROWS;
    let k = d.hidden;
    let x = pattern(m * k, 3);

    // The A product: the stacked A of q, k and v.
    let (format, n) = (WeightFormat::F32, 3 * LORA_RANK);
    let bytes = quantize(format, &pattern(n * k, 5), k).expect("quantizing A");
    let a = GpuWeight::upload(gpu, format, &bytes, n, k).expect("uploading A");
    let fixture = MatmulFixture::new(gpu, &a, &x, m);
    let key = MatmulKey {
        site: MatmulSite::Qkv,
        format,
        n,
        k,
    };
    let traffic = bytes.len() as u64 + 4 * (m * k + m * n) as u64;
    for shape in bench_shapes(gpu, choices, key, m) {
        bench.run(
            &mut group,
            (
                format!("a_product/{}", format.name()),
                format!("{k}x{n}/m{m}/{}", shape.key()),
            ),
            (traffic, 2 * (m * k * n) as u64),
            &|rec| fixture.encode(gpu, rec, shape),
        );
    }

    // The base gate|up product, without and with the term of gate's and up's adapters.
    let (format, n, rank) = (WeightFormat::Q4_1, 2 * d.intermediate, 2 * LORA_RANK);
    let bytes = quantize(format, &pattern(n * k, 0), k).expect("quantizing the weight");
    let weight = GpuWeight::upload(gpu, format, &bytes, n, k).expect("uploading the weight");
    let term = LoraInputs::random(n, rank, vec![1; m], 0.2, 7);
    let base = MatmulFixture::new(gpu, &weight, &x, m);
    let with = MatmulFixture::new(gpu, &weight, &x, m).with_lora(gpu, &term);
    // As the base model runs it: x read through the MLP's RMSNorm.
    let g = pattern(k, 9);
    let base_normed = MatmulFixture::new(gpu, &weight, &x, m).with_rms_norm(gpu, &g);
    let with_normed = MatmulFixture::new(gpu, &weight, &x, m)
        .with_rms_norm(gpu, &g)
        .with_lora(gpu, &term);
    let key = MatmulKey {
        site: MatmulSite::GateUp,
        format,
        n,
        k,
    };
    let traffic = bytes.len() as u64 + 4 * (m * k + m * n) as u64;
    let flops = 2 * (m * k * n) as u64;
    let term_traffic = 4 * (m * rank + n * rank) as u64;
    for shape in bench_shapes(gpu, choices, key, m) {
        let id = format!("{k}x{n}/m{m}/{}", shape.key());
        let function = format!("gate_up/{}", format.name());
        bench.run(
            &mut group,
            (function.clone(), format!("{id}/base")),
            (traffic, flops),
            &|rec| base.encode(gpu, rec, shape),
        );
        bench.run(
            &mut group,
            (function.clone(), format!("{id}/lora_r{rank}")),
            (traffic + term_traffic, flops + 2 * (m * n * rank) as u64),
            &|rec| with.encode(gpu, rec, shape),
        );
        bench.run(
            &mut group,
            (function.clone(), format!("{id}/rms_norm/base")),
            (traffic, flops),
            &|rec| base_normed.encode(gpu, rec, shape),
        );
        bench.run(
            &mut group,
            (function, format!("{id}/rms_norm/lora_r{rank}")),
            (traffic + term_traffic, flops + 2 * (m * n * rank) as u64),
            &|rec| with_normed.encode(gpu, rec, shape),
        );
    }
    group.finish();
}

/// The shapes a matmul is measured with: the adapter's default for `m` rows (tuned if a
/// tune file is in force), and with `SPROUT_BENCH_SHAPES=all` both kinds' defaults.
fn bench_shapes(gpu: &Gpu, choices: &KernelChoices, key: MatmulKey, m: usize) -> Vec<MatmulShape> {
    let mut shapes = vec![choices.matmul_shape(&gpu.caps, key, m)];
    if std::env::var("SPROUT_BENCH_SHAPES").is_ok_and(|v| v == "all") {
        let gpu_default = MatmulShape::for_gpu(m, key.n, key.k);
        // The GPU default with each weight block decoded once for all its rows of x.
        let all_rows = match gpu_default {
            MatmulShape::MatVec { wg, nr, .. } => MatmulShape::MatVec {
                wg,
                nr,
                xr: gpu_default.rows_per_workgroup(m),
            },
            other => other,
        };
        for other in [
            MatmulShape::for_cpu(&gpu.caps, m, key.n),
            gpu_default,
            all_rows,
        ] {
            if !shapes.contains(&other) {
                shapes.push(other);
            }
        }
    }
    shapes
}

/// One paged attention dispatch, and what it moves and computes.
struct AttentionInputs {
    fixture: AttentionFixture,
    bytes: u64,
    flops: u64,
}

/// `seqs` sequences of `keys` cached keys each, with query rows at their last
/// `rows_per_seq` positions, their blocks shuffled through the pool.
///
/// Flops: `4 * Σ(keys a row attends) * heads * head_dim`, i.e. 2 for `q · k` and 2 for
/// `p · v` per head, key and dimension; a row at position p attends p + 1 keys, so a
/// causal prefill chunk counts half of rows * keys (the exp and the softmax's bookkeeping
/// are not counted).
fn attention_inputs(
    gpu: &Gpu,
    d: &Dims,
    seqs: usize,
    keys: usize,
    rows_per_seq: usize,
) -> AttentionInputs {
    let kv_dim = d.n_kv_heads * d.head_dim;
    let q_row = d.n_heads * d.head_dim;
    let per_seq = keys.div_ceil(BLOCK_SIZE);
    let num_blocks = seqs * per_seq;
    // A fixed shuffle of the pool's blocks (Fisher-Yates).
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    let mut rng = SplitMix64::new(0x2545_f491);
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut rows = Vec::new();
    let mut attended = 0;
    for s in 0..seqs {
        for pos in keys - rows_per_seq..keys {
            rows.push(RowInfo::new((s * per_seq) as u32, pos as u32, 0));
            attended += pos + 1;
        }
    }
    let t = seqs * rows_per_seq;
    let shape = AttentionShape::new(t, d.n_heads, d.n_kv_heads, d.head_dim, BLOCK_SIZE);
    let pool_len = num_blocks * BLOCK_SIZE * kv_dim;
    let bytes = 4 * (2 * t * q_row + 2 * seqs * keys * kv_dim + num_blocks + 2 * t);
    let (q, k_pool, v_pool) = (
        pattern(t * q_row, 5),
        pattern(pool_len, 7),
        pattern(pool_len, 11),
    );
    AttentionInputs {
        // Only decodes (a sequence's only row) are split, as the engine splits them.
        fixture: AttentionFixture::new(
            gpu,
            shape,
            (&q, &k_pool, &v_pool),
            &ids,
            &rows,
            SplitRows::Decodes,
        ),
        bytes: bytes as u64,
        flops: (4 * attended * d.n_heads * d.head_dim) as u64,
    }
}

/// The paged attention kernel: a decode step of 32 sequences x 256 keys and a prefill
/// chunk of 128 rows over 128 keys.
fn attention(
    c: &mut Criterion,
    gpu: &Gpu,
    choices: &KernelChoices,
    d: &Dims,
    entries: &mut Vec<Entry>,
) {
    let mut group = c.benchmark_group("attention");
    configure(&mut group);
    let mut bench = Bench {
        gpu,
        group_name: "attention",
        entries,
    };
    for (name, seqs, keys, rows_per_seq) in [("decode", 32, 256, 1), ("prefill", 1, 128, 128)] {
        let a = attention_inputs(gpu, d, seqs, keys, rows_per_seq);
        let shape = a.fixture.shape;
        let heads_per_kv = d.n_heads / d.n_kv_heads;
        let mut variants = vec![choices.attention(d.head_dim, heads_per_kv, shape.t)];
        if std::env::var("SPROUT_BENCH_SHAPES").is_ok_and(|v| v == "all") {
            for v in [
                AttentionVariant::default_for(true),
                AttentionVariant::default_for(false),
            ] {
                if !variants.contains(&v) {
                    variants.push(v);
                }
            }
        }
        for variant in variants {
            let planned = a.fixture.plan(gpu, variant.split);
            let q_loads = variant.q_loads_for(&shape);
            // Query rows x keys per sequence, and the variant.
            let parameter = format!("{}x{keys}/{:?}-{:?}", shape.t, variant.split, q_loads);
            bench.run(
                &mut group,
                (name.into(), parameter),
                (a.bytes, a.flops),
                &|rec| a.fixture.encode(gpu, rec, q_loads, &planned),
            );
        }
    }
    group.finish();
}

/// Where criterion writes: as criterion finds it (`CRITERION_HOME`, else
/// `$CARGO_TARGET_DIR/criterion`, else cargo's target directory, else `target/criterion`).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    let from_cargo = std::env::var_os("CARGO").and_then(|cargo| {
        let out = std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .ok()?;
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(PathBuf::from(meta["target_directory"].as_str()?).join("criterion"))
    });
    from_cargo.unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// A name as criterion turns it into a directory name.
fn filename_safe(s: &str) -> String {
    let mut out = s.replace(['?', '"', '/', '\\', '*', '<', '>', ':', '|', '^'], "_");
    let mut end = out.len().min(64);
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out.truncate(end);
    out
}

/// The mean time per call in ns that criterion estimated for `entry` in this run, or
/// `None` when it did not measure it (filtered out, `--test`, `--list`, ...).
fn mean_ns(dir: &std::path::Path, entry: &Entry, since: SystemTime) -> Option<f64> {
    entry.calls.get()?;
    let path = dir
        .join(filename_safe(entry.group))
        .join(filename_safe(&entry.function))
        .join(filename_safe(&entry.parameter))
        .join("new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn format_time(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

fn print_summary(gpu: &Gpu, choices: &KernelChoices, entries: &[Entry], since: SystemTime) {
    let dir = criterion_dir();
    let measured: Vec<(&Entry, f64)> = entries
        .iter()
        .filter_map(|e| mean_ns(&dir, e, since).map(|ns| (e, ns)))
        .collect();
    if measured.is_empty() {
        return;
    }
    // bytes per ns = GB/s.
    let rate = |id: &str| {
        measured
            .iter()
            .find(|(e, _)| e.group == "copy" && e.function == id)
            .map(|(e, ns)| e.bytes as f64 / ns)
    };
    let (b2b, kcopy) = (rate("buffer_to_buffer"), rate("kernel_vec4"));
    // flops per ns = GFLOP/s.
    let fma = measured
        .iter()
        .find(|(e, _)| e.group == "copy" && e.function == "fma_vec4")
        .map(|(e, ns)| e.flops as f64 / ns);
    let fraction = |gbs: f64, of: Option<f64>| match of {
        Some(of) => format!("{:.0}%", 100.0 * gbs / of),
        None => "-".into(),
    };
    let width = measured
        .iter()
        .map(|(e, _)| e.id().len())
        .max()
        .unwrap_or(0);
    println!();
    println!(
        "kernels on {} ({}; {})",
        gpu.adapter.label(),
        gpu.adapter.name,
        gpu.adapter.driver_info
    );
    println!(
        "kernel choices: {}",
        choices
            .source
            .as_ref()
            .map_or("untuned defaults".to_string(), |f| format!("tuned by {f}"))
    );
    println!(
        "calls: dispatches per submit; time: mean per call; GB/s: the bytes a call moves (copies \
         count read + write) per second; of b2b / of kcopy: that GB/s over the \
         copy_buffer_to_buffer / copy-kernel GB/s; of fma: GFLOP/s over the fma kernel's"
    );
    println!(
        "{:<width$}  {:>6}  {:>10}  {:>8}  {:>8}  {:>7}  {:>8}  {:>7}",
        "benchmark", "calls", "time", "GB/s", "GFLOP/s", "of b2b", "of kcopy", "of fma"
    );
    for (e, ns) in &measured {
        let gbs = e.bytes as f64 / ns;
        let (gflops, of_fma) = if e.flops > 0 {
            let rate = e.flops as f64 / ns;
            (format!("{rate:.2}"), fraction(rate, fma))
        } else {
            ("-".into(), "-".into())
        };
        println!(
            "{:<width$}  {:>6}  {:>10}  {:>8.2}  {:>8}  {:>7}  {:>8}  {:>7}",
            e.id(),
            e.calls.get().copied().unwrap_or(0),
            format_time(*ns),
            gbs,
            gflops,
            fraction(gbs, b2b),
            fraction(gbs, kcopy),
            of_fma,
        );
    }
}

fn main() {
    let since = SystemTime::now();
    let mut c = Criterion::default().configure_from_args();
    let dims = Dims::from_env();
    let choice = BackendChoice::from_env().expect("SPROUT_BACKEND");
    let gpu = pollster::block_on(Gpu::open(choice)).expect("a GPU adapter");
    let choices = match std::env::var("SPROUT_BENCH_UNTUNED") {
        Ok(_) => KernelChoices::defaults(gpu.cpu_shaped_defaults()),
        Err(_) => sprout::gpu::tune_file::choices(&gpu).expect("reading the tune file"),
    };
    let mut entries = Vec::new();
    copy(&mut c, &gpu, &mut entries);
    matmul(&mut c, &gpu, &choices, &dims, &mut entries);
    lora(&mut c, &gpu, &choices, &dims, &mut entries);
    attention(&mut c, &gpu, &choices, &dims, &mut entries);
    c.final_summary();
    print_summary(&gpu, &choices, &entries, since);
}
