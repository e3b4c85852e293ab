// Writes a batch's new key and value rows into their slots of the paged KV pool:
//     k_pool[slots[i], :] = k[i, :]    v_pool[slots[i], :] = v[i, :]    for i in 0 .. t
// rows of kv_dim f32 values. A slot is a pool row: block id * block_size + offset in the
// block, chosen by the scheduler. Each slot must appear at most once per dispatch.
// A copy, no arithmetic: the pools hold exactly the values of k and v.
//
// One invocation per (row, column), writing both k and v. The host folds the workgroups
// into a 2D grid when there are more than the adapter allows per dimension: element e is
// (wid.y * num_workgroups.x + wid.x) * 256 + lid, and invocations past t * kv_dim do
// nothing. A slot past the pool writes nothing.

struct Params {
    t: u32,      // rows to write
    kv_dim: u32, // values per row (n_kv_heads * head_dim)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;              // [t, kv_dim]
@group(0) @binding(2) var<storage, read> v: array<f32>;              // [t, kv_dim]
@group(0) @binding(3) var<storage, read> slots: array<u32>;          // [t]: pool row of each row
@group(0) @binding(4) var<storage, read_write> k_pool: array<f32>;   // [num_blocks * block_size, kv_dim]
@group(0) @binding(5) var<storage, read_write> v_pool: array<f32>;   // [num_blocks * block_size, kv_dim]

const WG: u32 = 256u;

// Dispatch: ceil(t * kv_dim / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn kv_write(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let e = (wid.y * nwg.x + wid.x) * WG + lid;
    if (e >= p.t * p.kv_dim) {
        return;
    }
    let i = e / p.kv_dim;
    let col = e % p.kv_dim;
    let slot = slots[i];
    if (slot >= arrayLength(&k_pool) / p.kv_dim) {
        return;
    }
    let dst = slot * p.kv_dim + col;
    k_pool[dst] = k[e];
    v_pool[dst] = v[e];
}
