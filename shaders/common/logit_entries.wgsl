// What the kernels over (row, token) entries share (src/gpu/kernels/logit_entries.rs):
// their parameters, which entry an invocation takes, and where an entry's logit lies in
// the dispatch's chunk of rows (src/gpu/kernels/logits.rs: row first_row + i at
// logits[i * vocab]). A kernel declares its own bindings 1 (the entries) and 2 (the chunk).

struct Params {
    n: u32,         // entries
    rows: u32,      // logits rows that may change (the chunk's)
    vocab: u32,     // logits per row
    first_row: u32, // the chunk's first row
    zero: u32,      // always 0, a value no compiler knows
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;

const WG: u32 = 64u;
const MASKED_LOGIT: f32 = -1e30;
const NO_LOGIT: u32 = 0xffffffffu;

// The entry of invocation lid of workgroup wid (n or more: a spare invocation). Dispatch:
// ceil(n / 64) workgroups, folded into (x, y, 1).
fn entry_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// The index of logit (row, token) in the chunk, or NO_LOGIT when the chunk does not hold
// the row or the token is past the vocabulary. (A chunk holds at most 2^30 logits.)
fn chunk_logit(row: u32, token: u32) -> u32 {
    if (row < p.first_row || row - p.first_row >= p.rows || token >= p.vocab) {
        return NO_LOGIT;
    }
    return (row - p.first_row) * p.vocab + token;
}
