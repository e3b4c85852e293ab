//! Embedding lookup for every weight format: row sizes that are not multiples of 4 (float
//! formats), tables split into parts, ids past the vocabulary (zeros), ids that name the
//! previous step's drawn tokens, and batch invariance.

use sprout::formats::{WeightFormat, dequantize, quantize};
use sprout::gpu::kernels::embedding::{DRAWN, encode};
use sprout::gpu::{Gpu, GpuWeight};
use sprout::reference::embedding::embedding;
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close, read_f32, whole_blocks};

/// Decoding a stored value is exact in f32 on both sides, so the only allowed difference is
/// a GPU flushing f16 subnormals (|v| < 6e-5, about 1 value in 10^4 here) to zero: an NMSE
/// far below 1e-10. A wrong row, column or nibble gives an NMSE near 1.
const TOLERANCE: f64 = 1e-10;

/// (m, vocab, dim): SmolLM2's 576, and for the float formats rows of odd lengths.
const SHAPES: &[(usize, usize, usize)] = &[(1, 50, 64), (7, 100, 576), (70, 300, 96)];
const ODD_DIM: &[(usize, usize, usize)] = &[(3, 20, 1), (5, 40, 7), (9, 33, 130)];

struct Table {
    bytes: Vec<u8>,
    values: Vec<f32>,
    vocab: usize,
    dim: usize,
}

fn table(format: WeightFormat, vocab: usize, dim: usize, seed: u64) -> Table {
    let raw = SplitMix64::new(seed).vec(vocab * dim, 0.5);
    let bytes = quantize(format, &raw, dim).unwrap();
    let values = dequantize(format, &bytes, vocab, dim).unwrap();
    Table {
        bytes,
        values,
        vocab,
        dim,
    }
}

/// The first and last ids, a repeat, then random ones.
fn ids(m: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..m)
        .map(|i| match i {
            0 => 0,
            1 => vocab as u32 - 1,
            2 => 0,
            _ => rng.below(vocab as u64) as u32,
        })
        .collect()
}

fn run(
    gpu: &Gpu,
    format: WeightFormat,
    t: &Table,
    ids: &[u32],
    part_limit: Option<u64>,
) -> Vec<f32> {
    run_drawn(gpu, format, t, ids, &[0], part_limit)
}

/// As `run`, with `drawn` the previous step's drawn tokens (what `DRAWN | i` ids name).
fn run_drawn(
    gpu: &Gpu,
    format: WeightFormat,
    t: &Table,
    ids: &[u32],
    drawn: &[u32],
    part_limit: Option<u64>,
) -> Vec<f32> {
    lookup(gpu, format, t, (ids, drawn), part_limit, 1.0)
}

/// The lookup of `ids` (naming `drawn`'s tokens where marked), each value times `scale`.
fn lookup(
    gpu: &Gpu,
    format: WeightFormat,
    t: &Table,
    (ids, drawn): (&[u32], &[u32]),
    part_limit: Option<u64>,
    scale: f32,
) -> Vec<f32> {
    let weight = match part_limit {
        Some(l) => GpuWeight::upload_with_limit(gpu, format, &t.bytes, t.vocab, t.dim, l),
        None => GpuWeight::upload(gpu, format, &t.bytes, t.vocab, t.dim),
    }
    .unwrap();
    if let Some(l) = part_limit {
        assert!(
            weight.parts.len() > 1,
            "a limit of {l} bytes should split the table"
        );
    }
    let id_tensor = gpu.upload(ids);
    let drawn = gpu.upload(drawn);
    // NaN-filled, so a value the kernel fails to write shows.
    let out = gpu.upload(&vec![f32::NAN; ids.len() * t.dim]);
    let mut rec = gpu.recorder();
    encode(
        gpu,
        &mut rec,
        &weight,
        &id_tensor,
        &drawn,
        ids.len(),
        &out,
        scale,
    );
    rec.submit();
    read_f32(gpu, &out)
}

/// A per-part limit that holds about 8 rows.
fn small_limit(format: WeightFormat, dim: usize) -> u64 {
    (format.row_bytes(dim).unwrap() * 8 + 3) as u64
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for format in WeightFormat::ALL {
        let mut shapes = SHAPES.to_vec();
        if !format.is_quantized() {
            shapes.extend_from_slice(ODD_DIM);
        }
        for (m, vocab, dim) in shapes {
            let dim = whole_blocks(format, dim);
            cases.push(Case::new(
                "embedding",
                format!("{format}/m{m}_vocab{vocab}_dim{dim}"),
                move |gpu| {
                    let t = table(format, vocab, dim, (vocab * 31 + dim) as u64);
                    let ids = ids(m, vocab, m as u64);
                    check_close(
                        &run(gpu, format, &t, &ids, None),
                        &embedding(&t.values, dim, &ids, 1.0),
                        TOLERANCE,
                    )
                },
            ));
        }
        // Row lengths of whole blocks of every format (K-quants: 256 values).
        let (d64, d96) = (whole_blocks(format, 64), whole_blocks(format, 96));
        // Split into parts of ~8 rows: the same values as one buffer, bit for bit.
        cases.push(Case::new(
            "embedding",
            format!("{format}/split/m40_vocab77_dim{d96}"),
            move |gpu| {
                let t = table(format, 77, d96, 5);
                let ids = ids(40, 77, 6);
                let whole = run(gpu, format, &t, &ids, None);
                let split = run(gpu, format, &t, &ids, Some(small_limit(format, d96)));
                check_bitwise("split vs whole", &split, &whole)?;
                check_close(&split, &embedding(&t.values, d96, &ids, 1.0), TOLERANCE)
            },
        ));
        // Ids past the vocabulary give zeros, once, with the table split or not.
        cases.push(Case::new(
            "embedding",
            format!("{format}/invalid-ids"),
            move |gpu| {
                let t = table(format, 50, d64, 7);
                let ids = [3, 50, 49, u32::MAX, 0, 51, 1000];
                let want = embedding(&t.values, d64, &ids, 1.0);
                let mut worst = Outcome {
                    nmse: 0.0,
                    tolerance: TOLERANCE,
                };
                for limit in [None, Some(small_limit(format, d64))] {
                    let got = run(gpu, format, &t, &ids, limit);
                    for (r, &id) in ids.iter().enumerate().filter(|(_, id)| **id >= 50) {
                        if let Some(v) = got[r * d64..(r + 1) * d64].iter().find(|v| **v != 0.0) {
                            return Err(format!(
                                "id {id} of 50 (parts limit {limit:?}): {v}, want 0"
                            ));
                        }
                    }
                    let o = check_close(&got, &want, TOLERANCE)
                        .map_err(|e| format!("parts limit {limit:?}: {e}"))?;
                    worst.nmse = worst.nmse.max(o.nmse);
                }
                Ok(worst)
            },
        ));
        // Ids that name the previous step's drawn tokens give those tokens' rows, exactly
        // as the ids themselves would, with the table split or not.
        cases.push(Case::new(
            "embedding",
            format!("{format}/drawn-ids"),
            move |gpu| {
                let t = table(format, 90, d64, 11);
                let drawn = [17u32, 0, 89, 5];
                let ids = [3, DRAWN | 2, 40, DRAWN, DRAWN | 3, DRAWN | 1];
                let resolved = [3, 89, 40, 17, 5, 0];
                let want = run(gpu, format, &t, &resolved, None);
                for limit in [None, Some(small_limit(format, d64))] {
                    let got = run_drawn(gpu, format, &t, &ids, &drawn, limit);
                    check_bitwise(&format!("parts limit {limit:?}"), &got, &want)?;
                }
                check_close(&want, &embedding(&t.values, d64, &resolved, 1.0), TOLERANCE)
            },
        ));
        // The embedding scale: one f32 multiply per decoded value, so scale 1 gives the
        // decoded values bit for bit, and any scale the unscaled values times it, bit for
        // bit, with the table split or not.
        cases.push(Case::new(
            "embedding",
            format!("{format}/scale"),
            move |gpu| {
                let t = table(format, 60, d64, 13);
                let ids = ids(24, 60, 14);
                let unscaled = run(gpu, format, &t, &ids, None);
                let reference = embedding(&t.values, d64, &ids, 1.0);
                let plain: Vec<f32> = ids
                    .iter()
                    .flat_map(|&id| t.values[id as usize * d64..][..d64].to_vec())
                    .collect();
                check_bitwise(
                    "reference at scale 1 vs the table's rows",
                    &reference,
                    &plain,
                )?;
                let scale = (640f32).sqrt();
                let want: Vec<f32> = unscaled.iter().map(|v| v * scale).collect();
                for limit in [None, Some(small_limit(format, d64))] {
                    let got = lookup(gpu, format, &t, (&ids, &[0]), limit, scale);
                    check_bitwise(
                        &format!("scale {scale}, parts limit {limit:?}"),
                        &got,
                        &want,
                    )?;
                }
                check_close(&want, &embedding(&t.values, d64, &ids, scale), TOLERANCE)
            },
        ));
        // A row is the same alone and among 64.
        cases.push(Case::new(
            "embedding",
            format!("{format}/batch-invariance"),
            move |gpu| {
                let (vocab, dim) = (120, d64);
                let t = table(format, vocab, dim, 9);
                let ids = ids(64, vocab, 10);
                let batch = run(gpu, format, &t, &ids, None);
                for (i, rows) in [(0usize, 1usize), (37, 1), (63, 1), (20, 13)] {
                    let alone = run(gpu, format, &t, &ids[i..i + rows], None);
                    check_bitwise(
                        &format!("ids {i}..{}", i + rows),
                        &alone,
                        &batch[i * dim..(i + rows) * dim],
                    )?;
                }
                check_close(&batch, &embedding(&t.values, dim, &ids, 1.0), TOLERANCE)
            },
        ));
    }
    cases
}
