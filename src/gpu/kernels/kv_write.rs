//! Writing a batch's new keys and values into the paged KV pool (shaders/kv_write.wgsl).
//!
//! Owns one dispatch per layer: `k_pool[slots[i], :] = k[i, :]` and
//! `v_pool[slots[i], :] = v[i, :]` for the `t` rows of the batch, where a slot is a pool
//! row (`block id * block_size + offset in the block`) chosen on the CPU by the scheduler
//! (`StepPlan`'s slot mapping). `k` and `v` are `[t, kv_dim]` f32, as the k and v
//! projections (after RoPE on k) leave them; the pools are `[rows, kv_dim]` f32.
//!
//! Invariants: a plain copy (the pool holds bitwise the projected values, whichever slot
//! and batch they came in); each row is independent of the others, so a row's write does
//! not depend on the batch. Slots must be distinct within a dispatch (two rows writing one
//! slot race). A slot past the pool writes nothing (the host cannot check slots: they live
//! on the GPU).

use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/kv_write.wgsl");
/// Invocations per workgroup (`WG` in the shader).
pub const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    t: u32,
    kv_dim: u32,
    _pad: [u32; 2],
}

pub fn spec() -> KernelSpec {
    use Access::{Read, ReadWrite};
    KernelSpec {
        key: "kv_write".into(),
        source: Box::new(|| SOURCE.into()),
        entry: "kv_write",
        storage: &[Read, Read, Read, ReadWrite, ReadWrite],
    }
}

/// Records `k_pool[slots[i], :] = k[i, :]` and `v_pool[slots[i], :] = v[i, :]` for
/// `i in 0..t`, rows of `kv_dim` f32 values, as one dispatch.
#[allow(clippy::too_many_arguments)]
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    k: &Tensor,
    v: &Tensor,
    slots: &Tensor,
    t: usize,
    kv_dim: usize,
    k_pool: &Tensor,
    v_pool: &Tensor,
) {
    assert!(kv_dim > 0, "kv_write: kv_dim is 0");
    let n = t * kv_dim;
    assert!(
        k.len >= n,
        "kv_write: k holds {} values, needs {t}x{kv_dim}",
        k.len
    );
    assert!(
        v.len >= n,
        "kv_write: v holds {} values, needs {t}x{kv_dim}",
        v.len
    );
    assert!(
        slots.len >= t,
        "kv_write: slots hold {} values, need {t}",
        slots.len
    );
    for (name, pool) in [("k_pool", k_pool), ("v_pool", v_pool)] {
        assert!(
            pool.len >= kv_dim && pool.len.is_multiple_of(kv_dim),
            "kv_write: {name} holds {} values, not a whole number of rows of {kv_dim}",
            pool.len
        );
        assert!(
            u32::try_from(pool.len).is_ok(),
            "kv_write: {name} holds {} values, past u32 indexing",
            pool.len
        );
    }
    assert!(
        k_pool.len == v_pool.len,
        "kv_write: k_pool holds {} values but v_pool {}",
        k_pool.len,
        v_pool.len
    );
    let n32 = u32::try_from(n).expect("kv_write: more than 2^32 values");
    let buffers = [
        ("k", k),
        ("v", v),
        ("slots", slots),
        ("k_pool", k_pool),
        ("v_pool", v_pool),
    ];
    for (name, t) in buffers {
        assert!(
            t.buffer.size() <= gpu.caps.max_binding,
            "kv_write: {name} is {} bytes, past the adapter's {}-byte binding limit",
            t.buffer.size(),
            gpu.caps.max_binding
        );
    }
    let params = Params {
        t: t as u32,
        kv_dim: kv_dim as u32,
        _pad: [0; 2],
    };
    rec.dispatch(
        &gpu.pipeline(&spec()),
        bytemuck::bytes_of(&params),
        &buffers.map(|(_, t)| &t.buffer),
        grid(gpu, n32.div_ceil(WORKGROUP) as usize),
    );
}
