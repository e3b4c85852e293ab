// Per-row statistics of logits over the vocabulary, and what is built from them:
//     row_stats:        argmax[r] (lowest index on ties), max logit, logsumexp
//     log_softmax:      the same, and out[r, c] = logits[r, c] - lse[r]
//     target_logprobs:  the same, and out[r] = logits[r, targets[r]] - lse[r]
//                       (NaN for a target >= vocab)
//
// One workgroup per row, reducing in a fixed order that does not depend on the number of
// rows: invocation t scans c = t, t + 256, ... sequentially (keeping its first maximum,
// then summing exp(logit - max)), then a fixed binary tree combines the 256 partials
// (on equal maxima the lower index wins; shaders/common/argmax.wgsl, whose last levels run
// as a subgroup butterfly where the adapter has subgroups, with the same bits). So a row's results are bitwise the same alone
// or in any batch, and lse is the same in all three entry points.
// Logits must be finite: WGSL lets an implementation assume that no value is infinite or
// NaN (llvmpipe does, and compares -inf wrongly). Mask a token with a large negative
// finite logit such as -1e30: it adds exp(-1e30 - max) = 0.
// Logits come in chunks of rows (src/gpu/kernels/logits.rs), one dispatch per chunk: a
// dispatch reads rows first_row .. first_row + m, row first_row + i at logits[i * vocab],
// and writes argmax, stats, targets' log-probs at the global row (log_softmax's out is
// chunked as the logits are).
// All entry points share one set of bindings; each binds a prefix of them.
// The host appends shaders/common/argmax.wgsl (workgroup_argmax, workgroup_sum) and its
// tail, and with the butterfly tail gives each entry point the subgroup lane
// (SUBGROUP_LANE markers).

struct Params {
    m: u32,         // rows in this chunk
    vocab: u32,     // logits per row
    first_row: u32, // the chunk's first row
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;     // [m, vocab]: the chunk
@group(0) @binding(2) var<storage, read_write> argmax: array<u32>; // [rows]
@group(0) @binding(3) var<storage, read_write> stats: array<f32>;  // [rows, 2]: (max logit, lse)
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // log_softmax: [m, vocab], the chunk's; target_logprobs: [rows]
@group(0) @binding(5) var<storage, read> targets: array<u32>;      // [rows] (target_logprobs)

const WG: u32 = 256u;
const NO_INDEX: u32 = 0xffffffffu;

// Reduces the chunk's row `i` (all invocations of the workgroup take part), writes its
// argmax and stats at its global row, and returns its lse to every invocation.
fn reduce_row(i: u32, t: u32) -> f32 {
    let base = i * p.vocab;
    let row = p.first_row + i;
    var bv = -3.4028234e38; // about -f32::MAX; replaced by the first logit (bi == NO_INDEX)
    var bi = NO_INDEX;
    for (var c = t; c < p.vocab; c += WG) {
        let v = logits[base + c];
        if (beats(v, c, bv, bi)) {
            bv = v;
            bi = c;
        }
    }
    let best = workgroup_argmax(t, bv, bi);
    let max_logit = best.value;

    var sum = 0.0;
    for (var c = t; c < p.vocab; c += WG) {
        sum += exp(logits[base + c] - max_logit);
    }
    let lse = max_logit + log(workgroup_sum(t, sum));
    if (t == 0u) {
        argmax[row] = best.index;
        stats[2u * row] = max_logit;
        stats[2u * row + 1u] = lse;
    }
    return lse;
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Dispatch (all entry points): m workgroups (the chunk's rows), folded into (x, y, 1).
@compute @workgroup_size(256)
fn row_stats(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let i = row_of(wid, nwg);
    if (i >= p.m) {
        return;
    }
    reduce_row(i, t);
}

@compute @workgroup_size(256)
fn log_softmax(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let i = row_of(wid, nwg);
    if (i >= p.m) {
        return;
    }
    let lse = reduce_row(i, t);
    let base = i * p.vocab;
    for (var c = t; c < p.vocab; c += WG) {
        out[base + c] = logits[base + c] - lse;
    }
}

@compute @workgroup_size(256)
fn target_logprobs(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let i = row_of(wid, nwg);
    if (i >= p.m) {
        return;
    }
    let lse = reduce_row(i, t);
    if (t == 0u) {
        let row = p.first_row + i;
        let id = targets[row];
        if (id < p.vocab) {
            out[row] = logits[i * p.vocab + id] - lse;
        } else {
            out[row] = quiet_nan();
        }
    }
}
