// Embedding lookup from a table in its stored format:
//     out[r, c] = table[ids[r], c] * scale      for the ids that fall in this weight part
//
// scale is the model's embedding scale (Gemma multiplies by sqrt(hidden)): one f32
// multiply per decoded value, so a scale of 1 leaves every value as decoded, bit for bit.
//
// The table [vocab, dim] may be split by rows into parts (one dispatch each); a dispatch
// writes only the rows whose id lies in [first_row, first_row + rows). An id >= vocab
// selects no row: the dispatch with zero_invalid = 1 (the first part's) writes zeros for
// it. One invocation per 4 values of a row; no reductions.
//
// An id with its high bit set is a token drawn by the step before, not yet read back by
// the CPU: `drawn[id & 0x7fffffff]` (the engine plans a step while the GPU still runs the
// one before it). An index past `drawn` is an invalid id (zeros).
//
// The weight decoder (w_load4, w_load1) is appended by the host for the table's format.

struct Params {
    m: u32,            // ids (rows of out)
    dim: u32,          // values per table row
    row_bytes: u32,    // bytes per table row in its stored format
    first_row: u32,    // first table row in this part
    rows: u32,         // table rows in this part
    vocab: u32,        // table rows in all parts
    zero_invalid: u32, // 1: write zeros for ids >= vocab
    scale: f32,        // every looked-up value is multiplied by it
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;       // [m]
@group(0) @binding(2) var<storage, read> w: array<u32>;         // [rows, row_bytes] stored format
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // [m, dim]
@group(0) @binding(4) var<storage, read> drawn: array<u32>;     // the step before's drawn tokens

const DRAWN: u32 = 0x80000000u;

const WG: u32 = 256u;

// Dispatch: ceil(m * ceil(dim / 4) / 256) workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn embedding(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let quads = (p.dim + 3u) / 4u;
    let index = (wid.y * nwg.x + wid.x) * WG + lid;
    if (index >= p.m * quads) {
        return;
    }
    let r = index / quads;
    let c = (index % quads) * 4u;
    let o = r * p.dim + c;
    var id = ids[r];
    if ((id & DRAWN) != 0u) {
        let d = id & ~DRAWN;
        id = select(0xffffffffu, drawn[min(d, arrayLength(&drawn) - 1u)], d < arrayLength(&drawn));
    }
    if (id >= p.vocab) {
        if (p.zero_invalid == 1u) {
            for (var k = c; k < min(c + 4u, p.dim); k += 1u) {
                out[r * p.dim + k] = 0.0;
            }
        }
        return;
    }
    if (id < p.first_row || id - p.first_row >= p.rows) {
        return;
    }
    let base = (id - p.first_row) * p.row_bytes;
    if (c + 4u <= p.dim) {
        let v = w_load4(base, c) * p.scale;
        out[o] = v.x;
        out[o + 1u] = v.y;
        out[o + 2u] = v.z;
        out[o + 3u] = v.w;
    } else {
        for (var k = c; k < p.dim; k += 1u) {
            out[r * p.dim + k] = w_load1(base, k) * p.scale;
        }
    }
}
