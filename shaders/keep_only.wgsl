// Keeps only the allowed tokens of chosen rows (vLLM's allowed_token_ids): for each spec
// (row, first, count), every logit of the row whose token is not in
// allowed[first .. first + count] becomes MASKED_LOGIT; the others are untouched bit for
// bit. A spec whose row >= rows changes nothing.
//
// The slice is sorted ascending (the caller's invariant); each invocation finds its
// token in it by binary search, starting from where its previous token's search ended
// (its tokens ascend). A slice past the end of `allowed` is clamped to it (first to the
// length, count to what is left), so nothing is read out of bounds; an unsorted slice
// keeps an unspecified set of tokens, still in bounds. Two specs for one row keep the
// tokens allowed by both: each writes only the constant MASKED_LOGIT, so the order of
// specs and workgroups does not matter.
//
// Workgroups: (spec, vocabulary tile of TILE tokens), numbered spec * tiles + tile and
// folded into (x, y, 1) (src/gpu/grid.rs), so a long row is spread over many workgroups.
// An invocation handles the tile's tokens lid, lid + WG, ... (coalesced).
//
// Logits come in chunks of rows (src/gpu/kernels/logits.rs), one dispatch per chunk: a
// dispatch masks the rows of its specs in first_row .. first_row + rows, row
// first_row + i at logits[i * vocab]; the workgroups of other specs return at once.

struct Params {
    n: u32,           // specs
    rows: u32,        // logits rows that may be masked (the chunk's)
    vocab: u32,       // logits per row
    first_row: u32,   // the chunk's first row
    tiles: u32,       // ceil(vocab / TILE)
    allowed_len: u32, // values in `allowed`
    _pad0: u32,
    _pad1: u32,
}

// `KeepOnly` on the host: 16 bytes.
struct KeepOnly {
    row: u32,
    first: u32,
    count: u32,
    reserved: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> specs: array<KeepOnly>;   // [n]
@group(0) @binding(2) var<storage, read> allowed: array<u32>;      // the specs' sorted slices
@group(0) @binding(3) var<storage, read_write> logits: array<f32>; // [rows, vocab]: the chunk

const WG: u32 = 256u;
const PER_INVOCATION: u32 = 4u;
const TILE: u32 = 1024u; // WG * PER_INVOCATION
const MASKED_LOGIT: f32 = -1e30;

// The first index in lo .. hi whose value is >= token (hi if none).
fn lower_bound(lo_in: u32, hi_in: u32, token: u32) -> u32 {
    var lo = lo_in;
    var hi = hi_in;
    while (lo < hi) {
        let mid = lo + (hi - lo) / 2u;
        if (allowed[mid] < token) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Dispatch: n * tiles workgroups, folded into (x, y, 1).
@compute @workgroup_size(256)
fn keep_only(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = wid.y * nwg.x + wid.x;
    if (w >= p.n * p.tiles) {
        return;
    }
    let spec = specs[w / p.tiles];
    if (spec.row < p.first_row || spec.row - p.first_row >= p.rows) {
        return;
    }
    let first = min(spec.first, p.allowed_len);
    let end = first + min(spec.count, p.allowed_len - first);
    let base = (spec.row - p.first_row) * p.vocab;
    let tile_first = (w % p.tiles) * TILE;
    var at = first;
    for (var j = 0u; j < PER_INVOCATION; j++) {
        let token = tile_first + j * WG + lid;
        if (token >= p.vocab) {
            break;
        }
        at = lower_bound(at, end, token);
        if (at == end || allowed[at] != token) {
            logits[base + token] = MASKED_LOGIT;
        }
    }
}
