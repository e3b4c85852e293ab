// The rank of given tokens in their logits rows: for entry e in 0 .. n with
// (row, token) = (targets[2e], targets[2e + 1]) and x = logits[row, .],
//     ranks[e] = 1 + #{c : x[c] > x[token]} + #{c < token : x[c] == x[token]}
// the token's 1-based place in the order (logit descending, index ascending) that
// top_logprobs.wgsl picks in; -0 and +0 compare equal, as there. An entry whose row is past
// the rows or whose token is past the vocabulary gets 0 (never a rank).
//
// Counting is exact (integer sums of comparisons, no arithmetic on the logits), so an entry's
// rank depends only on its row's logits and its token: never on the other entries, on
// where its row sits, or on the shape below.
//
// The host prepends `const ENTRY_PER_WORKGROUP: bool` and `const WG: u32`:
// - false (CPU adapters): invocation e of the dispatch owns entry e and walks its whole row;
// - true (GPUs): workgroup e owns entry e, invocation t counts c = t, t + WG, ..., and
//   shaders/common/argmax.wgsl's workgroup_u32 adds the WG counts (appended by the host
//   with its tail: with the butterfly tail the entry point gets the subgroup lane, the
//   SUBGROUP_LANE markers).
//
// Logits come in chunks of rows (src/gpu/kernels/logits.rs), one dispatch per chunk; an
// entry is written by the dispatch of the chunk holding its row, or, for a row past the
// rows, by the first chunk's. Plain core WGSL but for the butterfly tail: no f16.

struct Params {
    n: u32,          // entries
    vocab: u32,      // logits per row
    rows: u32,       // rows of all the chunks together
    first_row: u32,  // this chunk's first row
    chunk_rows: u32, // this chunk's rows
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;      // [chunk_rows, vocab]
@group(0) @binding(2) var<storage, read> targets: array<u32>;     // [n, 2]: (row, token)
@group(0) @binding(3) var<storage, read_write> ranks: array<u32>; // [n]

const NO_INDEX: u32 = 0xffffffffu; // for argmax.wgsl

// Whether this dispatch writes an entry of `row`.
fn mine(row: u32) -> bool {
    if (row >= p.rows) {
        return p.first_row == 0u;
    }
    return row >= p.first_row && row - p.first_row < p.chunk_rows;
}

// Whether token c (logit v) comes before the target (logit x, index token) in the order.
fn before(v: f32, c: u32, x: f32, token: u32) -> u32 {
    return select(0u, 1u, v > x || (v == x && c < token));
}

// Dispatch: ceil(n / WG) workgroups (one entry per invocation) or n (one per workgroup),
// folded into (x, y, 1) and numbered wid.y * num_workgroups.x + wid.x.
@compute @workgroup_size(WG)
fn target_rank(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let group = wid.y * nwg.x + wid.x;
    if (ENTRY_PER_WORKGROUP) {
        let e = group;
        // Uniform across the workgroup: e is the workgroup's and targets is read-only.
        if (e >= p.n) {
            return;
        }
        let row = targets[2u * e];
        let token = targets[2u * e + 1u];
        if (!mine(row)) {
            return; // another chunk's dispatch writes it
        }
        if (row >= p.rows || token >= p.vocab) {
            if (t == 0u) {
                ranks[e] = 0u;
            }
            return;
        }
        let base = (row - p.first_row) * p.vocab;
        let x = logits[base + token];
        var count = 0u;
        for (var c = t; c < p.vocab; c += WG) {
            count += before(logits[base + c], c, x, token);
        }
        let total = workgroup_u32(t, count, U32_ADD);
        if (t == 0u) {
            ranks[e] = 1u + total;
        }
    } else {
        let e = group * WG + t;
        if (e >= p.n) {
            return;
        }
        let row = targets[2u * e];
        let token = targets[2u * e + 1u];
        if (!mine(row)) {
            return;
        }
        if (row >= p.rows || token >= p.vocab) {
            ranks[e] = 0u;
            return;
        }
        let base = (row - p.first_row) * p.vocab;
        let x = logits[base + token];
        var count = 0u;
        for (var c = 0u; c < p.vocab; c += 1u) {
            count += before(logits[base + c], c, x, token);
        }
        ranks[e] = 1u + count;
    }
}
