// Causal attention with grouped-query heads over a paged KV pool, for a varlen batch:
//     out[i, h, :] = sum_j softmax_j(scale * q[i, h, :] . k[key j, g, :]) * v[key j, g, :]
// for query row i with (table offset o, absolute position p) = rowinfo[i], keys j = lo ..= p
// of its own sequence, and kv head g = h / group (group = n_heads / n_kv_heads). Without a
// sliding window lo = 0; with one of w keys lo = max(0, p + 1 - w) (key j is seen when
// p - j < w). Key j's row lives in the pools at
//     slot(j) = block_tables[o + j / block_size] * block_size + j % block_size.
// Buffers are read as vec4: head_dim is a multiple of 4 and at most 4 * WG = 256.
//
// The order of operations (the same for every row, whatever shares its dispatch):
// keys are taken in pages of PAGE = 64, always counted from key 0. For page c, per head:
//   1. raw_j = q . k_j in four fma lanes over head_dim (vec4 steps, lanes combined as
//      (x + y) + (z + w)); the page's largest raw score times scale is m_c (max is exact,
//      so the workgroup atomicMax that finds it may see the scores in any order);
//   2. p_j = exp(fma(raw_j, scale, -m_c));
//   3. the invocations form `split = WG / (head_dim / 4)` key groups of head_dim / 4
//      columns; key group s sums the page's keys s, s + split, ... in order (o_s with fma,
//      l_s with +), and the groups are added in group order: (m_c, l_c, o_c).
// Only the row's visible keys (lo ..= p) take part: a page wholly before lo is skipped, not
// computed, and in the page holding lo the keys before it are left out of the max and of
// the sums (never added as zeros). Every page from lo's to p's has a visible key.
// The pages fold from the first visible one: (M, L, O) = its state, then for each next page
//     M' = max(M, m_c), a = exp(M - M'), b = exp(m_c - M'),
//     L = fma(L, a, l_c * b), O = fma(O, a, o_c * b), M = M'
// and the output is O / L.
//
// A workgroup serves HG query heads that share a kv head (each key and value row is
// loaded once for them) and one work item: (row, first page, pages, slot). It folds pages
// first .. first + pages. With slot = NO_SLOT it writes the output; otherwise it writes
// its state (M, L, O) to scratch[slot], and attention_combine.wgsl folds the row's slots
// in order. An item whose pages are all before lo (a split row under a sliding window)
// writes the empty state (0, 0, 0), which the fold skips: so the fold starts at the first
// visible page whichever item holds it. So a row may be computed whole by one workgroup (CPU adapters, prefill rows),
// or as a prefix and single pages by many (flash-decoding on GPUs): the same operations in
// the same order, bitwise the same output.
//
// The host prepends `const HG: u32` (a divisor of `group`), `const Q_MODE: u32` and
// `const HD4: u32` (head_dim / 4, so that every loop over a head or a page has a bound
// the compiler knows, and can unroll and issue its loads together), and `HELD4` and
// `SHARED4` (HD4 for the mode that uses each array, else 1): with Q_MODE 0 every invocation
// loads the query for every key; with 1 it holds the HG query vectors in a private array
// (CPU adapters, where every load is a gather); with 2 they are staged once in workgroup
// memory (GPUs). The values, and so the results, are the same.
//
// The host cannot check rowinfo, items and block_tables (they live on the GPU): a block
// id past the pool or an offset past the tables reads whatever robust buffer access gives.
//
// Plain core WGSL: no f16, no subgroups.

struct Params {
    t: u32,          // query rows
    n_heads: u32,    // query heads
    n_kv_heads: u32, // key/value heads; divides n_heads
    head_dim: u32,   // values per head: a multiple of 4, at most 4 * WG
    group: u32,      // n_heads / n_kv_heads: query heads per kv head
    block_size: u32, // key rows per block of the pools, > 0
    scale: f32,      // > 0, multiplies q . k (normally 1 / sqrt(head_dim))
    n_items: u32,    // work items in this dispatch
    window: u32,     // sliding window in keys, > 0; 0xffffffff for none
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;            // [t, n_heads, head_dim / 4]
@group(0) @binding(2) var<storage, read> k_pool: array<vec4<f32>>;       // [num_blocks * block_size, n_kv_heads, head_dim / 4]
@group(0) @binding(3) var<storage, read> v_pool: array<vec4<f32>>;       // [num_blocks * block_size, n_kv_heads, head_dim / 4]
@group(0) @binding(4) var<storage, read> block_tables: array<u32>;       // [*] block ids; a sequence's table is ceil((p + 1) / block_size) of them from its offset
@group(0) @binding(5) var<storage, read> rowinfo: array<u32>;            // [t, 4]: (table offset, absolute position p, pool slot, adapter)
@group(0) @binding(6) var<storage, read> items: array<u32>;              // [n_items, 4]: (row, first page, pages, slot)
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;    // [t, n_heads, head_dim / 4]
@group(0) @binding(8) var<storage, read_write> scratch: array<vec4<f32>>; // [slots, n_heads, 1 + head_dim / 4]: (M, L, 0, 0), then O

const WG: u32 = 64u;
const PAGE: u32 = WG;
// Key groups of step 3: each of HD4 invocations, one per output vec4.
const SPLIT: u32 = WG / HD4;
const NO_SLOT: u32 = 0xffffffffu;

// p_j of the current page, per head of the workgroup: probs[i * PAGE + j].
var<workgroup> probs: array<f32, HG * PAGE>;
// Where key j of the current page starts in the pools (kv_base), for step 3.
var<workgroup> key_base: array<u32, PAGE>;
// Per head, the page's largest raw score as `ordered` bits.
var<workgroup> page_max: array<atomic<u32>, HG>;
// Each key group's o and l for the current page, per head: [i * WG + invocation].
var<workgroup> part_o: array<vec4<f32>, HG * WG>;
var<workgroup> part_l: array<f32, HG * WG>;
// The query vectors, when Q_MODE is 2.
var<workgroup> q_shared: array<vec4<f32>, HG * SHARED4>;

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

// Dispatch: (n_heads / HG, n_items, 1).
@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h0 = wid.x * HG; // the first of this workgroup's heads
    let item = wid.y;
    if (h0 >= p.n_heads || item >= p.n_items) {
        return; // uniform: the whole workgroup leaves
    }
    let row = items[4u * item];
    let first_page = items[4u * item + 1u];
    let pages = items[4u * item + 2u];
    let slot = items[4u * item + 3u];
    let hd4 = HD4;
    let split = SPLIT;     // key groups
    let col = lid % hd4;   // the output vec4 this invocation accumulates
    let kgroup = lid / hd4; // its key group; idle in step 3 when >= split
    let g = h0 / p.group;  // HG divides group, so every head here shares kv head g
    let q_base = (row * p.n_heads + h0) * hd4; // head h0 + i starts at q_base + i * hd4
    let table = rowinfo[4u * row];
    let n_keys = rowinfo[4u * row + 1u] + 1u;
    // The first visible key, and the pages this item computes: its own from lo's page on.
    let lo = select(0u, n_keys - p.window, n_keys > p.window);
    let begin = max(first_page, lo / PAGE);
    let end = first_page + pages;

    if (lid < HG) {
        atomicStore(&page_max[lid], 0u);
    }
    var held_q: array<vec4<f32>, HG * HELD4>;
    if (Q_MODE == 1u) {
        for (var i = 0u; i < HG * HD4; i += 1u) {
            held_q[i] = q[q_base + i];
        }
    }
    if (Q_MODE == 2u) {
        for (var i = lid; i < HG * HD4; i += WG) {
            q_shared[i] = q[q_base + i];
        }
    }
    workgroupBarrier();

    // The running state, meaningful in invocations lid < hd4 (column lid).
    var run_m: array<f32, HG>;
    var run_l: array<f32, HG>;
    var run_o: array<vec4<f32>, HG>;

    for (var pg = begin; pg < end; pg += 1u) {
        let first = pg * PAGE;
        let in_page = min(PAGE, n_keys - min(first, n_keys));
        // Keys lo_in .. in_page of the page are visible (lo_in > 0 only in lo's page).
        let lo_in = max(lo, first) - first;

        // 1. This invocation's key: its raw score for each head, and the page's max.
        var raw: array<f32, HG>;
        var kb = 0u;
        if (lid >= lo_in && lid < in_page) {
            kb = kv_base(table, first + lid, g);
            // Zeroed explicitly each page: SwiftShader (browsers' software WebGPU) kept
            // the previous values in arrays declared in a loop without a value.
            var lanes: array<vec4<f32>, HG>;
            for (var i = 0u; i < HG; i += 1u) {
                lanes[i] = vec4<f32>(0.0);
            }
            for (var d = 0u; d < HD4; d += 1u) {
                let k = k_pool[kb + d];
                for (var i = 0u; i < HG; i += 1u) {
                    var qv: vec4<f32>;
                    if (Q_MODE == 1u) {
                        qv = held_q[i * HD4 + d];
                    } else if (Q_MODE == 2u) {
                        qv = q_shared[i * HD4 + d];
                    } else {
                        qv = q[q_base + i * hd4 + d];
                    }
                    lanes[i] = fma(qv, k, lanes[i]);
                }
            }
            for (var i = 0u; i < HG; i += 1u) {
                raw[i] = (lanes[i].x + lanes[i].y) + (lanes[i].z + lanes[i].w);
                atomicMax(&page_max[i], ordered(raw[i]));
            }
        }
        workgroupBarrier();

        // 2. The page's maxima, the same in every invocation; one probability each.
        var m: array<f32, HG>;
        for (var i = 0u; i < HG; i += 1u) {
            m[i] = from_ordered(atomicLoad(&page_max[i])) * p.scale;
        }
        if (lid >= lo_in && lid < in_page) {
            for (var i = 0u; i < HG; i += 1u) {
                probs[i * PAGE + lid] = exp(fma(raw[i], p.scale, -m[i]));
            }
            key_base[lid] = kb;
        }
        workgroupBarrier();
        // page_max was read above by everyone: reset it for the next page (whose atomics
        // come after the barriers below).
        if (lid < HG) {
            atomicStore(&page_max[lid], 0u);
        }

        // 3. This key group's share of the page, in key order.
        if (kgroup < split) {
            var a: array<vec4<f32>, HG>;
            var l: array<f32, HG>;
            for (var i = 0u; i < HG; i += 1u) {
                a[i] = vec4<f32>(0.0); // explicitly, as `lanes` above
                l[i] = 0.0;
            }
            // Keys kgroup, kgroup + split, ... in lo_in .. in_page, in order. The bound is
            // a constant and the loads do not wait on the test, so they can all be in
            // flight together (a key outside reads a visible key's row, never used).
            for (var jj = 0u; jj < (PAGE + SPLIT - 1u) / SPLIT; jj += 1u) {
                let j = kgroup + jj * split;
                let v = v_pool[key_base[clamp(j, lo_in, in_page - 1u)] + col];
                if (j >= lo_in && j < in_page) {
                    for (var i = 0u; i < HG; i += 1u) {
                        let pj = probs[i * PAGE + j];
                        l[i] = l[i] + pj;
                        a[i] = fma(vec4<f32>(pj), v, a[i]);
                    }
                }
            }
            for (var i = 0u; i < HG; i += 1u) {
                part_o[i * WG + lid] = a[i];
                part_l[i * WG + lid] = l[i];
            }
        }
        workgroupBarrier();

        // 4. The key groups in group order, then the page folded into the running state.
        if (lid < hd4) {
            for (var i = 0u; i < HG; i += 1u) {
                var o = part_o[i * WG + lid];
                var l = part_l[i * WG + lid];
                for (var s = 1u; s < SPLIT; s += 1u) {
                    o = o + part_o[i * WG + s * hd4 + lid];
                    l = l + part_l[i * WG + s * hd4 + lid];
                }
                if (pg == begin) {
                    run_m[i] = m[i];
                    run_l[i] = l;
                    run_o[i] = o;
                } else {
                    let mm = max(run_m[i], m[i]);
                    let a = exp(run_m[i] - mm);
                    let b = exp(m[i] - mm);
                    run_l[i] = fma(run_l[i], a, l * b);
                    run_o[i] = fma(run_o[i], vec4<f32>(a), o * b);
                    run_m[i] = mm;
                }
            }
        }
        workgroupBarrier();
        // probs, key_base and part_* are next written after the next page's first barrier
        // or in its step 3, when every invocation has finished reading them above.
    }

    if (begin >= end) {
        // No visible key in this item's pages: the empty state, which the fold skips. (An
        // item writing an output always holds the row's last page, which is visible.)
        for (var i = 0u; i < HG; i += 1u) {
            run_m[i] = 0.0;
            run_l[i] = 0.0;
            run_o[i] = vec4<f32>(0.0);
        }
    }
    if (lid < hd4) {
        for (var i = 0u; i < HG; i += 1u) {
            if (slot == NO_SLOT) {
                out[q_base + i * hd4 + lid] = run_o[i] / run_l[i];
            } else {
                let at = (slot * p.n_heads + h0 + i) * (hd4 + 1u);
                if (lid == 0u) {
                    scratch[at] = vec4<f32>(run_m[i], run_l[i], 0.0, 0.0);
                }
                scratch[at + 1u + lid] = run_o[i];
            }
        }
    }
}
