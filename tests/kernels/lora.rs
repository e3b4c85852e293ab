//! The LoRA term of the fused matmul (`y = W x + B' t` for the rows whose RowInfo has the
//! adapter), on a sample rather than every format: the term reads neither x nor the
//! weight, so the store (plain prologue, through `MatmulFixture`), residual, SiLU-gate and
//! q|k|v (bias, RoPE, KV write) epilogues with a float, a 32-block and a K-quant format, at
//! ranks 8, 13 and 16, cover its paths. Every batch mixes rows with and without the adapter.
//! - Against the references, the term added before the epilogue's work; every shape the
//!   adapter runs gives bitwise the same outputs.
//! - A row without the adapter is bitwise what the kernel without the term gives it, and
//!   every row with it differs from that (the term is there); a row is bitwise the same
//!   alone and in batches of other sizes, on every shape. These bits depend on neither
//!   the format nor the epilogue: each epilogue checks them with one of the formats.
//! - A weight split into parts (the term's row is the part's first row plus n) gives
//!   bitwise the whole weight's outputs.
//!
//! The q|k|v kernel with the term binds 10 storage buffers: on an adapter with fewer per
//! stage its cases are reported ignored (by name), as the engine refuses such an adapter.

use sprout::formats::{TensorData, WeightFormat};
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::matmul::{
    self, LoraArgs, LoraInputs, Matmul, MatmulFixture, MatmulInputs, MatmulShape, NormArgs, Output,
    QkvArgs, QkvBias,
};
use sprout::gpu::kernels::rope::{RopeLayout, RopeTable};
use sprout::gpu::{Gpu, GpuWeight, Tensor};
use sprout::model::fused_weights::{interleave_rows, stack_rows};
use sprout::reference;
use sprout::reference::matmul::Lora;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32, whole_blocks};
use crate::matmul::{problem, shapes_on};

/// As the fused cases': the norm and RoPE's table round to f32 where the reference does not.
const TOLERANCE: f64 = 1e-9;
const EPS: f32 = 1e-5;
/// Values before the norm's weights in the vectors buffer.
const LEAD: usize = 3;
/// q|k|v: 3 query heads over 1 kv head of 16, a table of 50 positions, a pool of 40 rows.
const HEADS: usize = 3;
const HEAD_DIM: usize = 16;
const THETA: f64 = 10000.0;
const TABLE: usize = 50;
const POOL_ROWS: usize = 40;
/// Gate and up rows of the SiLU-gate case.
const INTER: usize = 34;
/// The formats sampled: a float, a 32-value block and a K-quant; each its own rank (R = 13
/// is no multiple of 4, as the sum of a q, k and v adapter's ranks need not be).
const FORMATS: [(WeightFormat, usize); 3] = [
    (WeightFormat::F32, 8),
    (WeightFormat::Q4_1, 13),
    (WeightFormat::Q4_K, 16),
];

/// Which epilogue the term is added before.
#[derive(Clone, Copy, Debug)]
enum Fusion {
    Store,
    Residual,
    SiluGate,
    Qkv,
}

impl Fusion {
    const ALL: [Fusion; 4] = [
        Fusion::Store,
        Fusion::Residual,
        Fusion::SiluGate,
        Fusion::Qkv,
    ];

    /// The case, restricted to adapters that bind its kernel's storage buffers (x, the
    /// weight, the prologue's and epilogue's, then t, B' and, but for q|k|v, RowInfo).
    fn limit(self, case: Case) -> Case {
        match self {
            Fusion::Store | Fusion::Residual => case.needing("6 storage buffers per stage", six),
            Fusion::SiluGate => case.needing("7 storage buffers per stage", seven),
            Fusion::Qkv => case.needing("10 storage buffers per stage", fits_lora),
        }
    }
}

fn six(gpu: &Gpu) -> bool {
    gpu.caps.max_storage_buffers_per_stage >= 6
}

fn seven(gpu: &Gpu) -> bool {
    gpu.caps.max_storage_buffers_per_stage >= 7
}

/// What the engine asks of an adapter before it runs an adapter's projections.
fn fits_lora(gpu: &Gpu) -> bool {
    matmul::lora_fits(&gpu.caps)
}

/// One product with a LoRA term: `m` rows of x, the projections joined into one weight
/// (gate|up interleaved, q|k|v stacked), each projection's B' (`[rows, rank]`), every
/// row's t, adapter word and, as its epilogue needs, residual row, position and slot.
#[derive(Clone)]
struct Problem {
    fusion: Fusion,
    m: usize,
    k: usize,
    rank: usize,
    x: Vec<f32>,
    norm: Vec<f32>,
    biases: Vec<f32>,
    projections: Vec<MatmulInputs>,
    b_parts: Vec<Vec<f32>>,
    t: Vec<f32>,
    adapters: Vec<u32>,
    h0: Vec<f32>,
    positions: Vec<u32>,
    slots: Vec<u32>,
}

impl Problem {
    /// Rows 1, 4, 7... without the adapter, the others with it.
    fn new(fusion: Fusion, format: WeightFormat, (m, k, rank): (usize, usize, usize)) -> Self {
        let seed = (m * 1000 + k * 10 + rank) as u64;
        let mut rng = SplitMix64::new(seed);
        let x = rng.vec(m * k, 1.0);
        let norm = (0..k).map(|_| 1.0 + rng.uniform(0.5)).collect();
        let q_dim = HEADS * HEAD_DIM;
        let rows: &[usize] = match fusion {
            Fusion::Store => &[37],
            Fusion::Residual => &[70],
            Fusion::SiluGate => &[INTER, INTER],
            Fusion::Qkv => &[q_dim, HEAD_DIM, HEAD_DIM],
        };
        let projections: Vec<MatmulInputs> = (0..rows.len())
            .map(|j| problem(format, 1, k, rows[j], seed * 31 + j as u64))
            .collect();
        // B' is zero where a projection has no adapter: here q|k|v's v.
        let b_parts = (0..rows.len())
            .map(|j| match (fusion, j) {
                (Fusion::Qkv, 2) => vec![0.0; rows[j] * rank],
                _ => rng.vec(rows[j] * rank, 0.2),
            })
            .collect();
        let n: usize = rows.iter().sum();
        let adapters = (0..m).map(|i| u32::from(i % 3 != 1)).collect();
        let mut slots: Vec<u32> = (0..POOL_ROWS as u32).collect();
        for j in (1..slots.len()).rev() {
            slots.swap(j, rng.below(j as u64 + 1) as usize);
        }
        slots.truncate(m);
        Problem {
            fusion,
            m,
            k,
            rank,
            t: rng.vec(m * rank, 1.0),
            biases: rng.vec(n, 0.3),
            h0: rng.vec(m * n, 2.0),
            positions: (0..m).map(|_| rng.below(TABLE as u64) as u32).collect(),
            slots,
            x,
            norm,
            projections,
            b_parts,
            adapters,
        }
    }

    /// The same weights and term for only rows `first..first + count`.
    fn rows(&self, first: usize, count: usize) -> Problem {
        let rows = first..first + count;
        let (k, r, n) = (self.k, self.rank, self.n());
        Problem {
            m: count,
            x: self.x[first * k..(first + count) * k].to_vec(),
            t: self.t[first * r..(first + count) * r].to_vec(),
            adapters: self.adapters[rows.clone()].to_vec(),
            h0: self.h0[first * n..(first + count) * n].to_vec(),
            positions: self.positions[rows.clone()].to_vec(),
            slots: self.slots[rows].to_vec(),
            ..self.clone()
        }
    }

    fn n(&self) -> usize {
        self.projections.iter().map(|p| p.n).sum()
    }

    /// The joined weight on the GPU; `part_limit` caps each part's bytes.
    fn weight(&self, gpu: &Gpu, part_limit: Option<u64>) -> GpuWeight {
        let tensor = |p: &MatmulInputs| TensorData {
            format: p.format,
            rows: p.n,
            cols: p.k,
            bytes: p.bytes.clone(),
        };
        let mut parts: Vec<TensorData> = self.projections.iter().map(tensor).collect();
        let joined = match self.fusion {
            Fusion::Store | Fusion::Residual => parts.remove(0),
            Fusion::SiluGate => interleave_rows(&parts[0], &parts[1]).unwrap(),
            Fusion::Qkv => stack_rows(&parts.iter().collect::<Vec<_>>()).unwrap(),
        };
        let (format, n, k) = (joined.format, self.n(), self.k);
        match part_limit {
            Some(l) => GpuWeight::upload_with_limit(gpu, format, &joined.bytes, n, k, l),
            None => GpuWeight::upload(gpu, format, &joined.bytes, n, k),
        }
        .unwrap()
    }

    /// B' in the joined weight's row layout.
    fn b(&self) -> Vec<f32> {
        let r = self.rank;
        match self.fusion {
            Fusion::SiluGate => {
                let (g, u) = (&self.b_parts[0], &self.b_parts[1]);
                (0..INTER)
                    .flat_map(|j| [&g[j * r..(j + 1) * r], &u[j * r..(j + 1) * r]])
                    .flatten()
                    .copied()
                    .collect()
            }
            _ => self.b_parts.concat(),
        }
    }

    fn lora_inputs(&self) -> LoraInputs {
        LoraInputs {
            rank: self.rank,
            t: self.t.clone(),
            b: self.b(),
            adapters: self.adapters.clone(),
        }
    }

    fn rowinfo(&self) -> Vec<RowInfo> {
        (0..self.m)
            .map(|i| {
                RowInfo::new(0, self.positions[i], self.slots[i]).with_adapter(self.adapters[i])
            })
            .collect()
    }

    /// The norm's weights at `LEAD`, then the q|k|v biases.
    fn vectors(&self) -> Vec<f32> {
        let mut v = vec![9.0; LEAD];
        v.extend(&self.norm);
        v.extend(&self.biases);
        v
    }

    /// Projection `j` of the (normalised, for the RMSNorm fusions) rows with its term.
    fn projected(&self, xin: &[f32], j: usize) -> Vec<f32> {
        let p = &self.projections[j];
        let lora = Lora {
            t: &self.t,
            b: &self.b_parts[j],
            rank: self.rank,
            adapters: &self.adapters,
        };
        reference::matmul::matmul_lora(xin, &p.w, (self.m, self.k, p.n), &lora)
    }

    /// What each row's outputs should be (for q|k|v: its q, then its K and V pool rows).
    fn reference(&self) -> Vec<Vec<f32>> {
        let normed = reference::rmsnorm::rmsnorm(&self.x, &self.norm, EPS, self.k);
        let flat = match self.fusion {
            Fusion::Store => self.projected(&self.x, 0),
            Fusion::Residual => {
                reference::elementwise::residual_add(&self.h0, &self.projected(&self.x, 0))
            }
            Fusion::SiluGate => reference::elementwise::silu_gate(
                &self.projected(&normed, 0),
                &self.projected(&normed, 1),
            ),
            Fusion::Qkv => return self.qkv_reference(&normed),
        };
        flat.chunks(flat.len() / self.m)
            .map(<[f32]>::to_vec)
            .collect()
    }

    fn qkv_reference(&self, normed: &[f32]) -> Vec<Vec<f32>> {
        let (q_dim, kv_dim) = (HEADS * HEAD_DIM, HEAD_DIM);
        let at = [0, q_dim, q_dim + kv_dim];
        let proj: Vec<Vec<f32>> = (0..3)
            .map(|j| {
                let y = self.projected(normed, j);
                let n = self.projections[j].n;
                reference::elementwise::add_bias(&y, &self.biases[at[j]..at[j] + n])
            })
            .collect();
        let rope = |y: &[f32], heads| {
            let layout = RopeLayout::Interleaved;
            reference::rope::rope(y, &self.positions, heads, HEAD_DIM, THETA, layout)
        };
        let (q, k) = (rope(&proj[0], HEADS), rope(&proj[1], 1));
        let v = &proj[2];
        (0..self.m)
            .map(|i| {
                let (qr, kr) = (i * q_dim..(i + 1) * q_dim, i * kv_dim..(i + 1) * kv_dim);
                [&q[qr], &k[kr.clone()], &v[kr]].concat()
            })
            .collect()
    }
}

/// Runs `p` on `shape` against `weight`, with the term or without it, and returns each
/// row's outputs (as `Problem::reference` lists them).
fn run(
    gpu: &Gpu,
    p: &Problem,
    weight: &GpuWeight,
    shape: MatmulShape,
    lora: bool,
) -> Vec<Vec<f32>> {
    let (m, n) = (p.m, p.n());
    if let Fusion::Store = p.fusion {
        let mut fixture = MatmulFixture::new(gpu, weight, &p.x, m);
        if lora {
            fixture = fixture.with_lora(gpu, &p.lora_inputs());
        }
        let y = pollster::block_on(fixture.run(gpu, shape)).expect("read-back");
        return y.chunks(n).map(<[f32]>::to_vec).collect();
    }
    let x = gpu.upload(&p.x);
    let vectors = gpu.upload(&p.vectors());
    let (t, b, rowinfo) = (
        gpu.upload(&p.t),
        gpu.upload(&p.b()),
        gpu.upload(&p.rowinfo()),
    );
    let term = || {
        lora.then_some(LoraArgs {
            t: &t,
            b: &b,
            rank: p.rank,
            rowinfo: &rowinfo,
        })
    };
    let norm = || {
        Some(NormArgs {
            vectors: &vectors,
            offset: LEAD,
            eps: EPS,
        })
    };
    let op = |norm, output| Matmul {
        x: &x,
        m,
        weight,
        norm,
        gather: None,
        fold: None,
        output,
        lora: term(),
    };
    let encode = |op: &Matmul| {
        let mut rec = gpu.recorder();
        matmul::encode(gpu, &mut rec, op, shape);
        rec.submit();
    };
    let rows = |y: &Tensor, width: usize| -> Vec<Vec<f32>> {
        read_f32(gpu, y)
            .chunks(width)
            .map(<[f32]>::to_vec)
            .collect()
    };
    match p.fusion {
        Fusion::Store => unreachable!("run through the fixture above"),
        Fusion::Residual => {
            let h = gpu.upload(&p.h0);
            encode(&op(None, Output::Residual(&h)));
            rows(&h, n)
        }
        Fusion::SiluGate => {
            let y = gpu.upload(&vec![f32::NAN; m * INTER]);
            encode(&op(norm(), Output::SiluGate(&y)));
            rows(&y, INTER)
        }
        Fusion::Qkv => {
            let (q_dim, kv_dim) = (HEADS * HEAD_DIM, HEAD_DIM);
            let table = RopeTable::new(gpu, HEAD_DIM, THETA, TABLE).expect("a small table fits");
            let q = gpu.upload(&vec![f32::NAN; m * q_dim]);
            let sentinel = vec![7.0f32; POOL_ROWS * kv_dim];
            let (k_pool, v_pool) = (gpu.upload(&sentinel), gpu.upload(&sentinel));
            let qkv = QkvArgs {
                bias: Some(QkvBias {
                    vectors: &vectors,
                    offset: LEAD + p.k,
                }),
                q_dim,
                kv_dim,
                head_dim: HEAD_DIM,
                rope: &table,
                rowinfo: &rowinfo,
                q: &q,
                k_pool: &k_pool,
                v_pool: &v_pool,
            };
            encode(&op(norm(), Output::Qkv(qkv)));
            let (qs, ks, vs) = (
                rows(&q, q_dim),
                rows(&k_pool, kv_dim),
                rows(&v_pool, kv_dim),
            );
            (0..m)
                .map(|i| {
                    let slot = p.slots[i] as usize;
                    [&qs[i][..], &ks[slot], &vs[slot]].concat()
                })
                .collect()
        }
    }
}

/// Each row's outputs against the reference's, as one NMSE over all of them.
fn check_rows(got: &[Vec<f32>], want: &[Vec<f32>]) -> Result<Outcome, String> {
    check_close(&got.concat(), &want.concat(), TOLERANCE)
}

fn exact() -> Outcome {
    Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    }
}

/// (m, k) of a case: more rows than a matrix-vector workgroup serves, k of whole blocks.
fn size(format: WeightFormat, rank: usize) -> (usize, usize, usize) {
    (11, whole_blocks(format, 64), rank)
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (f, fusion) in Fusion::ALL.into_iter().enumerate() {
        for (g, (format, rank)) in FORMATS.into_iter().enumerate() {
            let tag = format!("{fusion:?}/{format}/r{rank}");
            // The reference on the first shape; every other shape bitwise the same.
            let case = Case::new("lora", format!("{tag}/shapes-agree"), move |gpu| {
                let p = Problem::new(fusion, format, size(format, rank));
                let weight = p.weight(gpu, None);
                let shapes = shapes_on(gpu);
                let first = run(gpu, &p, &weight, shapes[0], true);
                let outcome = check_rows(&first, &p.reference())?;
                for &shape in &shapes[1..] {
                    check_bitwise(
                        &format!("{} vs {}", shape.key(), shapes[0].key()),
                        &run(gpu, &p, &weight, shape, true).concat(),
                        &first.concat(),
                    )?;
                }
                Ok(outcome)
            });
            cases.push(fusion.limit(case));
            // The term's bits depend on neither the weight's format nor the epilogue, so
            // each epilogue checks the rows' bits with one format (every format once).
            if (f + g) % FORMATS.len() != 0 {
                continue;
            }
            // Rows without the adapter: the kernel without the term's bits. Rows with it:
            // something else (the term was added).
            let case = Case::new("lora", format!("{tag}/base-rows-unchanged"), move |gpu| {
                let p = Problem::new(fusion, format, size(format, rank));
                let weight = p.weight(gpu, None);
                for shape in shapes_on(gpu) {
                    let with = run(gpu, &p, &weight, shape, true);
                    let without = run(gpu, &p, &weight, shape, false);
                    for i in 0..p.m {
                        let what = format!("row {i} on {}", shape.key());
                        if p.adapters[i] == 0 {
                            check_bitwise(&what, &with[i], &without[i])?;
                        } else if check_bitwise(&what, &with[i], &without[i]).is_ok() {
                            return Err(format!("{what}: the adapter row has no LoRA term"));
                        }
                    }
                }
                Ok(exact())
            });
            cases.push(fusion.limit(case));
            // Batch invariance: rows alone (with and without the adapter) and in batches
            // of other sizes, on every shape, equal the rows of a batch of 11.
            let case = Case::new("lora", format!("{tag}/batch-invariance"), move |gpu| {
                let p = Problem::new(fusion, format, size(format, rank));
                let weight = p.weight(gpu, None);
                let shapes = shapes_on(gpu);
                let batch = run(gpu, &p, &weight, shapes[0], true);
                for (first, count) in [(0, 1), (1, 1), (2, 3), (3, 8)] {
                    for &shape in &shapes {
                        let rows = run(gpu, &p.rows(first, count), &weight, shape, true);
                        check_bitwise(
                            &format!(
                                "rows {first}..{} on {} vs in a batch of {} on {}",
                                first + count,
                                shape.key(),
                                p.m,
                                shapes[0].key()
                            ),
                            &rows.concat(),
                            &batch[first..first + count].concat(),
                        )?;
                    }
                }
                Ok(exact())
            });
            cases.push(fusion.limit(case));
        }
    }
    // A weight split into parts of 8 rows: each part's term reads B' from the part's first
    // row on, so the split and the whole weight give the same bits.
    for (format, rank) in FORMATS {
        let name = format!("Store/{format}/r{rank}/split");
        let case = Case::new("lora", name, move |gpu| {
            let p = Problem::new(Fusion::Store, format, (5, whole_blocks(format, 64), rank));
            let whole = p.weight(gpu, None);
            let limit = (format.row_bytes(p.k).unwrap() * 8) as u64 + 3;
            let split = p.weight(gpu, Some(limit));
            if split.parts.len() < 2 {
                return Err(format!(
                    "{} parts: the weight was not split",
                    split.parts.len()
                ));
            }
            let shapes = shapes_on(gpu);
            let want = run(gpu, &p, &whole, shapes[0], true);
            for shape in shapes {
                let got = run(gpu, &p, &split, shape, true);
                check_bitwise(
                    &format!("{} split vs whole", shape.key()),
                    &got.concat(),
                    &want.concat(),
                )?;
            }
            check_rows(&want, &p.reference())
        });
        cases.push(Fusion::Store.limit(case));
    }
    cases
}
