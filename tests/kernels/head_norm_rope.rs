//! `head_norm_rope` (Qwen3's per-head q and k norms, RoPE and the KV-cache write after a
//! stored q|k|v projection) against `reference::head_norm_rope` (rmsnorm per head ->
//! rope -> kv_write), through its fixture: q starts NaN and the pools a sentinel, so a
//! value not written, or written where it should not be, shows.
//! - heads of 16 to 256 values, one row to a prefill chunk, plain and llama3-scaled
//!   frequencies;
//! - a row's outputs are bitwise the same alone and in a batch;
//! - a position past the table writes NaN q and k (v as it is); a slot past the pool
//!   writes no k or v.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::RowInfo;
use sprout::gpu::kernels::head_norm_rope::{HeadNormRopeFixture, HeadShape, POOL_SENTINEL};
use sprout::gpu::kernels::rope::frequencies;
use sprout::model::rope_scaling::RopeScaling;
use sprout::reference::head_norm_rope::{Heads, head_norm_rope};
use sprout::rng::SplitMix64;

use crate::common::{Case, Outcome, check_bitwise, check_close};

/// The norm rounds to f32 before the weights and the rotation (the reference keeps f64):
/// relative errors near 1e-7, an NMSE near 1e-13.
const TOLERANCE: f64 = 1e-9;
const EPS: f32 = 1e-6;
const TABLE: usize = 50;
const POOL_ROWS: usize = 40;

/// One problem: its heads, rows (position, slot) and values.
struct Problem {
    heads: Heads,
    x: Vec<f32>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    positions: Vec<u32>,
    slots: Vec<u32>,
    freqs: Vec<f64>,
}

impl Problem {
    /// `m` rows: positions 0, the table's last, then random; distinct random slots, the
    /// last past the pool when `m > 2`. Values at scale 3 (the norm must undo it).
    fn new(heads: Heads, m: usize, scaled: bool, seed: u64) -> Problem {
        let mut rng = SplitMix64::new(seed);
        let (hd, width) = (
            heads.head_dim,
            (heads.n_heads + 2 * heads.n_kv_heads) * heads.head_dim,
        );
        let x = rng.vec(m * width, 3.0);
        let q_norm = (0..hd).map(|_| 1.0 + rng.uniform(0.5)).collect();
        let k_norm = (0..hd).map(|_| 1.0 + rng.uniform(0.5)).collect();
        let positions = (0..m)
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
        slots.truncate(m);
        if m > 2 {
            slots[m - 1] = POOL_ROWS as u32 + 3;
        }
        let mut freqs = frequencies(hd, 10000.0);
        if scaled {
            // Llama 3.1's parameters with an original context that puts pairs in every band.
            let scaling = RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 256.0,
            };
            scaling.apply(&mut freqs);
        }
        Problem {
            heads,
            x,
            q_norm,
            k_norm,
            positions,
            slots,
            freqs,
        }
    }

    fn rows(&self) -> Vec<RowInfo> {
        self.positions
            .iter()
            .zip(&self.slots)
            .map(|(&p, &s)| RowInfo::new(0, p, s))
            .collect()
    }

    /// q, the K pool and the V pool, from the GPU.
    fn run(&self, gpu: &Gpu, table: usize) -> Result<Vec<f32>, String> {
        let h = self.heads;
        let shape = HeadShape {
            n_heads: h.n_heads,
            n_kv_heads: h.n_kv_heads,
            head_dim: h.head_dim,
        };
        let fixture = HeadNormRopeFixture::new(
            gpu,
            &shape,
            &self.x,
            (&self.q_norm, &self.k_norm, EPS),
            &self.rows(),
            (&self.freqs, table),
            POOL_ROWS,
        )
        .map_err(|e| e.to_string())?;
        let [q, k, v] = pollster::block_on(fixture.run(gpu)).map_err(|e| e.to_string())?;
        Ok([q, k, v].concat())
    }

    /// The same from the reference.
    fn want(&self, table: usize) -> Vec<f32> {
        let kv_dim = self.heads.n_kv_heads * self.heads.head_dim;
        let mut k_pool = vec![POOL_SENTINEL; POOL_ROWS * kv_dim];
        let mut v_pool = k_pool.clone();
        let q = head_norm_rope(
            &self.x,
            self.heads,
            (&self.q_norm, &self.k_norm, EPS),
            &self.positions,
            &self.slots,
            (&self.freqs, table),
            &mut k_pool,
            &mut v_pool,
        );
        [q, k_pool, v_pool].concat()
    }

    /// Only row `r`.
    fn row(&self, r: usize) -> Problem {
        let width = self.x.len() / self.positions.len();
        Problem {
            x: self.x[r * width..(r + 1) * width].to_vec(),
            positions: vec![self.positions[r]],
            slots: vec![self.slots[r]],
            q_norm: self.q_norm.clone(),
            k_norm: self.k_norm.clone(),
            freqs: self.freqs.clone(),
            heads: self.heads,
        }
    }
}

fn accuracy(gpu: &Gpu, p: &Problem) -> Result<Outcome, String> {
    check_close(&p.run(gpu, TABLE)?, &p.want(TABLE), TOLERANCE)
}

/// Each row's q (and its K and V slots) alone is bitwise what it is in the batch.
fn batch_invariance(gpu: &Gpu, p: &Problem) -> Result<Outcome, String> {
    let all = p.run(gpu, TABLE)?;
    let outcome = check_close(&all, &p.want(TABLE), TOLERANCE)?;
    let q_dim = p.heads.n_heads * p.heads.head_dim;
    let kv_dim = p.heads.n_kv_heads * p.heads.head_dim;
    let m = p.positions.len();
    let pools = m * q_dim;
    for r in 0..m {
        let alone = p.row(r).run(gpu, TABLE)?;
        let in_batch = &all[r * q_dim..(r + 1) * q_dim];
        check_bitwise(&format!("row {r}'s q"), &alone[..q_dim], in_batch)?;
        let slot = p.slots[r] as usize;
        if slot >= POOL_ROWS {
            continue;
        }
        for pool in 0..2 {
            let at = |base: usize| base + pool * POOL_ROWS * kv_dim + slot * kv_dim;
            check_bitwise(
                &format!("row {r}'s {} slot", ["k", "v"][pool]),
                &alone[at(q_dim)..at(q_dim) + kv_dim],
                &all[at(pools)..at(pools) + kv_dim],
            )?;
        }
    }
    Ok(outcome)
}

/// A table shorter than the positions: rows at or past it get NaN q and k and their v;
/// the others are as the reference says; a slot past the pool is never written.
fn past_table(gpu: &Gpu) -> Result<Outcome, String> {
    let heads = Heads {
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 32,
    };
    let p = Problem::new(heads, 6, false, 5);
    let short = 20;
    let (got, want) = (p.run(gpu, short)?, p.want(short));
    let same =
        |a: f32, b: f32| (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-5 * b.abs().max(1.0);
    if let Some(i) = (0..want.len()).find(|&i| !same(got[i], want[i])) {
        return Err(format!("value {i}: {} vs {}", got[i], want[i]));
    }
    // The reference itself: NaN exactly for the rows at or past the table.
    let past = p
        .positions
        .iter()
        .filter(|&&pos| pos as usize >= short)
        .count();
    let q_dim = 64;
    let nan_rows = want[..6 * q_dim]
        .chunks(q_dim)
        .filter(|r| r.iter().all(|v| v.is_nan()))
        .count();
    if past == 0 || nan_rows != past {
        return Err(format!("{past} rows past the table, {nan_rows} NaN q rows"));
    }
    Ok(Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    })
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let shapes = [(3, 1, 16), (4, 2, 64), (2, 1, 128), (1, 1, 256)];
    for (n_heads, n_kv_heads, head_dim) in shapes {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        for m in [1, 5, 33] {
            for scaled in [false, true] {
                let rope = if scaled { "llama3" } else { "plain" };
                let name = format!("{n_heads}x{n_kv_heads}x{head_dim}/m{m}/{rope}");
                let seed = (m * 1000 + head_dim) as u64 + u64::from(scaled);
                cases.push(Case::new("head_norm_rope", name, move |gpu| {
                    accuracy(gpu, &Problem::new(heads, m, scaled, seed))
                }));
            }
        }
        let name = format!("{n_heads}x{n_kv_heads}x{head_dim}/batch-invariant");
        cases.push(Case::new("head_norm_rope", name, move |gpu| {
            batch_invariance(gpu, &Problem::new(heads, 7, true, 11))
        }));
    }
    cases.push(Case::new(
        "head_norm_rope",
        "position-past-table",
        past_table,
    ));
    cases
}
