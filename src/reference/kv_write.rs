//! Reference for the KV-cache write of the fused q|k|v matmul's epilogue: a plain row copy
//! into the pools.

/// `k_pool[slots[i], :] = k[i, :]` and `v_pool[slots[i], :] = v[i, :]` for each of the
/// `slots.len()` rows of `kv_dim` values; a slot past the pool writes nothing, as on the GPU.
pub fn kv_write(
    k: &[f32],
    v: &[f32],
    slots: &[u32],
    kv_dim: usize,
    k_pool: &mut [f32],
    v_pool: &mut [f32],
) {
    assert!(kv_dim > 0, "kv_write reference: kv_dim is 0");
    let rows = k_pool.len() / kv_dim;
    for (i, &slot) in slots.iter().enumerate() {
        let slot = slot as usize;
        if slot >= rows {
            continue;
        }
        let (src, dst) = (
            i * kv_dim..(i + 1) * kv_dim,
            slot * kv_dim..(slot + 1) * kv_dim,
        );
        k_pool[dst.clone()].copy_from_slice(&k[src.clone()]);
        v_pool[dst].copy_from_slice(&v[src]);
    }
}
