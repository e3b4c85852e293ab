//! The fused matmuls the decoder runs, each against the CPU references of the chain of
//! kernels it replaces, on one shape of each kind (a CPU tile of one row and one of four,
//! the GPU matrix-vector and GEMM shapes, forced whatever the adapter), and with every
//! shape there is bitwise equal to the others:
//! - RMSNorm, gate and up (rows interleaved), SiLU-gate: rmsnorm -> matmul x2 -> silu_gate;
//!   and the same with GELU (tanh) for a sample of the formats (the epilogue reads only the
//!   outputs, which every format's cases already check): ... -> gelu_gate;
//! - the residual add: residual_add(h, matmul);
//! - RMSNorm, q|k|v (+ bias), RoPE on q and k, the KV-cache write:
//!   rmsnorm -> matmul x3 -> add_bias -> rope -> kv_write; and bitwise the same with x
//!   normalised first by the standalone norm and read plainly (a LoRA site's input);
//! - RMSNorm of gathered rows and the vocabulary projection: gather_rows -> rmsnorm -> matmul;
//! - RMSNorm and the q|k|v projection stored as it is (models with q and k norms, which
//!   `head_norm_rope` finishes): rmsnorm -> matmul.

use sprout::formats::TensorData;
use sprout::formats::{QK, WeightFormat};
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::matmul::{
    self, Gather, Matmul, MatmulInputs, MatmulShape, NormArgs, Output, QkvArgs, QkvBias,
};
use sprout::gpu::kernels::norm_add::{self, NormAdd, NormOutput};
use sprout::gpu::kernels::rope::{RopeLayout, RopeTable};
use sprout::gpu::{Gpu, Tensor};
use sprout::model::fused_weights::{interleave_rows, stack_rows};
use sprout::reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32, whole_blocks};
use crate::matmul::{for_shape, problem, shapes_on};

/// The norm rounds its output to f32 before the products (the reference keeps f64 until
/// then), RoPE's table is f64 rounded to f32: relative errors near 1e-7, an NMSE near 1e-13.
const TOLERANCE: f64 = 1e-9;
const EPS: f32 = 1e-5;
/// Values before the norm's weights in the vectors buffer: the kernels must honour offsets.
const LEAD: usize = 3;

/// Which fused matmul a case checks.
#[derive(Clone, Copy, Debug)]
enum Fusion {
    SiluGate,
    GeluGate,
    Residual,
    Qkv { bias: bool },
    Gathered,
    NormStore,
}

/// The inputs of one fused case: `m` rows of `k` values (scaled by `x_scale`), a norm's
/// weights, and weights in `format`.
struct Inputs {
    format: WeightFormat,
    m: usize,
    k: usize,
    x: Vec<f32>,
    norm: Vec<f32>,
    seed: u64,
}

impl Inputs {
    fn new(format: WeightFormat, m: usize, k: usize, x_scale: f32, seed: u64) -> Inputs {
        let mut rng = SplitMix64::new(seed);
        let x = rng.vec(m * k, x_scale);
        let norm = (0..k).map(|_| 1.0 + rng.uniform(0.5)).collect();
        Inputs {
            format,
            m,
            k,
            x,
            norm,
            seed,
        }
    }

    /// A weight of `n` rows in the case's format (and its dequantized values).
    fn weight(&self, n: usize, salt: u64) -> MatmulInputs {
        problem(self.format, 1, self.k, n, self.seed * 31 + salt)
    }

    /// The norm's weights at `LEAD`, then `extra`, as the vectors buffer.
    fn vectors(&self, extra: &[f32]) -> Vec<f32> {
        let mut v = vec![9.0; LEAD];
        v.extend(&self.norm);
        v.extend(extra);
        v
    }

    fn normed(&self) -> Vec<f32> {
        reference::rmsnorm::rmsnorm(&self.x, &self.norm, EPS, self.k)
    }
}

fn tensor(p: &MatmulInputs) -> TensorData {
    TensorData {
        format: p.format,
        rows: p.n,
        cols: p.k,
        bytes: p.bytes.clone(),
    }
}

fn norm_args(vectors: &Tensor) -> Option<NormArgs<'_>> {
    Some(NormArgs {
        vectors,
        offset: LEAD,
        eps: EPS,
    })
}

/// What one run produced, as one flat vector (outputs concatenated), and the reference.
fn run(gpu: &Gpu, fusion: Fusion, i: &Inputs, shape: MatmulShape) -> (Vec<f32>, Vec<f32>) {
    match fusion {
        Fusion::SiluGate => gated(gpu, i, shape, Gate::Silu),
        Fusion::GeluGate => gated(gpu, i, shape, Gate::Gelu),
        Fusion::Residual => residual(gpu, i, shape),
        Fusion::Qkv { bias } => qkv(gpu, i, shape, bias, false),
        Fusion::Gathered => gathered(gpu, i, shape),
        Fusion::NormStore => norm_store(gpu, i, shape),
    }
}

/// The activation of a gated MLP.
#[derive(Clone, Copy, Debug)]
enum Gate {
    Silu,
    Gelu,
}

fn gated(gpu: &Gpu, i: &Inputs, shape: MatmulShape, gate_fn: Gate) -> (Vec<f32>, Vec<f32>) {
    let inter = 34;
    let (gate, up) = (i.weight(inter, 1), i.weight(inter, 2));
    let joined = interleave_rows(&tensor(&gate), &tensor(&up)).unwrap();
    let w =
        sprout::gpu::GpuWeight::upload(gpu, joined.format, &joined.bytes, 2 * inter, i.k).unwrap();
    let (x, vectors) = (gpu.upload(&i.x), gpu.upload(&i.vectors(&[])));
    let y = gpu.upload(&vec![f32::NAN; i.m * inter]);
    let mut rec = gpu.recorder();
    let op = Matmul {
        x: &x,
        m: i.m,
        weight: &w,
        norm: norm_args(&vectors),
        gather: None,
        fold: None,
        output: match gate_fn {
            Gate::Silu => Output::SiluGate(&y),
            Gate::Gelu => Output::GeluGate(&y),
        },
        lora: None,
    };
    matmul::encode(gpu, &mut rec, &op, shape);
    rec.submit();
    let xn = i.normed();
    let g = reference::matmul::matmul(&xn, &gate.w, i.m, i.k, inter);
    let u = reference::matmul::matmul(&xn, &up.w, i.m, i.k, inter);
    let want = match gate_fn {
        Gate::Silu => reference::elementwise::silu_gate(&g, &u),
        Gate::Gelu => reference::elementwise::gelu_gate(&g, &u),
    };
    (read_f32(gpu, &y), want)
}

fn residual(gpu: &Gpu, i: &Inputs, shape: MatmulShape) -> (Vec<f32>, Vec<f32>) {
    let n = 70;
    let p = i.weight(n, 3);
    let h0 = SplitMix64::new(i.seed + 5).vec(i.m * n, 2.0);
    let (x, w, h) = (
        gpu.upload(&i.x),
        p.upload_weight(gpu, None).unwrap(),
        gpu.upload(&h0),
    );
    let mut rec = gpu.recorder();
    let op = Matmul {
        x: &x,
        m: i.m,
        weight: &w,
        norm: None,
        gather: None,
        fold: None,
        output: Output::Residual(&h),
        lora: None,
    };
    matmul::encode(gpu, &mut rec, &op, shape);
    rec.submit();
    let y = reference::matmul::matmul(&i.x, &p.w, i.m, i.k, n);
    (
        read_f32(gpu, &h),
        reference::elementwise::residual_add(&h0, &y),
    )
}

/// Heads of the q|k|v case: 3 query heads over 1 kv head of 16, a table of 50 positions.
const HEADS: usize = 3;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 16;
const THETA: f64 = 10000.0;
const TABLE: usize = 50;
const POOL_ROWS: usize = 40;

/// The fused q|k|v matmul; `prenormed`: x normalised first by the standalone norm
/// (`norm_add`, stored) and read plainly, as the decoder runs a site with a LoRA adapter.
fn qkv(
    gpu: &Gpu,
    i: &Inputs,
    shape: MatmulShape,
    bias: bool,
    prenormed: bool,
) -> (Vec<f32>, Vec<f32>) {
    let (q_dim, kv_dim) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let (wq, wk, wv) = (i.weight(q_dim, 4), i.weight(kv_dim, 5), i.weight(kv_dim, 6));
    let joined = stack_rows(&[&tensor(&wq), &tensor(&wk), &tensor(&wv)]).unwrap();
    let n = q_dim + 2 * kv_dim;
    let w = sprout::gpu::GpuWeight::upload(gpu, joined.format, &joined.bytes, n, i.k).unwrap();
    let mut rng = SplitMix64::new(i.seed + 9);
    let biases = if bias { rng.vec(n, 0.3) } else { vec![] };
    // Positions: 0, the table's last, then random; distinct random slots in the pool.
    let positions: Vec<u32> = (0..i.m)
        .map(|r| match r {
            0 => 0,
            1 => TABLE as u32 - 1,
            _ => rng.below(TABLE as u64) as u32,
        })
        .collect();
    let mut slots: Vec<u32> = (0..POOL_ROWS as u32).collect();
    for j in (1..slots.len()).rev() {
        slots.swap(j, rng.below(j as u64 + 1) as usize);
    }
    slots.truncate(i.m);
    let rowinfo: Vec<RowInfo> = (0..i.m)
        .map(|r| RowInfo::new(0, positions[r], slots[r]))
        .collect();
    let sentinel = vec![7.0f32; POOL_ROWS * kv_dim];
    let (x, vectors) = (gpu.upload(&i.x), gpu.upload(&i.vectors(&biases)));
    let (rows, q) = (
        gpu.upload(&rowinfo),
        gpu.upload(&vec![f32::NAN; i.m * q_dim]),
    );
    let (k_pool, v_pool) = (gpu.upload(&sentinel), gpu.upload(&sentinel));
    let table = RopeTable::new(gpu, HEAD_DIM, THETA, TABLE).expect("a small table fits");
    let out = QkvOut {
        table: &table,
        rows: &rows,
        q: &q,
        k_pool: &k_pool,
        v_pool: &v_pool,
    };
    let biases_at = bias.then_some(QkvBias {
        vectors: &vectors,
        offset: LEAD + i.k,
    });
    let got = match prenormed {
        false => run_qkv(
            gpu,
            shape,
            (&x, i.m, &w),
            norm_args(&vectors),
            biases_at,
            &out,
        ),
        true => {
            let xn = gpu.upload(&vec![f32::NAN; i.m * i.k]);
            let norm = NormAdd {
                x: &x,
                m: i.m,
                width: i.k,
                vectors: &vectors,
                offset: LEAD,
                eps: EPS,
                out: &xn,
                output: NormOutput::Store,
            };
            let mut rec = gpu.recorder();
            norm_add::encode(gpu, &mut rec, &norm);
            rec.submit();
            run_qkv(gpu, shape, (&xn, i.m, &w), None, biases_at, &out)
        }
    };

    let xn = i.normed();
    let proj = |w: &MatmulInputs, n: usize, at: usize| {
        let y = reference::matmul::matmul(&xn, &w.w, i.m, i.k, n);
        match bias {
            true => reference::elementwise::add_bias(&y, &biases[at..at + n]),
            false => y,
        }
    };
    let (qo, ko, vo) = (
        proj(&wq, q_dim, 0),
        proj(&wk, kv_dim, q_dim),
        proj(&wv, kv_dim, q_dim + kv_dim),
    );
    let rope = |y: &[f32], heads| {
        let layout = RopeLayout::Interleaved;
        reference::rope::rope(y, &positions, heads, HEAD_DIM, THETA, layout)
    };
    let (qr, kr) = (rope(&qo, HEADS), rope(&ko, KV_HEADS));
    let (mut k_ref, mut v_ref) = (sentinel.clone(), sentinel);
    reference::kv_write::kv_write(&kr, &vo, &slots, kv_dim, &mut k_ref, &mut v_ref);
    (got, [qr, k_ref, v_ref].concat())
}

/// Where the q|k|v epilogue writes, and what it reads besides x and the weight.
struct QkvOut<'a> {
    table: &'a RopeTable,
    rows: &'a Tensor,
    q: &'a Tensor,
    k_pool: &'a Tensor,
    v_pool: &'a Tensor,
}

/// Runs the fused q|k|v matmul on `shape` (x, its rows, the weight), returns q, then the K
/// pool, then the V pool.
fn run_qkv(
    gpu: &Gpu,
    shape: MatmulShape,
    (x, m, weight): (&Tensor, usize, &sprout::gpu::GpuWeight),
    norm: Option<NormArgs>,
    bias: Option<QkvBias>,
    out: &QkvOut,
) -> Vec<f32> {
    let mut rec = gpu.recorder();
    let op = Matmul {
        x,
        m,
        weight,
        norm,
        gather: None,
        fold: None,
        output: Output::Qkv(QkvArgs {
            bias,
            q_dim: HEADS * HEAD_DIM,
            kv_dim: KV_HEADS * HEAD_DIM,
            head_dim: HEAD_DIM,
            rope: out.table,
            rowinfo: out.rows,
            q: out.q,
            k_pool: out.k_pool,
            v_pool: out.v_pool,
        }),
        lora: None,
    };
    matmul::encode(gpu, &mut rec, &op, shape);
    rec.submit();
    [
        read_f32(gpu, out.q),
        read_f32(gpu, out.k_pool),
        read_f32(gpu, out.v_pool),
    ]
    .concat()
}

fn gathered(gpu: &Gpu, i: &Inputs, shape: MatmulShape) -> (Vec<f32>, Vec<f32>) {
    let n = 66;
    let p = i.weight(n, 7);
    // Rows of x picked out of order, one twice.
    let picks: Vec<u32> = (0..i.m as u32).rev().chain([0]).collect();
    let (x, w, vectors) = (
        gpu.upload(&i.x),
        p.upload_weight(gpu, None).unwrap(),
        gpu.upload(&i.vectors(&[])),
    );
    let (rows, y) = (
        gpu.upload(&picks),
        gpu.upload(&vec![f32::NAN; picks.len() * n]),
    );
    let mut rec = gpu.recorder();
    let op = Matmul {
        x: &x,
        m: picks.len(),
        weight: &w,
        norm: norm_args(&vectors),
        gather: Some(Gather {
            index: &rows,
            first: 0,
        }),
        fold: None,
        output: Output::Store(&y),
        lora: None,
    };
    matmul::encode(gpu, &mut rec, &op, shape);
    // The same rows in two dispatches (as chunks of logits are computed), the second
    // starting further into the indices: the same values, bit for bit.
    let half = picks.len() / 2;
    let parts = [(0, half), (half, picks.len() - half)].map(|(first, m)| {
        let y = gpu.upload(&vec![f32::NAN; m * n]);
        let op = Matmul {
            x: &x,
            m,
            weight: &w,
            norm: norm_args(&vectors),
            gather: Some(Gather {
                index: &rows,
                first,
            }),
            fold: None,
            output: Output::Store(&y),
            lora: None,
        };
        matmul::encode(gpu, &mut rec, &op, shape);
        y
    });
    rec.submit();
    let whole = read_f32(gpu, &y);
    let split = [read_f32(gpu, &parts[0]), read_f32(gpu, &parts[1])].concat();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&split),
        bits(&whole),
        "gathered rows in two dispatches vs one"
    );
    let picked = reference::elementwise::gather_rows(&i.x, &picks, i.k);
    let xn = reference::rmsnorm::rmsnorm(&picked, &i.norm, EPS, i.k);
    (
        whole,
        reference::matmul::matmul(&xn, &p.w, picks.len(), i.k, n),
    )
}

fn norm_store(gpu: &Gpu, i: &Inputs, shape: MatmulShape) -> (Vec<f32>, Vec<f32>) {
    let n = 80;
    let p = i.weight(n, 10);
    let (x, w, vectors) = (
        gpu.upload(&i.x),
        p.upload_weight(gpu, None).unwrap(),
        gpu.upload(&i.vectors(&[])),
    );
    let y = gpu.upload(&vec![f32::NAN; i.m * n]);
    let mut rec = gpu.recorder();
    let op = Matmul {
        x: &x,
        m: i.m,
        weight: &w,
        norm: norm_args(&vectors),
        gather: None,
        fold: None,
        output: Output::Store(&y),
        lora: None,
    };
    matmul::encode(gpu, &mut rec, &op, shape);
    rec.submit();
    let want = reference::matmul::matmul(&i.normed(), &p.w, i.m, i.k, n);
    (read_f32(gpu, &y), want)
}

/// (m, k): one row, a decode batch, more rows than a matrix-vector workgroup serves, a
/// prefill chunk; k of one and several blocks.
const ROWS: &[(usize, usize)] = &[(1, 64), (5, 96), (9, 32), (33, 64)];
/// For the float formats: k not a multiple of 32, or of 4.
const ODD_K: &[(usize, usize)] = &[(3, 37), (6, 46)];
/// For the K-quants (rows of whole super-blocks): a sample, one row and a batch, k of one
/// super-block and two (as `matmul::SUPER_BLOCK_SHAPES`).
/// The formats GELU's epilogue is checked with: plain floats, a 32-block and a K-quant.
const GELU_FORMATS: &[WeightFormat] = &[WeightFormat::F32, WeightFormat::Q8_0, WeightFormat::Q4_K];
const SUPER_BLOCK_ROWS: &[(usize, usize)] = &[(1, 256), (9, 512)];

/// One shape of each kind: the accuracy cases run these (the agreement cases all of them).
fn kinds() -> Vec<MatmulShape> {
    use sprout::gpu::kernels::matmul::XLoads;
    vec![
        MatmulShape::Tile {
            rows: 1,
            cols: 2,
            loads: XLoads::Shuffled,
        },
        MatmulShape::Tile {
            rows: 4,
            cols: 4,
            loads: XLoads::Direct,
        },
        MatmulShape::MatVec {
            wg: 128,
            nr: 8,
            xr: 4,
        },
        MatmulShape::Gemm { tm: 4 },
    ]
}

pub fn cases() -> Vec<Case> {
    let fusions = [
        Fusion::SiluGate,
        Fusion::Residual,
        Fusion::Qkv { bias: false },
        Fusion::Qkv { bias: true },
        Fusion::Gathered,
        Fusion::NormStore,
    ];
    let mut cases = Vec::new();
    for format in WeightFormat::ALL {
        let rows = match format.block_len() {
            1 => [ROWS, ODD_K].concat(),
            QK => ROWS.to_vec(),
            _ => SUPER_BLOCK_ROWS.to_vec(),
        };
        // GELU's epilogue on a sample of formats and one size of each kind: the same
        // pairs as SiLU's, another function of them.
        let gelu = GELU_FORMATS.contains(&format);
        for fusion in fusions.into_iter().chain(gelu.then_some(Fusion::GeluGate)) {
            let sizes = match fusion {
                Fusion::GeluGate => &rows[rows.len() - 1..],
                _ => &rows[..],
            };
            for shape in kinds() {
                for &(m, k) in sizes {
                    let name = format!("{fusion:?}/{format}/{}/m{m}_k{k}", shape.key());
                    let case = Case::new("fused", name, move |gpu| {
                        let i = Inputs::new(format, m, k, 1.0, (m * 100 + k) as u64);
                        let (got, want) = run(gpu, fusion, &i, shape);
                        check_close(&got, &want, TOLERANCE)
                    });
                    cases.push(for_shape(case, shape));
                }
            }
            // Every shape the adapter runs gives bitwise the same outputs.
            let name = format!("{fusion:?}/{format}/shapes-agree");
            cases.push(Case::new("fused", name, move |gpu| {
                let i = Inputs::new(format, 11, whole_blocks(format, 64), 1.0, 77);
                let shapes = shapes_on(gpu);
                let (first, want) = run(gpu, fusion, &i, shapes[0]);
                let outcome = check_close(&first, &want, TOLERANCE)?;
                for &shape in &shapes[1..] {
                    let (got, _) = run(gpu, fusion, &i, shape);
                    check_bitwise(
                        &format!("{fusion:?} on {} vs {}", shape.key(), shapes[0].key()),
                        &got,
                        &first,
                    )?;
                }
                // The q|k|v projection of x normalised beforehand and read plainly (a
                // LoRA site's input) gives the fused norm's bits on every shape.
                if let Fusion::Qkv { bias } = fusion {
                    for &shape in &shapes {
                        let (got, _) = qkv(gpu, &i, shape, bias, true);
                        check_bitwise(
                            &format!("{fusion:?} prenormed on {} vs fused", shape.key()),
                            &got,
                            &first,
                        )?;
                    }
                }
                Ok(outcome)
            }));
        }
    }
    // Gate values far from 0 (|gate| in the tens to thousands with the norm's weights
    // x400, and past 1e13, whose cube overflows f32, with x1e13): silu and gelu_tanh must
    // give x or -0, never inf or NaN, and values between must stay accurate.
    for (gate_fn, loudness) in [
        (Gate::Silu, 400.0),
        (Gate::Gelu, 20.0),
        (Gate::Gelu, 400.0),
        (Gate::Gelu, 1e13),
    ] {
        let name = format!("{gate_fn:?}Gate/extremes-x{loudness:e}");
        cases.push(Case::new("fused", name, move |gpu| {
            let i = Inputs::new(WeightFormat::F32, 4, 64, 1.0, 3);
            let loud = Inputs {
                norm: i.norm.iter().map(|v| v * loudness).collect(),
                ..i
            };
            let mut outcome = Outcome {
                nmse: 0.0,
                tolerance: TOLERANCE,
            };
            for shape in shapes_on(gpu) {
                let (got, want) = gated(gpu, &loud, shape, gate_fn);
                if let Some(bad) = got.iter().find(|v| !v.is_finite()) {
                    return Err(format!("{gate_fn:?} on {} gave {bad}", shape.key()));
                }
                outcome = check_close(&got, &want, TOLERANCE)?;
            }
            Ok(outcome)
        }));
    }
    // A position past the RoPE table writes NaN to q and k (never a wrong rotation), and
    // v as it is.
    cases.push(Case::new("fused", "Qkv/position-past-table", |gpu| {
        past_table(gpu)
    }));
    cases
}

fn past_table(gpu: &Gpu) -> Result<Outcome, String> {
    let (q_dim, kv_dim) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let i = Inputs::new(WeightFormat::F16, 1, 32, 1.0, 5);
    let n = q_dim + 2 * kv_dim;
    let p = i.weight(n, 8);
    let (x, w, vectors) = (
        gpu.upload(&i.x),
        p.upload_weight(gpu, None).unwrap(),
        gpu.upload(&i.vectors(&[])),
    );
    // The row writes slot 2 of a 4-slot pool; v is the plain projection there.
    let rows = gpu.upload(&[RowInfo::new(0, TABLE as u32, 2)]);
    let projected = reference::matmul::matmul(&i.normed(), &p.w, 1, i.k, n);
    let v_want = &projected[q_dim + kv_dim..];
    let table = RopeTable::new(gpu, HEAD_DIM, THETA, TABLE).expect("a small table fits");
    let slot = 2 * kv_dim..3 * kv_dim;
    let mut worst = Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    };
    for shape in shapes_on(gpu) {
        // Fresh buffers of a sentinel per shape: what a shape does not write stays 7.
        let sentinel = 7.0f32;
        let q = gpu.upload(&vec![sentinel; q_dim]);
        let k_pool = gpu.upload(&vec![sentinel; 4 * kv_dim]);
        let v_pool = gpu.upload(&vec![sentinel; 4 * kv_dim]);
        let out = QkvOut {
            table: &table,
            rows: &rows,
            q: &q,
            k_pool: &k_pool,
            v_pool: &v_pool,
        };
        let all = run_qkv(gpu, shape, (&x, 1, &w), norm_args(&vectors), None, &out);
        let (qv, rest) = all.split_at(q_dim);
        let (kv, vv) = rest.split_at(4 * kv_dim);
        let key = shape.key();
        if !qv.iter().all(|v| v.is_nan()) {
            return Err(format!("{key}: q past the table is not NaN"));
        }
        if !kv[slot.clone()].iter().all(|v| v.is_nan()) {
            return Err(format!("{key}: k past the table is not NaN"));
        }
        let others = |pool: &[f32]| {
            (0..4 * kv_dim)
                .filter(|j| !slot.contains(j))
                .all(|j| pool[j] == sentinel)
        };
        if !others(kv) || !others(vv) {
            return Err(format!("{key}: a slot other than the row's was written"));
        }
        let outcome = check_close(&vv[slot.clone()], v_want, TOLERANCE)
            .map_err(|e| format!("{key}: v is not the projection: {e}"))?;
        if outcome.nmse > worst.nmse {
            worst = outcome;
        }
    }
    Ok(worst)
}
