//! Paged, varlen causal grouped-query attention: mixed batches of sequences whose keys sit
//! in shuffled, non-contiguous blocks of the pool, against the f64 reference run on each
//! sequence's contiguous keys; and batch invariance (a query row is bitwise the same in a
//! mixed batch of prefill chunks and decodes, alone, in another chunk, at other physical
//! blocks, and with another block size), for every variant: rows whole or split across
//! pages (flash-decoding, folded by the combine step), and query vectors loaded per key,
//! held or staged in workgroup memory; all of which must agree bitwise. Sliding windows
//! too: smaller than a page, crossing pages, at the boundary, larger than the sequence,
//! with split slots that see no key. And the o-projection that folds the split rows as it
//! reads them, bitwise the combine step followed by a plain matmul on every matmul shape.

use sprout::formats::WeightFormat;
use sprout::gpu::Gpu;
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::attention::{
    AttentionFixture, AttentionShape, AttentionSplit, AttentionVariant, PlannedAttention, QLoads,
    SplitRows,
};
use sprout::gpu::kernels::matmul::{self, Matmul, MatmulInputs, MatmulShape, Output};
use sprout::reference;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close};

/// Scores and weighted sums are f32 fma chains and `exp` is the shader's, against an f64
/// reference: relative errors of ~1e-6 at worst, so an NMSE far below 1e-10 (about 1e-13
/// seen on lavapipe and llvmpipe GL); a wrong key, head, block or mask gives 1e-3 or more.
const TOLERANCE: f64 = 1e-10;

/// The heads and the pool's block size of a case (`t` is set per dispatch).
#[derive(Clone, Copy)]
struct Heads {
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    /// Factor on `1 / sqrt(head_dim)`: 4 gives sharp softmaxes where the running max matters.
    sharp: f32,
    /// The sliding window, if any.
    window: Option<u32>,
}

impl Heads {
    /// The heads of one row of `SHAPES`.
    fn of(row: &ShapeRow) -> Heads {
        let &(n_heads, n_kv_heads, head_dim, block_size, sharp, _) = row;
        Heads {
            n_heads,
            n_kv_heads,
            head_dim,
            block_size,
            sharp,
            window: None,
        }
    }

    fn shape(&self, t: usize) -> AttentionShape {
        let mut shape = AttentionShape::new(
            t,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.block_size,
        );
        shape.scale *= self.sharp;
        shape.window = self.window;
        shape
    }

    fn q_row(&self) -> usize {
        self.n_heads * self.head_dim
    }

    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// One sequence: its keys and values `[len, kv_dim]`, and a query `[n_heads * head_dim]`
/// for every position.
struct Seq {
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
}

fn sequences(heads: &Heads, lens: &[usize], seed: u64) -> Vec<Seq> {
    let mut rng = SplitMix64::new(seed);
    lens.iter()
        .map(|&len| Seq {
            len,
            k: rng.vec(len * heads.kv_dim(), 1.0),
            v: rng.vec(len * heads.kv_dim(), 1.0),
            q: rng.vec(len * heads.q_row(), 1.0),
        })
        .collect()
}

/// A query row: (index of its sequence, its position).
type Query = (usize, usize);

/// The pools, block tables and rows of one dispatch over `seqs`.
struct Paged {
    k_pool: Vec<f32>,
    v_pool: Vec<f32>,
    tables: Vec<u32>,
    /// Where each sequence's block table starts in `tables`.
    offsets: Vec<usize>,
}

/// Places `seqs` in blocks picked at random (by `seed`) from a pool with spare blocks;
/// every pool row no sequence owns (spare blocks, the tail of a last block) is NaN, so
/// reading one poisons the output. The tables start with a few ids of spare blocks and
/// list the sequences in reverse order.
fn page(heads: &Heads, seqs: &[Seq], seed: u64) -> Paged {
    let (bs, kv_dim) = (heads.block_size, heads.kv_dim());
    let needed: Vec<usize> = seqs.iter().map(|s| s.len.div_ceil(bs)).collect();
    let used: usize = needed.iter().sum();
    let num_blocks = used + used / 2 + 3;
    let mut rng = SplitMix64::new(seed);
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let (owned, spare) = ids.split_at(used);
    let mut k_pool = vec![f32::NAN; num_blocks * bs * kv_dim];
    let mut v_pool = k_pool.clone();
    let junk = 1 + (seed % 3) as usize;
    let mut tables: Vec<u32> = spare.iter().cycle().take(junk).copied().collect();
    let mut offsets = vec![0; seqs.len()];
    let mut first_block = vec![0; seqs.len()];
    let mut next = 0;
    for (s, n) in needed.iter().enumerate() {
        first_block[s] = next;
        next += n;
    }
    for s in (0..seqs.len()).rev() {
        offsets[s] = tables.len();
        tables.extend_from_slice(&owned[first_block[s]..first_block[s] + needed[s]]);
    }
    for (s, seq) in seqs.iter().enumerate() {
        for j in 0..seq.len {
            let block = owned[first_block[s] + j / bs] as usize;
            let dst = (block * bs + j % bs) * kv_dim;
            let src = j * kv_dim;
            k_pool[dst..dst + kv_dim].copy_from_slice(&seq.k[src..src + kv_dim]);
            v_pool[dst..dst + kv_dim].copy_from_slice(&seq.v[src..src + kv_dim]);
        }
    }
    Paged {
        k_pool,
        v_pool,
        tables,
        offsets,
    }
}

/// The query rows of one dispatch, laid out in `seed`'s pages, on the GPU; with
/// `DecodePages` every row of more than one page is split.
fn run(
    gpu: &Gpu,
    heads: &Heads,
    variant: AttentionVariant,
    seqs: &[Seq],
    queries: &[Query],
    seed: u64,
) -> Vec<f32> {
    let paged = page(heads, seqs, seed);
    let shape = heads.shape(queries.len());
    let q: Vec<f32> = queries
        .iter()
        .flat_map(|&(s, pos)| &seqs[s].q[pos * heads.q_row()..(pos + 1) * heads.q_row()])
        .copied()
        .collect();
    let rows: Vec<RowInfo> = queries
        .iter()
        .map(|&(s, pos)| RowInfo::new(paged.offsets[s] as u32, pos as u32, 0))
        .collect();
    let pools = (&q[..], &paged.k_pool[..], &paged.v_pool[..]);
    let fixture = AttentionFixture::new(gpu, shape, pools, &paged.tables, &rows, SplitRows::Every);
    pollster::block_on(fixture.run(gpu, variant)).expect("read-back")
}

/// The reference for each query, on its sequence's keys laid out contiguously (block `b`
/// at pool block `b`): independent of `page`.
fn expected(heads: &Heads, seqs: &[Seq], queries: &[Query]) -> Vec<f32> {
    let mut out = Vec::new();
    for &(s, pos) in queries {
        let seq = &seqs[s];
        let blocks = seq.len.div_ceil(heads.block_size);
        let pad = (blocks * heads.block_size - seq.len) * heads.kv_dim();
        let k: Vec<f32> = seq.k.iter().copied().chain(vec![0.0; pad]).collect();
        let v: Vec<f32> = seq.v.iter().copied().chain(vec![0.0; pad]).collect();
        let table: Vec<u32> = (0..blocks as u32).collect();
        let q = &seq.q[pos * heads.q_row()..(pos + 1) * heads.q_row()];
        out.extend(reference::attention::attention(
            &heads.shape(1),
            q,
            &k,
            &v,
            &table,
            &[RowInfo::new(0, pos as u32, 0)],
        ));
    }
    out
}

/// (n_heads, n_kv_heads, head_dim, block_size, scale factor, sequences as (length, first
/// query position): each sequence's rows first .. length are in the batch).
type ShapeRow = (usize, usize, usize, usize, f32, &'static [(usize, usize)]);

/// SmolLM2-135M's heads (9 over 3 kv heads, head_dim 64) with blocks of 16 and 4 over
/// sequences of 1, 15, 16, 17 and 100 keys, whole prefills, chunks and decodes in one
/// batch, and long decodes; then plain multi-head and GQA ratios 3 and 4; head_dim 4, 20,
/// 32, 48, 64, 80, 96, 128 and 256 (so the kernel splits a chunk into 64, 12, 8, 5, 4, 3, 2,
/// 2 and 1 key groups, some leaving invocations idle); blocks of 1, 5, 8 and 32; key counts
/// across the 64-key chunk edges; and sharp softmaxes (scale x4).
const SHAPES: &[ShapeRow] = &[
    (
        9,
        3,
        64,
        16,
        1.0,
        &[(1, 0), (15, 0), (16, 10), (17, 16), (100, 60)],
    ),
    (
        9,
        3,
        64,
        4,
        1.0,
        &[(1, 0), (15, 14), (16, 0), (17, 3), (100, 99)],
    ),
    (9, 3, 64, 16, 1.0, &[(512, 511), (128, 127), (300, 295)]),
    (4, 4, 64, 16, 1.0, &[(1, 0)]),
    (6, 2, 32, 16, 1.0, &[(7, 0), (3, 2)]),
    (8, 2, 80, 4, 1.0, &[(63, 50)]),
    (4, 1, 48, 16, 1.0, &[(64, 0)]),
    (2, 1, 256, 16, 1.0, &[(65, 62)]),
    (3, 3, 64, 1, 1.0, &[(70, 0)]),
    (3, 1, 4, 5, 1.0, &[(14, 10), (6, 0)]),
    (4, 1, 20, 16, 1.0, &[(66, 60)]),
    (6, 2, 96, 16, 1.0, &[(201, 199)]),
    (8, 2, 128, 32, 1.0, &[(117, 100), (40, 39)]),
    (8, 2, 64, 16, 4.0, &[(129, 120)]),
    (4, 4, 80, 8, 4.0, &[(33, 0)]),
];

/// The batch's query rows: each sequence's rows in order, sequences interleaved from the
/// back so that rows of one sequence are not all adjacent to row 0.
fn batch_queries(seqs: &[(usize, usize)]) -> Vec<Query> {
    let mut out = Vec::new();
    for (s, &(len, first)) in seqs.iter().enumerate().rev() {
        out.extend((first..len).map(|p| (s, p)));
    }
    out
}

fn accuracy_case(row: &ShapeRow, variant: AttentionVariant, gpu: &Gpu) -> Result<Outcome, String> {
    let &(n_heads, _, head_dim, block_size, _, spec) = row;
    let heads = Heads::of(row);
    let lens: Vec<usize> = spec.iter().map(|&(len, _)| len).collect();
    let seed = (n_heads * 1_000_000 + head_dim * 1000 + block_size * 10 + lens[0]) as u64;
    let seqs = sequences(&heads, &lens, seed);
    let queries = batch_queries(spec);
    let got = run(gpu, &heads, variant, &seqs, &queries, seed + 1);
    check_close(&got, &expected(&heads, &seqs, &queries), TOLERANCE)
}

/// One more dispatch: (block size, its query rows as (sequence, first, end)).
type Rerun = (usize, &'static [(usize, usize, usize)]);

/// A mixed batch, then some of its rows again in other dispatches.
struct Invariance {
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    /// (length, first query position) per sequence, as in `SHAPES`.
    seqs: &'static [(usize, usize)],
    /// Each at other physical blocks.
    reruns: &'static [Rerun],
}

const INVARIANCE: &[Invariance] = &[
    // Prefill chunks of two sequences (rows 40..100 of a 100-token one, a whole 17-token
    // one) and decodes of three others (1, 16 and 65 keys), in one dispatch.
    Invariance {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        block_size: 16,
        seqs: &[(100, 40), (17, 0), (1, 0), (16, 15), (65, 64)],
        reruns: &[
            (16, &[(0, 40, 41)]),
            (16, &[(0, 63, 64)]),
            (16, &[(0, 64, 65)]),
            (16, &[(0, 99, 100)]),
            (16, &[(1, 0, 1)]),
            (16, &[(1, 16, 17)]),
            (16, &[(2, 0, 1)]),
            (16, &[(3, 15, 16)]),
            (16, &[(4, 64, 65)]),
            // Other chunks, together and in another order.
            (16, &[(4, 64, 65), (0, 60, 70), (1, 5, 9)]),
            (16, &[(0, 40, 64)]),
            // Another block size, for decodes and a chunk.
            (4, &[(2, 0, 1), (4, 64, 65), (0, 90, 100)]),
            (1, &[(3, 15, 16), (1, 10, 17)]),
        ],
    },
    // Chunks whose rows straddle the 128-key chunk edge, with GQA 4 and partial dims.
    Invariance {
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 80,
        block_size: 4,
        seqs: &[(150, 100), (130, 120), (128, 127), (129, 128), (5, 4)],
        reruns: &[
            (4, &[(0, 100, 101)]),
            (4, &[(0, 127, 128)]),
            (4, &[(0, 128, 129)]),
            (4, &[(0, 149, 150)]),
            (4, &[(1, 125, 126)]),
            (4, &[(2, 127, 128)]),
            (4, &[(3, 128, 129)]),
            (4, &[(4, 4, 5)]),
            (4, &[(0, 110, 123), (1, 126, 129)]),
            (16, &[(0, 130, 150), (3, 128, 129)]),
        ],
    },
];

/// The batch runs with `variant`, and the reruns take every variant in turn where the shape
/// fits it, so that split and whole rows and every way of loading queries must agree
/// bitwise too.
fn invariance_case(
    c: &'static Invariance,
    variant: AttentionVariant,
    gpu: &Gpu,
) -> Result<Outcome, String> {
    let heads = Heads {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        block_size: c.block_size,
        sharp: 1.0,
        window: None,
    };
    let lens: Vec<usize> = c.seqs.iter().map(|&(len, _)| len).collect();
    let seed = (c.n_heads * 1000 + c.head_dim) as u64;
    let seqs = sequences(&heads, &lens, seed);
    let queries = batch_queries(c.seqs);
    let batch = run(gpu, &heads, variant, &seqs, &queries, seed + 1);
    // The whole batch must be right, or bitwise agreement would prove nothing.
    let outcome = check_close(&batch, &expected(&heads, &seqs, &queries), TOLERANCE)?;
    let row = heads.q_row();
    for (r, &(block_size, parts)) in c.reruns.iter().enumerate() {
        let rerun: Vec<Query> = parts
            .iter()
            .flat_map(|&(s, first, end)| (first..end).map(move |p| (s, p)))
            .collect();
        let heads = Heads {
            block_size,
            ..heads
        };
        let all = AttentionVariant::all();
        let other = match all[r % all.len()] {
            other if other.q_loads.fits(&heads.shape(1)) => other,
            _ => variant,
        };
        // Other physical blocks (another seed), maybe another block size.
        let y = run(gpu, &heads, other, &seqs, &rerun, seed + 100 + r as u64);
        for (i, query) in rerun.iter().enumerate() {
            let at = queries
                .iter()
                .position(|q| q == query)
                .expect("rerun row in batch");
            check_bitwise(
                &format!(
                    "sequence {} position {} in rerun {r} (t={}, block size {block_size}, \
                     {other:?}) vs in the batch (t={}, {variant:?})",
                    query.0,
                    query.1,
                    rerun.len(),
                    queries.len()
                ),
                &y[i * row..(i + 1) * row],
                &batch[at * row..(at + 1) * row],
            )?;
        }
    }
    Ok(outcome)
}

/// A sliding-window case: heads as in `SHAPES` (the scale factor included), the window, and
/// the sequences as (length, first query position).
struct Windowed {
    heads: (usize, usize, usize, usize),
    sharp: f32,
    window: u32,
    seqs: &'static [(usize, usize)],
}

/// Gemma 3's scale is `query_pre_attn_scalar ** -0.5`, not `head_dim ** -0.5`: 27B's 168
/// over heads of 128 is this factor on `1 / sqrt(128)`.
const GEMMA_27B_SCALE: f32 = 0.872_871_6; // sqrt(128 / 168)

/// Windows smaller than a page and than a block, of exactly a page, crossing page edges,
/// equal to `position + 1` at some rows (the last row that sees key 0), of one key, and
/// larger than every sequence. Under `DecodePages` every row of more than one page is
/// split, so the long rows give split items with no visible key: the first one (a run of
/// several pages), later single pages, or both.
const WINDOWED: &[Windowed] = &[
    // Gemma 3 270M's heads (4 over 1 kv head of 256), a window of 5 keys: rows 0..5 see
    // every key (row 4 exactly: 4 + 1 = 5), later ones the last 5, across the page edge at
    // 64 and in a long decode whose first pages are all hidden.
    Windowed {
        heads: (4, 1, 256, 16),
        sharp: 1.0,
        window: 5,
        seqs: &[(7, 0), (70, 60), (200, 199)],
    },
    // SmolLM2's heads, a window of 100: its start inside a page, rows 95..100 with
    // position + 1 <= 100, a decode at 299 whose first three split slots are empty.
    Windowed {
        heads: (9, 3, 64, 16),
        sharp: 1.0,
        window: 100,
        seqs: &[(100, 95), (150, 140), (300, 299)],
    },
    // A window of exactly one page, sharp softmaxes, blocks of 4: row 63 sees keys 0..=63,
    // row 64 keys 1..=64.
    Windowed {
        heads: (8, 2, 64, 4),
        sharp: 4.0,
        window: 64,
        seqs: &[(65, 62), (129, 120)],
    },
    // One key: each row sees itself only.
    Windowed {
        heads: (6, 2, 32, 16),
        sharp: 1.0,
        window: 1,
        seqs: &[(70, 60), (1, 0)],
    },
    // Larger than every sequence: full causal attention.
    Windowed {
        heads: (4, 4, 80, 8),
        sharp: 1.0,
        window: 4096,
        seqs: &[(33, 0), (130, 129)],
    },
    // Gemma 3 27B's head size and scale; 40 pages, so a split row's first item folds pages
    // 0..9, of which the window (starting at key 329 or 330, in page 5) hides five.
    Windowed {
        heads: (4, 2, 128, 16),
        sharp: GEMMA_27B_SCALE,
        window: 2230,
        seqs: &[(2560, 2558)],
    },
];

impl Windowed {
    fn heads(&self) -> Heads {
        let (n_heads, n_kv_heads, head_dim, block_size) = self.heads;
        Heads {
            n_heads,
            n_kv_heads,
            head_dim,
            block_size,
            sharp: self.sharp,
            window: Some(self.window),
        }
    }
}

/// The batch against the reference, and bitwise against whole rows with direct query
/// loads at other physical blocks (the variant every other must match).
fn windowed_case(c: &Windowed, variant: AttentionVariant, gpu: &Gpu) -> Result<Outcome, String> {
    let heads = c.heads();
    let lens: Vec<usize> = c.seqs.iter().map(|&(len, _)| len).collect();
    let seed = (c.window as usize * 1000 + heads.head_dim + lens[0]) as u64;
    let seqs = sequences(&heads, &lens, seed);
    let queries = batch_queries(c.seqs);
    let got = run(gpu, &heads, variant, &seqs, &queries, seed + 1);
    let outcome = check_close(&got, &expected(&heads, &seqs, &queries), TOLERANCE)?;
    let base = AttentionVariant {
        split: AttentionSplit::Whole,
        q_loads: QLoads::Direct,
    };
    let want = run(gpu, &heads, base, &seqs, &queries, seed + 2);
    check_bitwise(
        &format!("window {} with {variant:?} vs {base:?}", c.window),
        &got,
        &want,
    )?;
    Ok(outcome)
}

/// The o-projection of a decode batch whose long rows attention split: the matmul that
/// folds their page states as it reads x gives bitwise what the combine step and a plain
/// matmul give, on every matmul shape the adapter runs. The output and the product start
/// as NaN, so a row the fold misses shows.
fn fold_case(heads: Heads, format: WeightFormat, gpu: &Gpu) -> Result<Outcome, String> {
    // Decodes: four rows over several pages (split), one of one page and one of 64 keys
    // (whole).
    let lens = [200, 65, 1, 130, 64, 300];
    let seqs = sequences(&heads, &lens, 77);
    let paged = page(&heads, &seqs, 78);
    let t = lens.len();
    let shape = heads.shape(t);
    let q: Vec<f32> = seqs
        .iter()
        .flat_map(|s| &s.q[(s.len - 1) * heads.q_row()..s.len * heads.q_row()])
        .copied()
        .collect();
    let rows: Vec<RowInfo> = (0..t)
        .map(|s| RowInfo::new(paged.offsets[s] as u32, lens[s] as u32 - 1, 0))
        .collect();
    let pools = (&q[..], &paged.k_pool[..], &paged.v_pool[..]);
    let fixture =
        AttentionFixture::new(gpu, shape, pools, &paged.tables, &rows, SplitRows::Decodes);
    let planned = fixture.plan(gpu, AttentionSplit::DecodePages);
    if planned.plan.combine.len() != 4 {
        return Err(format!("{} rows split, not 4", planned.plan.combine.len()));
    }
    let (k, n) = (heads.q_row(), 24);
    let raw = SplitMix64::new(9).vec(n * k, 0.5);
    let inputs =
        MatmulInputs::new(format, (t, k, n), vec![0.0; t * k], &raw).map_err(|e| e.to_string())?;
    let weight = inputs.upload_weight(gpu, None).map_err(|e| e.to_string())?;
    let y = gpu.upload(&vec![f32::NAN; t * n]);
    let run = |shape: MatmulShape, folded: bool, planned: &PlannedAttention| {
        fixture.poison_out(gpu);
        gpu.write(&y, &vec![f32::NAN; t * n]);
        let mut rec = gpu.recorder();
        let q_loads = QLoads::Direct;
        match folded {
            true => fixture.encode_unfolded(gpu, &mut rec, q_loads, planned),
            false => fixture.encode(gpu, &mut rec, q_loads, planned),
        }
        let op = Matmul {
            x: fixture.out(),
            m: t,
            weight: &weight,
            norm: None,
            gather: None,
            fold: folded.then(|| fixture.fold(planned)),
            output: Output::Store(&y),
            lora: None,
        };
        matmul::encode(gpu, &mut rec, &op, shape);
        rec.submit();
        pollster::block_on(gpu.read_f32(&y)).expect("read-back")
    };
    for shape in crate::matmul::shapes_on(gpu) {
        let chain = run(shape, false, &planned);
        if let Some(bad) = chain.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "{}: the combined product has {} at {bad}",
                shape.key(),
                chain[bad]
            ));
        }
        let folded = run(shape, true, &planned);
        check_bitwise(
            &format!("{} folding vs combined", shape.key()),
            &folded,
            &chain,
        )?;
    }
    Ok(Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    })
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n_heads, n_kv_heads, head_dim, block_size) in [(9, 3, 64, 16), (4, 1, 80, 4)] {
        for format in [WeightFormat::F32, WeightFormat::Q4_1] {
            let heads = Heads {
                n_heads,
                n_kv_heads,
                head_dim,
                block_size,
                sharp: 1.0,
                window: None,
            };
            let name =
                format!("fold-in-o-projection/h{n_heads}_kv{n_kv_heads}_d{head_dim}/{format}");
            cases.push(Case::new("attention", name, move |gpu| {
                fold_case(heads, format, gpu)
            }));
        }
    }
    for variant in AttentionVariant::all() {
        let tag = format!("{:?}-{:?}", variant.split, variant.q_loads);
        for row in SHAPES {
            let (n_heads, n_kv_heads, head_dim, block_size, sharp, seqs) = *row;
            if !variant.q_loads.fits(&Heads::of(row).shape(1)) {
                continue; // too many query values to hold: never run this way
            }
            let seqs: Vec<String> = seqs.iter().map(|(l, f)| format!("{f}..{l}")).collect();
            let name = format!(
                "{tag}/h{n_heads}_kv{n_kv_heads}_d{head_dim}_bs{block_size}_scale{sharp}_rows{}",
                seqs.join(",")
            );
            cases.push(Case::new("attention", name, move |gpu| {
                accuracy_case(row, variant, gpu)
            }));
        }
        for c in WINDOWED {
            if !variant.q_loads.fits(&c.heads().shape(1)) {
                continue;
            }
            let (n_heads, n_kv_heads, head_dim, block_size) = c.heads;
            let seqs: Vec<String> = c.seqs.iter().map(|(l, f)| format!("{f}..{l}")).collect();
            let name = format!(
                "{tag}/window{}/h{n_heads}_kv{n_kv_heads}_d{head_dim}_bs{block_size}_scale{}_rows{}",
                c.window,
                c.sharp,
                seqs.join(",")
            );
            cases.push(Case::new("attention", name, move |gpu| {
                windowed_case(c, variant, gpu)
            }));
        }
        for c in INVARIANCE {
            let shape = AttentionShape::new(1, c.n_heads, c.n_kv_heads, c.head_dim, 1);
            if !variant.q_loads.fits(&shape) {
                continue;
            }
            let name = format!(
                "{tag}/batch-invariance/h{}_kv{}_d{}_bs{}",
                c.n_heads, c.n_kv_heads, c.head_dim, c.block_size
            );
            cases.push(Case::new("attention", name, move |gpu| {
                invariance_case(c, variant, gpu)
            }));
        }
    }
    cases
}
