//! RoPE in both layouts: several head sizes and head counts (pairs not multiples of the
//! workgroup), thetas of 1e4 and 1e6, positions up to 32767 (far outside [-pi, pi]),
//! positions past the table (NaN), and batch invariance.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::rope::{RopeLayout, RopeTable, encode};
use sprout::reference::rope::rope;

use crate::common::{Case, Outcome, Rng, check_bitwise, check_close, read_f32};

/// The table's cos and sin are f64 values rounded to f32, and each output is two f32
/// products: a relative error near 1e-7, an NMSE near 1e-14. 1e-11 leaves room, yet an
/// angle computed in f32 (an error of up to pos * 6e-8 radians, ~2e-3 at position 32767) or
/// the wrong layout (an NMSE near 1) fails.
const TOLERANCE: f64 = 1e-11;

/// (m, n_heads, head_dim): SmolLM2's 9 query and 3 key heads of 64, and odd sizes.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 2),
    (3, 9, 64),
    (3, 3, 64),
    (5, 4, 6),
    (7, 2, 80),
    (2, 32, 128),
    (33, 5, 96),
];

struct Problem {
    x: Vec<f32>,
    positions: Vec<u32>,
}

fn problem(m: usize, n_heads: usize, head_dim: usize, max_pos: u32, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * n_heads * head_dim, 2.0);
    // Position 0 (the identity) and the table's last one, then random ones.
    let positions = (0..m)
        .map(|r| match r {
            0 => 0,
            1 => max_pos - 1,
            _ => rng.below(max_pos),
        })
        .collect();
    Problem { x, positions }
}

fn run(gpu: &Gpu, layout: RopeLayout, table: &RopeTable, p: &Problem, n_heads: usize) -> Vec<f32> {
    let (x, positions) = (gpu.upload(&p.x), gpu.upload(&p.positions));
    let mut rec = gpu.recorder();
    encode(
        gpu,
        &mut rec,
        layout,
        &x,
        &positions,
        table,
        p.positions.len(),
        n_heads,
    );
    rec.submit();
    read_f32(gpu, &x)
}

#[allow(clippy::too_many_arguments)]
fn check(
    gpu: &Gpu,
    layout: RopeLayout,
    m: usize,
    n_heads: usize,
    head_dim: usize,
    theta: f64,
    max_pos: u32,
    seed: u64,
) -> Result<Outcome, String> {
    let table = RopeTable::new(gpu, head_dim, theta, max_pos as usize);
    let p = problem(m, n_heads, head_dim, max_pos, seed);
    let got = run(gpu, layout, &table, &p, n_heads);
    check_close(
        &got,
        &rope(&p.x, &p.positions, n_heads, head_dim, theta, layout),
        TOLERANCE,
    )
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for layout in RopeLayout::ALL {
        for &(m, h, d) in SHAPES {
            cases.push(Case::new(
                "rope",
                format!("{layout:?}/m{m}_h{h}_d{d}"),
                move |gpu| {
                    check(
                        gpu,
                        layout,
                        m,
                        h,
                        d,
                        10_000.0,
                        4096,
                        (m * 131 + h * 17 + d) as u64,
                    )
                },
            ));
        }
        // Long contexts: angles up to ~32767 radians.
        cases.push(Case::new(
            "rope",
            format!("{layout:?}/long/m40_h3_d64_theta1e6"),
            move |gpu| check(gpu, layout, 40, 3, 64, 1e6, 32_768, 41),
        ));
        // A row is bitwise the same alone and among 64.
        cases.push(Case::new(
            "rope",
            format!("{layout:?}/batch-invariance"),
            move |gpu| {
                let (m, h, d) = (64, 9, 64);
                let table = RopeTable::new(gpu, d, 10_000.0, 8192);
                let p = problem(m, h, d, 8192, 43);
                let batch = run(gpu, layout, &table, &p, h);
                let row = h * d;
                for (i, rows) in [(0usize, 1usize), (37, 1), (63, 1), (20, 13)] {
                    let sub = Problem {
                        x: p.x[i * row..(i + rows) * row].to_vec(),
                        positions: p.positions[i..i + rows].to_vec(),
                    };
                    let alone = run(gpu, layout, &table, &sub, h);
                    check_bitwise(
                        &format!("rows {i}..{}", i + rows),
                        &alone,
                        &batch[i * row..(i + rows) * row],
                    )?;
                }
                check_close(
                    &batch,
                    &rope(&p.x, &p.positions, h, d, 10_000.0, layout),
                    TOLERANCE,
                )
            },
        ));
    }
    // A position past the table poisons its row with NaN and leaves the others correct.
    cases.push(Case::new("rope", "position-past-table", |gpu| {
        let (h, d, max_pos) = (2, 8, 16);
        let table = RopeTable::new(gpu, d, 10_000.0, max_pos);
        let mut p = problem(3, h, d, max_pos as u32, 47);
        p.positions[1] = max_pos as u32;
        let got = run(gpu, RopeLayout::HalfSplit, &table, &p, h);
        if let Some(v) = got[h * d..2 * h * d].iter().find(|v| !v.is_nan()) {
            return Err(format!(
                "row at position {max_pos} of a {max_pos}-row table holds {v}, want NaN"
            ));
        }
        let want = rope(&p.x, &p.positions, h, d, 10_000.0, RopeLayout::HalfSplit);
        let keep = |v: &[f32]| [&v[..h * d], &v[2 * h * d..]].concat();
        check_close(&keep(&got), &keep(&want), TOLERANCE)
    }));
    cases
}
