//! Causal grouped-query attention: awkward shapes against the f64 reference, and batch
//! invariance (a query row is bitwise the same decoded alone, in its prefill, or in a
//! prefill chunk of another size and start).

use sprout::gpu::Gpu;
use sprout::gpu::kernels::attention::{AttentionShape, encode};
use sprout::reference;

use crate::common::{Case, Rng, check_bitwise, check_close, read_f32};

/// Scores and weighted sums are f32 fma chains and `exp` is the shader's, against an f64
/// reference: relative errors of ~1e-6 at worst, so an NMSE far below 1e-10 (about 1e-13
/// seen on lavapipe and llvmpipe GL); a wrong key, head or mask gives 1e-3 or more.
const TOLERANCE: f64 = 1e-10;

/// Rows of K/V past the valid ones, filled with NaN: reading them poisons the output.
const PADDING_ROWS: usize = 5;

/// One attention problem: q for the dispatch's rows, and K/V caches with `s_cap` rows.
struct Problem {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn problem(shape: &AttentionShape, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let kv_row = shape.n_kv_heads * shape.head_dim;
    let mut k = rng.vec(shape.kv_len(), 1.0);
    let mut v = rng.vec(shape.kv_len(), 1.0);
    k.extend(std::iter::repeat_n(f32::NAN, PADDING_ROWS * kv_row));
    v.extend(std::iter::repeat_n(f32::NAN, PADDING_ROWS * kv_row));
    Problem {
        q: rng.vec(shape.q_len(), 1.0),
        k,
        v,
    }
}

fn run(gpu: &Gpu, shape: &AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let (q, k, v) = (gpu.upload(q), gpu.upload(k), gpu.upload(v));
    let out = gpu.zeros(shape.q_len());
    let mut enc = gpu.encoder();
    encode(gpu, &mut enc, shape, &q, &k, &v, &out);
    gpu.submit(enc);
    read_f32(gpu, &out)
}

/// (t, pos0, n_heads, n_kv_heads, head_dim, scale factor on 1/sqrt(head_dim)).
type ShapeRow = (usize, usize, usize, usize, usize, f32);

/// Decode and prefill; t and key counts off the 64-key chunk and across chunk edges;
/// pos0 > 0; plain multi-head and GQA ratios 3 and 4; head_dim 4, 20, 32, 48, 64, 80, 96,
/// 128 and 256 (so the kernel splits a chunk into 64, 12, 8, 5, 4, 3, 2, 2 and 1 key groups,
/// some leaving invocations idle); 300- and 512-key contexts; and sharp softmaxes
/// (scale x4) where the running max matters.
const SHAPES: &[ShapeRow] = &[
    (1, 0, 4, 4, 64, 1.0),
    (1, 127, 9, 3, 64, 1.0),
    (1, 511, 9, 3, 64, 1.0),
    (7, 0, 6, 2, 32, 1.0),
    (13, 50, 8, 2, 80, 1.0),
    (64, 0, 4, 1, 48, 1.0),
    (5, 295, 4, 2, 64, 1.0),
    (3, 62, 2, 1, 256, 1.0),
    (70, 0, 3, 3, 64, 1.0),
    (4, 10, 3, 1, 4, 1.0),
    (6, 60, 4, 1, 20, 1.0),
    (2, 199, 6, 2, 96, 1.0),
    (17, 100, 8, 2, 128, 1.0),
    (9, 120, 8, 2, 64, 4.0),
    (33, 0, 4, 4, 80, 4.0),
];

/// A prefill computed whole, then some of its rows again in other splits.
struct Invariance {
    t: usize,
    pos0: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    /// (first absolute position, rows): each is one more dispatch over the same caches.
    splits: &'static [(usize, usize)],
}

const INVARIANCE: &[Invariance] = &[
    // The brief's case: a 64-token prefill from 0 against decodes and other chunks.
    Invariance {
        t: 64,
        pos0: 0,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        splits: &[
            (0, 1),
            (1, 1),
            (37, 1),
            (63, 1),
            (20, 13),
            (24, 40),
            (60, 4),
        ],
    },
    // A later chunk whose rows straddle the 128-key chunk edge, with GQA 4 and partial dims.
    Invariance {
        t: 50,
        pos0: 100,
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 80,
        splits: &[
            (100, 1),
            (127, 1),
            (128, 1),
            (149, 1),
            (110, 13),
            (126, 3),
            (130, 20),
        ],
    },
];

fn invariance_case(c: &'static Invariance, gpu: &Gpu) -> Result<crate::common::Outcome, String> {
    let shape = AttentionShape::new(c.t, c.pos0, c.n_heads, c.n_kv_heads, c.head_dim);
    let p = problem(&shape, (c.t * 1000 + c.pos0) as u64);
    let batch = run(gpu, &shape, &p.q, &p.k, &p.v);
    // The whole batch must be right, or bitwise agreement would prove nothing.
    let outcome = check_close(
        &batch,
        &reference::attention::attention(&shape, &p.q, &p.k, &p.v),
        TOLERANCE,
    )?;
    let row = c.n_heads * c.head_dim;
    for &(start, rows) in c.splits {
        let i = start - c.pos0;
        assert!(i + rows <= c.t, "split {start}+{rows} outside the batch");
        let sub = AttentionShape::new(rows, start, c.n_heads, c.n_kv_heads, c.head_dim);
        // The same caches: rows past start + rows hold later tokens, which must be unseen.
        let y = run(gpu, &sub, &p.q[i * row..(i + rows) * row], &p.k, &p.v);
        check_bitwise(
            &format!(
                "positions {start}..{} with t={rows} vs inside t={} at pos0={}",
                start + rows,
                c.t,
                c.pos0
            ),
            &y,
            &batch[i * row..(i + rows) * row],
        )?;
    }
    Ok(outcome)
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &(t, pos0, n_heads, n_kv_heads, head_dim, sharp) in SHAPES {
        let name = format!("t{t}_pos{pos0}_h{n_heads}_kv{n_kv_heads}_d{head_dim}_scale{sharp}");
        cases.push(Case::new("attention", name, move |gpu| {
            let mut shape = AttentionShape::new(t, pos0, n_heads, n_kv_heads, head_dim);
            shape.scale *= sharp;
            let p = problem(
                &shape,
                (t * 100_000 + pos0 * 1000 + n_heads * 10 + head_dim) as u64,
            );
            let y = run(gpu, &shape, &p.q, &p.k, &p.v);
            check_close(
                &y,
                &reference::attention::attention(&shape, &p.q, &p.k, &p.v),
                TOLERANCE,
            )
        }));
    }
    for c in INVARIANCE {
        let name = format!(
            "batch-invariance/t{}_pos{}_h{}_kv{}_d{}",
            c.t, c.pos0, c.n_heads, c.n_kv_heads, c.head_dim
        );
        cases.push(Case::new("attention", name, move |gpu| {
            invariance_case(c, gpu)
        }));
    }
    cases
}
