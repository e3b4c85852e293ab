// Draws one token per row of logits by the Gumbel-max trick:
//     token[r] = argmax_c ( logits[r, c] * inv_temperature[r] + g(key[r], c) )
// where g = -log(-log(u)) and u in (0, 1) comes from a counter-based hash of
// (seed, stream, position, c). argmax of logits/T plus Gumbel noise is an exact draw from
// softmax(logits / T), and the draw depends only on its own key: never on which other rows
// share the dispatch, nor on the order rows run in (DESIGN.md, principle 1).
// A row with greedy != 0 takes the plain argmax (no noise). Ties go to the lowest index.
//
// One workgroup per row; invocation t scans c = t, t + 256, ... and a fixed binary tree
// combines the 256 candidates (shaders/common/argmax.wgsl, appended by the host).
// Logits must be finite.

struct Params {
    m: u32,     // rows
    vocab: u32, // logits per row
    _pad0: u32,
    _pad1: u32,
}

// Per-row sampling key (32 bytes): matches `SampleKey` on the host.
struct RowKey {
    seed_lo: u32,
    seed_hi: u32,
    stream: u32,          // which sample of a group
    position: u32,        // the position of the token being drawn
    inv_temperature: f32, // 1 / T
    greedy: u32,          // 1: argmax, no noise
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;        // [m, vocab]
@group(0) @binding(2) var<storage, read> keys: array<RowKey>;       // [m]
@group(0) @binding(3) var<storage, read_write> tokens: array<u32>;  // [m]

const WG: u32 = 256u;
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
fn uniform01(key: RowKey, c: u32) -> f32 {
    let h = pcg4d(pcg4d(vec4<u32>(c, key.position, key.stream, key.seed_lo)) ^ vec4<u32>(key.seed_hi, 0u, 0u, 0u));
    return (f32(h.x >> 8u) + 0.5) * (1.0 / 16777216.0);
}

fn score(key: RowKey, logit: f32, c: u32) -> f32 {
    if (key.greedy != 0u) {
        return logit;
    }
    return logit * key.inv_temperature - log(-log(uniform01(key, c)));
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Dispatch: m workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn sample(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = row_of(wid, nwg);
    if (row >= p.m) {
        return;
    }
    let key = keys[row];
    let base = row * p.vocab;
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
        tokens[row] = best.index;
    }
}
