// Shape for few rows of x (decode), shaped for GPUs: many workgroups, k split across the
// invocations, every weight block loaded once for all the rows of x, and the loads of x
// shared by a whole subgroup.
//
// A workgroup of WG invocations owns NR consecutive weight rows (NR even, MR * NR dividing
// WG) and MR rows of x (dispatch: (ceil(rows / NR), ceil(m / MR), 1)). Each invocation
// serves XR of those rows of x (XR divides MR): it decodes each weight block once, four
// values at a time, and uses them for its XR rows, as llama.cpp's mul_mat_vec keeps a
// column's accumulators per row in registers. With XG = MR / XR groups of rows, invocation
// lid takes group g = lid % XG (rows g * XR .. g * XR + XR), weight row r = (lid / XG) % NR
// and every BPR-th block from lid / (XG * NR) (BPR = WG / (XG * NR)): per block it
// computes one canonical part (one chain of 32 products) for each of its rows, so no
// invocation runs a long chain of dependent loads, and the invocations of a subgroup share
// their loads. One invocation per (pair of weight rows, row of x) then adds the parts in
// block order. Blocks are taken in chunks that fit `scratch`, the running sums carried
// across chunks, so any k works. A row's part is the same chain whatever XR is: XR decides
// only how often a block is decoded. No subgroup operations: the same code runs on every
// adapter, the browser's included.
//
// The host prepends: const WG, MR, NR, XR, PRO_ROWS (= MR), SCRATCH.

const XG: u32 = MR / XR;
const BPR: u32 = WG / (XG * NR);

var<workgroup> scratch: array<f32, SCRATCH>;

// The parts of the weight row at `base`, block b, for the workgroup's rows of x
// g * XR .. g * XR + XR (batch rows from m0, clamped to the last), into
// scratch[(j * NR + r) * MR + i] for each such row i.
fn block_parts(base: u32, b: u32, m0: u32, g: u32, j: u32, r: u32) {
    let k0 = b * 32u;
    // Zeroed explicitly (SwiftShader kept stale values in arrays declared without one).
    var part: array<f32, XR>;
    for (var t = 0u; t < XR; t += 1u) {
        part[t] = 0.0;
    }
    let i0 = g * XR;
    if (k0 + 32u <= p.k) {
        let blk = w_block(base, b);
        for (var s = 0u; s < 8u; s += 1u) {
            let wv = w_block4(blk, s);
            for (var t = 0u; t < XR; t += 1u) {
                let i = i0 + t;
                part[t] = fma4(wv, xin4(min(m0 + i, p.m - 1u), i, k0 + 4u * s), part[t]);
            }
        }
    } else {
        // The last, shorter block of a float format: steps of 4, then single values.
        let k4 = k0 + ((p.k - k0) & ~3u);
        for (var k = k0; k < k4; k += 4u) {
            let wv = w_load4(base, k);
            for (var t = 0u; t < XR; t += 1u) {
                let i = i0 + t;
                part[t] = fma4(wv, xin4(min(m0 + i, p.m - 1u), i, k), part[t]);
            }
        }
        for (var k = k4; k < p.k; k += 1u) {
            let wv = w_load1(base, k);
            for (var t = 0u; t < XR; t += 1u) {
                let i = i0 + t;
                part[t] = fma(wv, xin1(min(m0 + i, p.m - 1u), i, k), part[t]);
            }
        }
    }
    for (var t = 0u; t < XR; t += 1u) {
        scratch[(j * NR + r) * MR + i0 + t] = part[t];
    }
}

@compute @workgroup_size(WG)
fn matmul(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = group.y * MR;
    let n0 = group.x * NR;
    prologue_setup(m0, lid);
    let g = lid % XG;
    let r = (lid / XG) % NR;
    let slot = lid / (XG * NR);
    let base = min(n0 + r, p.rows - 1u) * p.row_bytes;
    let blocks = (p.k + 31u) / 32u;
    let per_chunk = SCRATCH / (MR * NR); // blocks per chunk
    // This invocation's sums: weight rows n0 + 2 pair and + 1, row of x m0 + fi.
    let fi = lid % MR;
    let pair = lid / MR;
    var acc0 = 0.0;
    var acc1 = 0.0;
    for (var c0 = 0u; c0 < blocks; c0 += per_chunk) {
        let nb = min(per_chunk, blocks - c0);
        for (var j = slot; j < nb; j += BPR) {
            block_parts(base, c0 + j, m0, g, j, r);
        }
        workgroupBarrier();
        if (pair < NR / 2u) {
            for (var j = 0u; j < nb; j += 1u) {
                let at = (j * NR + 2u * pair) * MR + fi;
                acc0 = acc0 + scratch[at];
                acc1 = acc1 + scratch[at + MR];
            }
        }
        workgroupBarrier();
    }
    if (pair < NR / 2u) {
        emit_pair(m0 + fi, n0 + 2u * pair, acc0, acc1);
    }
}
