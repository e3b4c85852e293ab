// Draws tokens from chosen rows of logits by the Gumbel-max trick:
//     tokens[d] = argmax_c ( logits[keys[d].row, c] * inv_temperature[d] + g(keys[d], c) )
// for d in 0 .. m draws, where g = -log(-log(u)) and u in (0, 1) comes from a
// counter-based hash of (seed, request, stream, position, c). argmax of logits/T plus
// Gumbel noise is an exact draw from softmax(logits / T), and a draw depends only on its
// own key and logits row: never on which other draws share the dispatch, on where its row
// sits in the logits buffer, nor on the order draws run in (DESIGN.md, principle 1).
// Several draws may read one row (the G samples of a group after their shared prompt).
// A draw with greedy != 0 takes the plain argmax (no noise). Ties go to the lowest index.
// A key whose row is past the logits draws 0xffffffff.
//
//     sample:         tokens[d] as above; one workgroup per draw: invocation t scans
//                     c = t, t + 256, ... and a fixed binary tree combines the 256
//                     candidates (shaders/common/argmax.wgsl, appended by the host).
//     draw_logprobs:  logprobs[d] = logits[keys[d].row, tokens[d]] - lse[keys[d].row] with
//                     lse from the softmax kernel's row stats: the same f32 subtraction as
//                     softmax's target_logprobs, so bitwise the same value (NaN for a token
//                     >= vocab or a row past the logits). One invocation per draw.
// The entry points share one set of bindings; sample binds the first three.
// Logits must be finite.

struct Params {
    m: u32,     // draws
    vocab: u32, // logits per row
    rows: u32,  // rows of logits in the buffer
    _pad0: u32,
}

// Per-draw sampling key (32 bytes): matches `SampleKey` on the host.
struct DrawKey {
    seed_lo: u32,
    seed_hi: u32,
    stream: u32,          // which sample of a group
    position: u32,        // the position of the token being drawn
    inv_temperature: f32, // 1 / T
    greedy: u32,          // 1: argmax, no noise
    request: u32,         // which prompt (mixed into the noise)
    row: u32,             // the logits row this draw reads
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;          // [rows, vocab]
@group(0) @binding(2) var<storage, read> keys: array<DrawKey>;        // [m]
@group(0) @binding(3) var<storage, read_write> tokens: array<u32>;    // [m]: sample writes, draw_logprobs reads
@group(0) @binding(4) var<storage, read> stats: array<f32>;           // [rows, 2]: (max logit, lse) from softmax
@group(0) @binding(5) var<storage, read_write> logprobs: array<f32>;  // [m]

const WG: u32 = 256u;
const LOGPROB_WG: u32 = 64u;
const NO_INDEX: u32 = 0xffffffffu;


// PCG-based 4D hash (Jarzynski and Olano, "Hash Functions for GPU Rendering", 2020).
fn pcg4d(input: vec4<u32>) -> vec4<u32> {
    var v = input * 1664525u + 1013904223u;
    v.x += v.y * v.w;
    v.y += v.z * v.x;
    v.z += v.x * v.y;
    v.w += v.y * v.z;
    v = v ^ (v >> vec4<u32>(16u));
    v.x += v.y * v.w;
    v.y += v.z * v.x;
    v.z += v.x * v.y;
    v.w += v.y * v.z;
    return v;
}

// Uniform in (0, 1), never 0 or 1: 24 random bits, centred in their interval.
fn uniform01(key: DrawKey, c: u32) -> f32 {
    let first = pcg4d(vec4<u32>(c, key.position, key.stream, key.seed_lo));
    let h = pcg4d(first ^ vec4<u32>(key.seed_hi, key.request, 0u, 0u));
    return (f32(h.x >> 8u) + 0.5) * (1.0 / 16777216.0);
}

fn score(key: DrawKey, logit: f32, c: u32) -> f32 {
    if (key.greedy != 0u) {
        return logit;
    }
    return logit * key.inv_temperature - log(-log(uniform01(key, c)));
}

fn workgroup_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Dispatch: m workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn sample(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let d = workgroup_index(wid, nwg);
    if (d >= p.m) {
        return;
    }
    let key = keys[d];
    if (key.row >= p.rows) {
        if (t == 0u) {
            tokens[d] = NO_INDEX;
        }
        return; // uniform: the whole workgroup leaves
    }
    let base = key.row * p.vocab;
    var bv = 0.0;
    var bi = NO_INDEX;
    for (var c = t; c < p.vocab; c += WG) {
        let v = score(key, logits[base + c], c);
        if (beats(v, c, bv, bi)) {
            bv = v;
            bi = c;
        }
    }
    let best = workgroup_argmax(t, bv, bi);
    if (t == 0u) {
        tokens[d] = best.index;
    }
}

// Dispatch: ceil(m / 64) workgroups, folded into (x, y, 1).
@compute @workgroup_size(64)
fn draw_logprobs(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let d = workgroup_index(wid, nwg) * LOGPROB_WG + lid;
    if (d >= p.m) {
        return;
    }
    let row = keys[d].row;
    let id = tokens[d];
    if (row < p.rows && id < p.vocab) {
        logprobs[d] = logits[row * p.vocab + id] - stats[2u * row + 1u];
    } else {
        logprobs[d] = bitcast<f32>(0x7fc00000u);
    }
}
