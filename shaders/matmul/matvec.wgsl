// Shape for few rows of x (decode), shaped for GPUs: many workgroups, k split across the
// invocations, every weight block loaded once for all the rows of x, and the loads of x
// shared by a whole subgroup.
//
// A workgroup of WG invocations owns NR consecutive weight rows (NR even, dividing WG) and
// MR rows of x (dispatch: (ceil(rows / NR), ceil(m / MR), 1)). Invocation lid takes weight
// row r = lid % NR and every BPR = WG / NR-th block from lid / NR, so that the invocations
// of a subgroup work on one block of neighbouring rows: they read the same values of x
// (one load serves them all) while each reads its own row's block. For each block it
// computes the canonical part for each of the MR rows of x, the rows' chains interleaved,
// into `scratch`; then one invocation per (pair of weight rows, row of x) adds the parts
// in block order. Blocks are taken in chunks that fit `scratch`, the running sums carried
// across chunks, so any k works. No subgroup operations: the same code runs on every
// adapter, the browser's included.
//
// The host prepends: const WG, MR, NR, PRO_ROWS (= MR), SCRATCH.

const BPR: u32 = WG / NR;

var<workgroup> scratch: array<f32, SCRATCH>;

// The parts of the weight row at `base`, block b, for the MR rows of x from m0, into
// scratch[(j * MR + i) * NR + r].
fn block_parts(base: u32, b: u32, m0: u32, j: u32, r: u32) {
    let k0 = b * 32u;
    var part: array<f32, MR>;
    for (var i = 0u; i < MR; i += 1u) {
        part[i] = 0.0;
    }
    if (k0 + 32u <= p.k) {
        let blk = w_block(base, b);
        for (var s = 0u; s < 8u; s += 1u) {
            let wv = w_block4(blk, s);
            for (var i = 0u; i < MR; i += 1u) {
                part[i] = fma4(wv, xin4(min(m0 + i, p.m - 1u), i, k0 + 4u * s), part[i]);
            }
        }
    } else {
        // The last, shorter block of a float format: steps of 4, then single values.
        let k4 = k0 + ((p.k - k0) & ~3u);
        for (var k = k0; k < k4; k += 4u) {
            let wv = w_load4(base, k);
            for (var i = 0u; i < MR; i += 1u) {
                part[i] = fma4(wv, xin4(min(m0 + i, p.m - 1u), i, k), part[i]);
            }
        }
        for (var k = k4; k < p.k; k += 1u) {
            let wv = w_load1(base, k);
            for (var i = 0u; i < MR; i += 1u) {
                part[i] = fma(wv, xin1(min(m0 + i, p.m - 1u), i, k), part[i]);
            }
        }
    }
    for (var i = 0u; i < MR; i += 1u) {
        scratch[(j * MR + i) * NR + r] = part[i];
    }
}

@compute @workgroup_size(WG)
fn matmul(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = group.y * MR;
    let n0 = group.x * NR;
    prologue_setup(m0, lid);
    let r = lid % NR;
    let slot = lid / NR;
    let base = min(n0 + r, p.rows - 1u) * p.row_bytes;
    let blocks = (p.k + 31u) / 32u;
    let per_chunk = SCRATCH / (MR * NR); // blocks per chunk
    // This invocation's sums: weight rows n0 + 2 pair and + 1, row of x m0 + fi.
    let pair = lid % (NR / 2u);
    let fi = lid / (NR / 2u);
    var acc0 = 0.0;
    var acc1 = 0.0;
    for (var c0 = 0u; c0 < blocks; c0 += per_chunk) {
        let nb = min(per_chunk, blocks - c0);
        for (var j = slot; j < nb; j += BPR) {
            block_parts(base, c0 + j, m0, j, r);
        }
        workgroupBarrier();
        if (fi < MR) {
            for (var j = 0u; j < nb; j += 1u) {
                let at = (j * MR + fi) * NR + 2u * pair;
                acc0 = acc0 + scratch[at];
                acc1 = acc1 + scratch[at + 1u];
            }
        }
        workgroupBarrier();
    }
    if (fi < MR) {
        emit_pair(m0 + fi, n0 + 2u * pair, acc0, acc1);
    }
}
