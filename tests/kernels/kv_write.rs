//! Writing new key/value rows into pool slots: exact copies into shuffled slots of a pool
//! whose other rows stay untouched, for several row counts and widths, and a slot past
//! the pool writing nothing.

use sprout::gpu::Gpu;
use sprout::gpu::kernels::kv_write::encode;
use sprout::reference::kv_write as reference;

use crate::common::{Case, Outcome, Rng, check_bitwise, read_f32};

/// A copy: the pools must hold exactly k and v.
const TOLERANCE: f64 = 0.0;

fn check(
    gpu: &Gpu,
    t: usize,
    kv_dim: usize,
    pool_rows: usize,
    bad_slot: bool,
) -> Result<Outcome, String> {
    let mut rng = Rng::new((t * 1000 + kv_dim) as u64);
    let k = rng.vec(t * kv_dim, 1.0);
    let v = rng.vec(t * kv_dim, 1.0);
    // Distinct slots in shuffled order; the pool starts with other values everywhere.
    let mut ids: Vec<u32> = (0..pool_rows as u32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u32 + 1) as usize);
    }
    let mut slots = ids[..t].to_vec();
    if bad_slot {
        slots[t / 2] = pool_rows as u32 + 3;
    }
    let k_pool = rng.vec(pool_rows * kv_dim, 5.0);
    let v_pool = rng.vec(pool_rows * kv_dim, 5.0);
    let (kt, vt, st) = (gpu.upload(&k), gpu.upload(&v), gpu.upload(&slots));
    let (kp, vp) = (gpu.upload(&k_pool), gpu.upload(&v_pool));
    let mut rec = gpu.recorder();
    encode(gpu, &mut rec, &kt, &vt, &st, t, kv_dim, &kp, &vp);
    rec.submit();
    let (mut want_k, mut want_v) = (k_pool, v_pool);
    reference::kv_write(&k, &v, &slots, kv_dim, &mut want_k, &mut want_v);
    check_bitwise("k_pool", &read_f32(gpu, &kp), &want_k)?;
    check_bitwise("v_pool", &read_f32(gpu, &vp), &want_v)?;
    Ok(Outcome {
        nmse: 0.0,
        tolerance: TOLERANCE,
    })
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // SmolLM2-135M's kv_dim (3 x 64) for a decode, a batch and a long prefill; widths off
    // the workgroup; a pool just big enough.
    for (t, kv_dim, pool_rows) in [
        (1, 192, 64),
        (7, 192, 64),
        (300, 192, 512),
        (33, 4, 40),
        (5, 257, 5),
        (1000, 512, 2048),
    ] {
        cases.push(Case::new(
            "kv_write",
            format!("t{t}_kv{kv_dim}_pool{pool_rows}"),
            move |gpu| check(gpu, t, kv_dim, pool_rows, false),
        ));
    }
    cases.push(Case::new("kv_write", "slot-past-pool", |gpu| {
        check(gpu, 9, 64, 32, true)
    }));
    cases
}
