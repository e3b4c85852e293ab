// Truncated sampling from chosen rows of logits: temperature, top-k, top-p, min-p, by the
// Gumbel-max trick restricted to the kept tokens, with each drawn token's raw log-prob and
// its log-prob under the distribution actually sampled from ("sampling log-prob").
//
// Per logits row r (RowParams, from the host; `l` is the row's logits, V = vocab):
//   s_c    = l_c * inv_temperature (one f32 multiply; inv_temperature = 1 / T > 0),
//            s_max = l_max * inv_temperature. inv_temperature == 0 is greedy (T = 0).
//   The kept set S = { c : l_c >= tau } with tau = the m-th largest logit (counted with
//   multiplicity): the first m tokens by descending logit, and every token tied with the
//   m-th. m = min(m_k, m_p, m_min), so tau = max(tau_k, tau_p, tau_min):
//   - top-k:  m_k = top_k; top_k = 0 or >= V is off (m_k = V, tau_k = the smallest logit).
//   - top-p:  over the top-k set K = { l_c >= tau_k } renormalised: with
//             M(x) = sum_{c : l_c >= x} exp(s_c - s_max) and Z_k = M(tau_k), tau_p is the
//             largest logit x with M(x) >= top_p * Z_k (the m_p-th largest logit, m_p the
//             smallest m whose first m tokens hold mass >= top_p). top_p >= 1 is off.
//   - min-p:  keep c with s_c - s_max >= log_min_p (= ln(min_p), rounded to f32 by the
//             host: softmax prob >= min_p * the largest prob); tau_min is the smallest
//             logit kept. log_min_p = -3.4028234663852886e38 (-f32::MAX, min_p = 0) is off.
//   log_z  = s_max + log(M(tau)): the log normaliser of softmax(s) over S.
//   Greedy rows: tau = l_max, log_z = 0.
//
//     truncate:       cut[r] = (tau, log_z) for r in 0 .. rows; one workgroup of 256 per
//                     row. M and the counts are reduced in a fixed order: invocation t scans
//                     c = t, t + 256, ... sequentially, then a fixed binary tree combines
//                     the 256 partials (M in f32, counts and min/max exactly in u32). tau
//                     is found by binary search over the order-preserving u32 image of the
//                     logits: at most 32 count passes over [l_min, l_max] for top-k, one
//                     min pass for min-p, then at most 32 M passes over
//                     [max(tau_k, tau_min), l_max] for top-p. M is computed the same way
//                     everywhere and is monotone in x, so the search is exact for the f32
//                     masses the kernel computes (top-k and min-p cuts are exact outright).
//     sample:         tokens[d] = argmax over { c : l_c >= tau } of (s_c + g(keys[d], c))
//                     for d in 0 .. m draws, each from row keys[d].row with that row's
//                     params and cut; g = -log(E), E = -log(u) an Exp(1) variate computed
//                     without rounding u to 1 (see exponential), u in (0, 1) from a
//                     counter-based hash of (seed, request, stream, position, c).
//                     Gumbel-max over S is an exact draw from softmax(s) renormalised over S. Greedy rows take the
//                     plain argmax of the logits. Ties go to the lowest index. One workgroup
//                     per draw: invocation t scans c = t, t + 256, ... and a fixed binary
//                     tree combines the 256 candidates (shaders/common/argmax.wgsl, appended
//                     by the host). A key whose row is past the rows draws 0xffffffff.
//     draw_logprobs:  logprobs[d] = l_token - lse[row] with lse from the softmax kernel's
//                     row stats: the same f32 subtraction as softmax's target_logprobs, so
//                     bitwise the same value. sampling_logprobs[d] = s_token - log_z
//                     (= l_token * inv_temperature - log_z in f32; 0 for a greedy row); it
//                     is meaningful only for a token in S. Both NaN for a token >= vocab or
//                     a row past the rows. One invocation per draw.
// A draw depends only on its own key, its row's logits, params and cut: never on which
// other rows or draws share the dispatch, on where its row sits in the buffer, nor on the
// order draws run in (DESIGN.md, principle 1). Several draws may read one row (the G
// samples of a group after their shared prompt).
// Logits come in chunks of rows (src/gpu/kernels/logits.rs), one dispatch per chunk: a
// dispatch reads rows first_row .. first_row + chunk_rows, row first_row + i at
// logits[i * vocab]; truncate cuts those rows, and sample and draw_logprobs serve the draws
// whose row they hold (the first chunk's dispatch also the draws from a row past `rows`).
// Every other buffer is indexed by global row and draw.
// The entry points share one set of bindings; truncate binds the first three, sample the
// first five. The host appends shaders/common/argmax.wgsl and its tail, and with the
// butterfly tail gives truncate and sample the subgroup lane (SUBGROUP_LANE markers).
// Logits must be finite (as for softmax.wgsl).

struct Params {
    m: u32,          // draws (sample, draw_logprobs)
    vocab: u32,      // logits per row
    rows: u32,       // sample, draw_logprobs: rows readable (in all chunks)
    first_row: u32,  // the chunk's first row
    chunk_rows: u32, // the chunk's rows (truncate cuts them all)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// Per-row sampling parameters (16 bytes): matches `RowParams` on the host.
struct RowParams {
    inv_temperature: f32, // 1 / T; 0: greedy
    top_k: u32,           // 0 or >= vocab: off
    top_p: f32,           // in (0, 1]; >= 1: off
    log_min_p: f32,       // ln(min_p); -f32::MAX: off
}

// Per-draw sampling key (32 bytes): matches `SampleKey` on the host.
struct DrawKey {
    seed_lo: u32,
    seed_hi: u32,
    stream: u32,   // which sample of a group
    position: u32, // the position of the token being drawn
    request: u32,  // which prompt (mixed into the noise)
    row: u32,      // the logits row this draw reads
    _reserved0: u32,
    _reserved1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;                // [chunk_rows, vocab]: the chunk
@group(0) @binding(2) var<storage, read> params: array<RowParams>;          // [rows]
@group(0) @binding(3) var<storage, read_write> cut: array<f32>;             // [rows, 2]: (tau, log_z); truncate writes
@group(0) @binding(4) var<storage, read> keys: array<DrawKey>;              // [m]
@group(0) @binding(5) var<storage, read_write> tokens: array<u32>;          // [m]: sample writes, draw_logprobs reads
@group(0) @binding(6) var<storage, read> stats: array<f32>;                 // [rows, 2]: (max logit, lse) from softmax
@group(0) @binding(7) var<storage, read_write> logprobs: array<f32>;        // [m]: raw, l - lse
@group(0) @binding(8) var<storage, read_write> sampling_logprobs: array<f32>; // [m]: s - log_z

const WG: u32 = 256u;
const LOGPROB_WG: u32 = 64u;
const NO_INDEX: u32 = 0xffffffffu;
const MIN_P_OFF: f32 = -3.4028234663852886e38;

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

// The 24 random bits k of token c under a key: u = (k + 0.5) / 2^24 is uniform in (0, 1).
fn random24(key: DrawKey, c: u32) -> u32 {
    let first = pcg4d(vec4<u32>(c, key.position, key.stream, key.seed_lo));
    let h = pcg4d(first ^ vec4<u32>(key.seed_hi, key.request, 0u, 0u));
    return h.x >> 8u;
}

// E = -ln(u), an Exp(1) variate, accurate to f32 rounding for every u, and > 0.
// u itself is not formed above 1/2: (k + 0.5) / 2^24 is not an f32 there and the largest
// one rounds to 1 (E = 0, Gumbel noise +inf: the tail token drawn). Above 1/2,
// v = 1 - u = (2j + 1) / 2^25 with j = 2^24 - 1 - k is exact, and
// -ln(1 - v) = 2 atanh(y), y = v / (2 - v) <= 1/3: eight terms of its series reach f32
// precision, where log() may have an absolute error of 2^-21 near 1 (WGSL's bound).
fn exponential(key: DrawKey, c: u32) -> f32 {
    let k = random24(key, c);
    if (k < 8388608u) {
        return -log((f32(k) + 0.5) * (1.0 / 16777216.0));
    }
    let v = (f32(2u * (16777215u - k) + 1u)) * (1.0 / 33554432.0);
    let y = v / (2.0 - v);
    let y2 = y * y;
    var series = 1.0 / 15.0;
    series = 1.0 / 13.0 + y2 * series;
    series = 1.0 / 11.0 + y2 * series;
    series = 1.0 / 9.0 + y2 * series;
    series = 1.0 / 7.0 + y2 * series;
    series = 1.0 / 5.0 + y2 * series;
    series = 1.0 / 3.0 + y2 * series;
    series = 1.0 + y2 * series;
    return 2.0 * y * series;
}

fn workgroup_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Whether this dispatch's chunk holds `row`.
fn in_chunk(row: u32) -> bool {
    return row >= p.first_row && row - p.first_row < p.chunk_rows;
}

// ---- truncate ------------------------------------------------------------------------

var<workgroup> result_f: f32;
var<workgroup> result_u: u32;

// The order-preserving u32 image of a finite f32 (-0 is taken as +0), and back.
fn order_key(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if (b == 0x80000000u) {
        return 0x80000000u;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

fn from_order_key(k: u32) -> f32 {
    if ((k & 0x80000000u) != 0u) {
        return bitcast<f32>(k & 0x7fffffffu);
    }
    return bitcast<f32>(~k);
}

// The workgroup reductions of shaders/common/argmax.wgsl (a fixed tree, ended as the host
// chose), with their result made uniform: the bisections branch on it around barriers.
// The result slot is written only after the next reduction's first barrier, which every
// invocation reaches after reading the previous result.
fn sum_f32(t: u32, v: f32) -> f32 {
    let total = workgroup_sum(t, v);
    if (t == 0u) {
        result_f = total;
    }
    return workgroupUniformLoad(&result_f);
}

fn reduce_u32(t: u32, v: u32, op: u32) -> u32 {
    let result = workgroup_u32(t, v, op);
    if (t == 0u) {
        result_u = result;
    }
    return workgroupUniformLoad(&result_u);
}

fn sum_u32(t: u32, v: u32) -> u32 {
    return reduce_u32(t, v, U32_ADD);
}

fn min_u32(t: u32, v: u32) -> u32 {
    return reduce_u32(t, v, U32_MIN);
}

fn max_u32(t: u32, v: u32) -> u32 {
    return reduce_u32(t, v, U32_MAX);
}

// How many logits of the row have order key >= x.
fn count_at_least(t: u32, base: u32, x: u32) -> u32 {
    var n = 0u;
    for (var c = t; c < p.vocab; c += WG) {
        if (order_key(logits[base + c]) >= x) {
            n += 1u;
        }
    }
    return sum_u32(t, n);
}

// M(x) = sum of exp(s_c - s_max) over the logits with order key >= x, in the fixed order.
fn mass_at_least(t: u32, base: u32, x: u32, inv_t: f32, s_max: f32) -> f32 {
    var sum = 0.0;
    for (var c = t; c < p.vocab; c += WG) {
        let l = logits[base + c];
        if (order_key(l) >= x) {
            sum += exp(l * inv_t - s_max);
        }
    }
    return sum_f32(t, sum);
}

// Dispatch: rows workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn truncate(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let i = workgroup_index(wid, nwg);
    if (i >= p.chunk_rows) {
        return;
    }
    let row = p.first_row + i;
    let rp = params[row];
    let base = i * p.vocab;

    // The smallest and largest logit, as order keys.
    var lo_local = 0xffffffffu;
    var hi_local = 0u;
    for (var c = t; c < p.vocab; c += WG) {
        let k = order_key(logits[base + c]);
        lo_local = min(lo_local, k);
        hi_local = max(hi_local, k);
    }
    let min_key = min_u32(t, lo_local);
    let max_key = max_u32(t, hi_local);
    let max_logit = from_order_key(max_key);
    if (rp.inv_temperature == 0.0) {
        if (t == 0u) {
            cut[2u * row] = max_logit;
            cut[2u * row + 1u] = 0.0;
        }
        return; // uniform: the whole workgroup leaves
    }
    let inv_t = rp.inv_temperature;
    let s_max = max_logit * inv_t;

    // top-k: the largest x with count(>= x) >= k, by bisection (count(min_key) = V >= k).
    var tau_k = min_key;
    if (rp.top_k > 0u && rp.top_k < p.vocab) {
        var lo = min_key;
        var hi = max_key;
        while (lo < hi) {
            let mid = lo + (hi - lo + 1u) / 2u;
            if (count_at_least(t, base, mid) >= rp.top_k) {
                lo = mid;
            } else {
                hi = mid - 1u;
            }
        }
        tau_k = lo;
    }

    // min-p: the smallest logit with s_c - s_max >= log_min_p (the argmax always passes).
    var tau_min = min_key;
    if (rp.log_min_p > MIN_P_OFF) {
        var m_local = 0xffffffffu;
        for (var c = t; c < p.vocab; c += WG) {
            let l = logits[base + c];
            if (l * inv_t - s_max >= rp.log_min_p) {
                m_local = min(m_local, order_key(l));
            }
        }
        tau_min = min_u32(t, m_local);
    }

    // top-p: the largest x with M(x) >= top_p * Z_k, searched from max(tau_k, tau_min):
    // if even that bound fails the predicate, the bound itself is tau.
    var tau = max(tau_k, tau_min);
    if (rp.top_p < 1.0) {
        let goal = rp.top_p * mass_at_least(t, base, tau_k, inv_t, s_max);
        var lo = tau;
        var hi = max_key;
        while (lo < hi) {
            let mid = lo + (hi - lo + 1u) / 2u;
            if (mass_at_least(t, base, mid, inv_t, s_max) >= goal) {
                lo = mid;
            } else {
                hi = mid - 1u;
            }
        }
        tau = lo;
    }

    let log_z = s_max + log(mass_at_least(t, base, tau, inv_t, s_max));
    if (t == 0u) {
        cut[2u * row] = from_order_key(tau);
        cut[2u * row + 1u] = log_z;
    }
}

// ---- sample --------------------------------------------------------------------------

// Dispatch: m workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn sample(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    /*SUBGROUP_LANE_PARAM*/
) {
    /*SUBGROUP_LANE_SET*/
    let d = workgroup_index(wid, nwg);
    if (d >= p.m) {
        return;
    }
    let key = keys[d];
    if (key.row >= p.rows) {
        if (t == 0u && p.first_row == 0u) {
            tokens[d] = NO_INDEX;
        }
        return; // uniform: the whole workgroup leaves
    }
    if (!in_chunk(key.row)) {
        return; // another chunk's dispatch draws it (uniform)
    }
    let rp = params[key.row];
    let greedy = rp.inv_temperature == 0.0;
    let tau = cut[2u * key.row];
    let base = (key.row - p.first_row) * p.vocab;
    var bv = 0.0;
    var bi = NO_INDEX;
    for (var c = t; c < p.vocab; c += WG) {
        let l = logits[base + c];
        var v = l;
        if (!greedy) {
            if (l < tau) {
                continue;
            }
            v = l * rp.inv_temperature - log(exponential(key, c));
        }
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

// ---- draw_logprobs -------------------------------------------------------------------

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
    if ((row >= p.rows && p.first_row != 0u) || (row < p.rows && !in_chunk(row))) {
        return; // another chunk's dispatch writes it
    }
    if (row < p.rows && id < p.vocab) {
        let l = logits[(row - p.first_row) * p.vocab + id];
        logprobs[d] = l - stats[2u * row + 1u];
        let inv_t = params[row].inv_temperature;
        if (inv_t == 0.0) {
            sampling_logprobs[d] = 0.0;
        } else {
            sampling_logprobs[d] = l * inv_t - cut[2u * row + 1u];
        }
    } else {
        logprobs[d] = quiet_nan();
        sampling_logprobs[d] = quiet_nan();
    }
}
