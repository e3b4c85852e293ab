// Causal attention with grouped-query heads over a paged KV pool, for a varlen batch:
//     out[i, h, :] = sum_j softmax_j(scale * q[i, h, :] . k[key j, g, :]) * v[key j, g, :]
// for query row i with (table offset o, absolute position p) = rows[i], keys j = 0 ..= p
// of its own sequence, and kv head g = h / group (group = n_heads / n_kv_heads). Key j's
// row lives in the pools at
//     slot(j) = block_tables[o + j / block_size] * block_size + j % block_size.
// Rows of any number of sequences (prefill chunks, single-token decodes) share a dispatch.
// Buffers are read as vec4: head_dim is a multiple of 4 and at most 4 * WG = 256.
//
// One workgroup of WG invocations per (HG query heads that share a kv head, query row): the
// host prepends `const HG: u32`, a divisor of `group`. Each key and value row is loaded
// once for the HG heads. The host also prepends `const HOLD_Q: bool` and `const HD4: u32`:
// with HOLD_Q, every invocation loads the HG query vectors once, before the first chunk,
// into a private array of HG * HD4 vec4s (HD4 = head_dim / 4, a constant so that the
// compiler can keep it out of memory), rather than once per key. The values, and so the
// results, are the same either way.
//
// Keys are taken in chunks of CHUNK = WG, always counted from key 0, with an online softmax
// kept per head. Per chunk, for each of the HG heads:
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
// A head's operations are the same whatever HG is: HG only decides which loads are shared.
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

// p_j of the current chunk, per head of the workgroup: probs[i * CHUNK + j].
var<workgroup> probs: array<f32, HG * CHUNK>;
// Where key j of the current chunk starts in the pools (kv_base), for step 3.
var<workgroup> key_base: array<u32, CHUNK>;
// Per head, the chunk's largest raw score as `ordered` bits; two slots per head
// (chunk_max[2 * i + slot]), alternating by chunk, so that one is reset while the other is
// read.
var<workgroup> chunk_max: array<atomic<u32>, 2u * HG>;
// Each key group's accumulators and sums at the end, for one head at a time, indexed by
// invocation.
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

// Dispatch: (n_heads / HG, t, 1).
@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h0 = wid.x * HG; // the first of this workgroup's heads
    let row = wid.y;
    if (h0 >= p.n_heads || row >= p.t) {
        return; // uniform: the whole workgroup leaves
    }
    let hd4 = p.head_dim / 4u;
    let split = WG / hd4;  // key groups
    let col = lid % hd4;   // the output vec4 this invocation accumulates
    let kgroup = lid / hd4; // its key group; idle in step 3 when >= split
    let g = h0 / p.group;  // HG divides group, so every head here shares kv head g
    let q_base = (row * p.n_heads + h0) * hd4; // head h0 + i starts at q_base + i * hd4
    let table = rows[2u * row];
    let n_keys = rows[2u * row + 1u] + 1u;
    let n_chunks = (n_keys + CHUNK - 1u) / CHUNK;

    if (lid < 2u * HG) {
        atomicStore(&chunk_max[lid], 0u);
    }
    workgroupBarrier();

    var held_q: array<vec4<f32>, HG * HD4>;
    if (HOLD_Q) {
        for (var i = 0u; i < HG * HD4; i += 1u) {
            held_q[i] = q[q_base + i];
        }
    }

    var run_max: array<f32, HG>; // scaled; valid from the first chunk on
    var run_sum: array<f32, HG>; // this key group's sums of p_j, relative to run_max
    var acc: array<vec4<f32>, HG>;

    for (var c = 0u; c < n_chunks; c += 1u) {
        let first = c * CHUNK;
        let in_chunk = min(CHUNK, n_keys - first);
        let slot = c & 1u;

        // 1. This invocation's key: its raw score for each head, and the chunk's max.
        var raw: array<f32, HG>;
        var kb = 0u;
        if (lid < in_chunk) {
            kb = kv_base(table, first + lid, g);
            // Zeroed explicitly each chunk: SwiftShader (browsers' software WebGPU) kept
            // the previous chunk's values in arrays declared in a loop without a value.
            var lanes: array<vec4<f32>, HG>;
            for (var i = 0u; i < HG; i += 1u) {
                lanes[i] = vec4<f32>(0.0);
            }
            if (HOLD_Q) {
                for (var d = 0u; d < HD4; d += 1u) {
                    let k = k_pool[kb + d];
                    for (var i = 0u; i < HG; i += 1u) {
                        lanes[i] = fma(held_q[i * HD4 + d], k, lanes[i]);
                    }
                }
            } else {
                for (var d = 0u; d < hd4; d += 1u) {
                    let k = k_pool[kb + d];
                    for (var i = 0u; i < HG; i += 1u) {
                        lanes[i] = fma(q[q_base + i * hd4 + d], k, lanes[i]);
                    }
                }
            }
            for (var i = 0u; i < HG; i += 1u) {
                raw[i] = (lanes[i].x + lanes[i].y) + (lanes[i].z + lanes[i].w);
                atomicMax(&chunk_max[2u * i + slot], ordered(raw[i]));
            }
        }
        workgroupBarrier();

        // 2. The new running maxima, the same in every invocation; one probability each.
        var new_max: array<f32, HG>;
        for (var i = 0u; i < HG; i += 1u) {
            new_max[i] = from_ordered(atomicLoad(&chunk_max[2u * i + slot])) * p.scale;
            if (c > 0u) {
                new_max[i] = max(new_max[i], run_max[i]);
            }
        }
        if (lid < in_chunk) {
            for (var i = 0u; i < HG; i += 1u) {
                probs[i * CHUNK + lid] = exp(fma(raw[i], p.scale, -new_max[i]));
            }
            key_base[lid] = kb;
        }
        if (lid < HG) {
            // Last read in the previous chunk's step 2, next written after the barrier below.
            atomicStore(&chunk_max[2u * lid + (slot ^ 1u)], 0u);
        }
        workgroupBarrier();
        // probs and key_base are next written after the next chunk's first barrier, when
        // every invocation has finished reading them below.

        // 3. Rescale, then add this key group's share of the chunk in key order.
        if (kgroup < split) {
            var a: array<vec4<f32>, HG>;
            var chunk_sum: array<f32, HG>;
            var correction: array<f32, HG>;
            for (var i = 0u; i < HG; i += 1u) {
                chunk_sum[i] = 0.0; // explicitly, as `lanes` above
                correction[i] = select(0.0, exp(run_max[i] - new_max[i]), c > 0u);
                a[i] = acc[i] * correction[i];
            }
            for (var j = kgroup; j < in_chunk; j += split) {
                let v = v_pool[key_base[j] + col];
                for (var i = 0u; i < HG; i += 1u) {
                    let pj = probs[i * CHUNK + j];
                    chunk_sum[i] = chunk_sum[i] + pj;
                    a[i] = fma(vec4<f32>(pj), v, a[i]);
                }
            }
            for (var i = 0u; i < HG; i += 1u) {
                acc[i] = a[i];
                run_sum[i] = fma(run_sum[i], correction[i], chunk_sum[i]);
            }
        }
        for (var i = 0u; i < HG; i += 1u) {
            run_max[i] = new_max[i];
        }
    }

    // Per head, the key groups combined in group order.
    for (var i = 0u; i < HG; i += 1u) {
        partial[lid] = acc[i];
        partial_sum[lid] = run_sum[i];
        workgroupBarrier();
        if (lid < hd4) {
            var total = partial[lid];
            var sum = partial_sum[lid];
            for (var s = 1u; s < split; s += 1u) {
                total = total + partial[s * hd4 + lid];
                sum = sum + partial_sum[s * hd4 + lid];
            }
            out[q_base + i * hd4 + lid] = total / sum;
        }
        workgroupBarrier();
    }
}
