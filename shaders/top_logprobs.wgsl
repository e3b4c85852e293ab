// The n most likely tokens of each logits row and their raw log-probs:
//     ids[r * n_max + j]      = the j-th token of row r in the order (logit descending,
//                               index ascending), for j < n = min(counts[r], n_max, vocab)
//     logprobs[r * n_max + j] = logits[r, ids[..]] - lse[r], lse from the softmax kernel's
//                               row stats: the same f32 subtraction as softmax's
//                               target_logprobs, so bitwise the same value
//     entries j in n .. n_max: id 0xffffffff and log-prob NaN
// for rows r in 0 .. rows.
//
// One workgroup of 256 per row, n rounds. Round j takes the maximum, in the order above,
// over the tokens strictly after round j - 1's pick in that order (all tokens in round 0):
// invocation t scans c = t, t + 256, ... sequentially, keeping its best, then a fixed
// binary tree combines the 256 candidates (shaders/common/argmax.wgsl, appended by the
// host: the larger value wins, the lower index on equal values). Logits are compared by
// value, so -0 and +0 are one value and tie by index. Every pick is exact (no arithmetic
// on the logits), and a row's results depend only on its logits, its lse and its count:
// never on the other rows of the dispatch nor on where the row sits in the buffer
// (DESIGN.md, principle 1). Workgroup memory: the shared reductions' 4 KiB. With the
// butterfly tail the host gives the entry point the subgroup lane (SUBGROUP_LANE markers).
// Logits must be finite (as for softmax.wgsl). They come in chunks of rows
// (src/gpu/kernels/logits.rs), one dispatch per chunk: a dispatch records rows
// first_row .. first_row + rows, row first_row + i read at logits[i * vocab].

struct Params {
    rows: u32,      // rows to record (the chunk's)
    vocab: u32,     // logits per row
    n_max: u32,     // entries per row of ids and logprobs
    first_row: u32, // the chunk's first row
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;         // [rows, vocab]: the chunk
@group(0) @binding(2) var<storage, read> stats: array<f32>;          // [rows, 2]: (max logit, lse) from softmax
@group(0) @binding(3) var<storage, read> counts: array<u32>;         // [rows]: alternatives wanted
@group(0) @binding(4) var<storage, read_write> ids: array<u32>;      // [rows, n_max]
@group(0) @binding(5) var<storage, read_write> logprobs: array<f32>; // [rows, n_max]

const WG: u32 = 256u;
const NO_INDEX: u32 = 0xffffffffu;

// Dispatch: rows workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn top_logprobs(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let i = wid.y * nwg.x + wid.x;
    if (i >= p.rows) {
        return;
    }
    let row = p.first_row + i;
    let base = i * p.vocab;
    let out = row * p.n_max;
    let lse = stats[2u * row + 1u];
    // Uniform across the workgroup: counts is read-only and row is the workgroup's.
    let n = min(counts[row], min(p.n_max, p.vocab));

    // The previous pick, (value, index); NO_INDEX before the first round.
    var prev_v = 0.0;
    var prev_i = NO_INDEX;
    for (var j = 0u; j < n; j += 1u) {
        var bv = 0.0;
        var bi = NO_INDEX;
        for (var c = t; c < p.vocab; c += WG) {
            let l = logits[base + c];
            let after = prev_i == NO_INDEX || l < prev_v || (l == prev_v && c > prev_i);
            if (after && beats(l, c, bv, bi)) {
                bv = l;
                bi = c;
            }
        }
        // j < n <= vocab tokens have been picked, so some token is left: best.index is one.
        let best = workgroup_argmax(t, bv, bi);
        if (t == 0u) {
            ids[out + j] = best.index;
            logprobs[out + j] = logits[base + best.index] - lse;
        }
        prev_v = best.value;
        prev_i = best.index;
    }
    // n_max <= 20 < WG: one invocation per unused entry.
    if (t >= n && t < p.n_max) {
        ids[out + t] = NO_INDEX;
        logprobs[out + t] = quiet_nan();
    }
}
