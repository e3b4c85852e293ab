// Causal attention with grouped-query heads over a paged KV pool, for a varlen batch:
//     out[i, h, :] = sum_j softmax_j(scale * q[i, h, :] . k[key j, g, :]) * v[key j, g, :]
// for query row i with (table offset o, absolute position p) = rows[i], keys j = 0 ..= p
// of its own sequence, and kv head g = h / group (group = n_heads / n_kv_heads). Key j's
// row lives in the pools at
//     slot(j) = block_tables[o + j / block_size] * block_size + j % block_size.
// Rows of any number of sequences (prefill chunks, single-token decodes) share a dispatch.
// Buffers are read as vec4: head_dim is a multiple of 4 and at most 4 * WG = 256.
//
// One workgroup of WG invocations per (head, query row). Keys are taken in chunks of
// CHUNK = WG, always counted from key 0, with an online softmax. Per chunk:
//   1. invocation l scores key first + l: raw = q . k in four fma lanes over head_dim (vec4
//      steps, lanes combined as (x + y) + (z + w)); the chunk's largest raw score is found
//      with a workgroup atomicMax on an order-preserving u32 image of the f32 (max is exact,
//      so the order in which invocations arrive does not matter);
//   2. m = max(running max, chunk max * scale) (scale > 0, so rounding keeps the order), and
//      invocation l writes p_l = exp(fma(raw_l, scale, -m)) (and where key l's row lives)
//      to workgroup memory;
//   3. the invocations are split into `split = WG / (head_dim / 4)` key groups of head_dim / 4
//      columns: key group s takes the chunk's keys s, s + split, ... in order, rescales its
//      running vec4 accumulator and sum by exp(old m - new m) and adds p_j * v[j, g, col] with
//      fma, and p_j to the sum.
// At the end the key groups' accumulators and sums are added in group order and divided.
// Every choice above depends only on head_dim and on the row's own key count p + 1, never
// on t, on the other rows of the dispatch, nor on which physical blocks hold the keys: a
// row's output is bitwise the same decoded alone or inside any batch or prefill chunk,
// wherever its blocks live (DESIGN.md, principle 1).
//
// The host cannot check rows and block_tables (they live on the GPU): a block id past the
// pool or an offset past the tables reads whatever robust buffer access gives.
//
// Plain core WGSL: no f16, no subgroups.

struct Params {
    t: u32,          // query rows in this dispatch
    n_heads: u32,    // query heads
    n_kv_heads: u32, // key/value heads; divides n_heads
    head_dim: u32,   // values per head: a multiple of 4, at most 4 * WG
    group: u32,      // n_heads / n_kv_heads: query heads per kv head
    block_size: u32, // key rows per block of the pools, > 0
    scale: f32,      // > 0, multiplies q . k (normally 1 / sqrt(head_dim))
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;            // [t, n_heads, head_dim / 4]
@group(0) @binding(2) var<storage, read> k_pool: array<vec4<f32>>;       // [num_blocks * block_size, n_kv_heads, head_dim / 4]
@group(0) @binding(3) var<storage, read> v_pool: array<vec4<f32>>;       // [num_blocks * block_size, n_kv_heads, head_dim / 4]
@group(0) @binding(4) var<storage, read> block_tables: array<u32>;       // [*] block ids; a sequence's table is ceil((p + 1) / block_size) of them from its offset
@group(0) @binding(5) var<storage, read> rows: array<u32>;               // [t, 2]: (table offset, absolute position p)
@group(0) @binding(6) var<storage, read_write> out: array<vec4<f32>>;    // [t, n_heads, head_dim / 4]

const WG: u32 = 64u;
const CHUNK: u32 = WG;

// p_j of the current chunk.
var<workgroup> probs: array<f32, CHUNK>;
// Where key j of the current chunk starts in the pools (kv_base), for step 3.
var<workgroup> key_base: array<u32, CHUNK>;
// The chunk's largest raw score as `ordered` bits; two slots, alternating by chunk, so that
// one is reset while the other is read.
var<workgroup> chunk_max: array<atomic<u32>, 2>;
// Each key group's accumulators and sums at the end, indexed by invocation.
var<workgroup> partial: array<vec4<f32>, WG>;
var<workgroup> partial_sum: array<f32, WG>;

// Where key `key` of the sequence whose block table starts at `table`, kv head `g`, starts
// in k_pool and v_pool, in vec4s.
fn kv_base(table: u32, key: u32, g: u32) -> u32 {
    let slot = block_tables[table + key / p.block_size] * p.block_size + key % p.block_size;
    return (slot * p.n_kv_heads + g) * (p.head_dim / 4u);
}

// An f32 as a u32 with the same order (NaN aside): 0 is below every image.
fn ordered(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn from_ordered(u: u32) -> f32 {
    return bitcast<f32>(select(~u, u & 0x7fffffffu, (u & 0x80000000u) != 0u));
}

// Dispatch: (n_heads, t, 1).
@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let row = wid.y;
    if (h >= p.n_heads || row >= p.t) {
        return; // uniform: the whole workgroup leaves
    }
    let hd4 = p.head_dim / 4u;
    let split = WG / hd4;  // key groups
    let col = lid % hd4;   // the output vec4 this invocation accumulates
    let kgroup = lid / hd4; // its key group; idle in step 3 when >= split
    let g = h / p.group;
    let q_base = (row * p.n_heads + h) * hd4;
    let table = rows[2u * row];
    let n_keys = rows[2u * row + 1u] + 1u;
    let n_chunks = (n_keys + CHUNK - 1u) / CHUNK;

    if (lid == 0u) {
        atomicStore(&chunk_max[0], 0u);
        atomicStore(&chunk_max[1], 0u);
    }
    workgroupBarrier();

    var run_max = 0.0; // scaled; valid from the first chunk on
    var run_sum = 0.0; // this key group's sum of p_j, relative to run_max
    var acc = vec4<f32>(0.0);

    for (var c = 0u; c < n_chunks; c += 1u) {
        let first = c * CHUNK;
        let in_chunk = min(CHUNK, n_keys - first);
        let slot = c & 1u;

        // 1. This invocation's key: its raw score, and the chunk's max.
        var raw = 0.0;
        var kb = 0u;
        if (lid < in_chunk) {
            kb = kv_base(table, first + lid, g);
            var lanes = vec4<f32>(0.0);
            for (var d = 0u; d < hd4; d += 1u) {
                lanes = fma(q[q_base + d], k_pool[kb + d], lanes);
            }
            raw = (lanes.x + lanes.y) + (lanes.z + lanes.w);
            atomicMax(&chunk_max[slot], ordered(raw));
        }
        workgroupBarrier();

        // 2. The new running max, the same in every invocation; one probability each.
        var new_max = from_ordered(atomicLoad(&chunk_max[slot])) * p.scale;
        if (c > 0u) {
            new_max = max(new_max, run_max);
        }
        if (lid < in_chunk) {
            probs[lid] = exp(fma(raw, p.scale, -new_max));
            key_base[lid] = kb;
        }
        if (lid == 0u) {
            // Last read in the previous chunk's step 2, next written after the barrier below.
            atomicStore(&chunk_max[slot ^ 1u], 0u);
        }
        workgroupBarrier();
        // probs and key_base are next written after the next chunk's first barrier, when
        // every invocation has finished reading them below.

        // 3. Rescale, then add this key group's share of the chunk in key order.
        let correction = select(0.0, exp(run_max - new_max), c > 0u);
        run_max = new_max;
        if (kgroup < split) {
            var a = acc * correction;
            var chunk_sum = 0.0;
            for (var j = kgroup; j < in_chunk; j += split) {
                let pj = probs[j];
                chunk_sum = chunk_sum + pj;
                a = fma(vec4<f32>(pj), v_pool[key_base[j] + col], a);
            }
            acc = a;
            run_sum = fma(run_sum, correction, chunk_sum);
        }
    }

    // Key groups combined in group order.
    partial[lid] = acc;
    partial_sum[lid] = run_sum;
    workgroupBarrier();
    if (lid < hd4) {
        var total = partial[lid];
        var sum = partial_sum[lid];
        for (var s = 1u; s < split; s += 1u) {
            total = total + partial[s * hd4 + lid];
            sum = sum + partial_sum[s * hd4 + lid];
        }
        out[q_base + lid] = total / sum;
    }
}
