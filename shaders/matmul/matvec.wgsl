// Shape for few rows of x (decode), shaped for GPUs: many workgroups, k split across the
// invocations, every weight block loaded once for all the rows of x, and the loads of x
// shared by a whole subgroup.
//
// A workgroup of WG invocations owns NR consecutive weight rows (NR even, MR * NR dividing
// WG) and MR rows of x (dispatch: (ceil(rows / NR), ceil(m / MR), 1)). Invocation lid
// takes row of x i = lid % MR, weight row r = (lid / MR) % NR and every BPR-th block from
// lid / (MR * NR) (BPR = WG / (MR * NR)): each invocation computes one canonical part (one
// chain of 32 products) per block, so that no invocation runs a long chain of dependent
// loads, and the invocations of a subgroup share their loads: MR of them read each weight
// block, and the x values of a block are read by every weight row's invocations. One
// invocation per (pair of weight rows, row of x) then adds the parts in block order.
// Blocks are taken in chunks that fit `scratch`, the running sums carried across chunks,
// so any k works. No subgroup operations: the same code runs on every adapter, the
// browser's included.
//
// The host prepends: const WG, MR, NR, PRO_ROWS (= MR), SCRATCH.

const BPR: u32 = WG / (MR * NR);

var<workgroup> scratch: array<f32, SCRATCH>;

// The part of the weight row at `base`, block b, for batch row `row` (the workgroup's row
// of x `i`), into scratch[(j * NR + r) * MR + i].
fn block_part(base: u32, b: u32, row: u32, i: u32, j: u32, r: u32) {
    let k0 = b * 32u;
    var part = 0.0;
    if (k0 + 32u <= p.k) {
        let blk = w_block(base, b);
        for (var s = 0u; s < 8u; s += 1u) {
            part = fma4(w_block4(blk, s), xin4(row, i, k0 + 4u * s), part);
        }
    } else {
        // The last, shorter block of a float format: steps of 4, then single values.
        let k4 = k0 + ((p.k - k0) & ~3u);
        for (var k = k0; k < k4; k += 4u) {
            part = fma4(w_load4(base, k), xin4(row, i, k), part);
        }
        for (var k = k4; k < p.k; k += 1u) {
            part = fma(w_load1(base, k), xin1(row, i, k), part);
        }
    }
    scratch[(j * NR + r) * MR + i] = part;
}

@compute @workgroup_size(WG)
fn matmul(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = group.y * MR;
    let n0 = group.x * NR;
    prologue_setup(m0, lid);
    let i = lid % MR;
    let r = (lid / MR) % NR;
    let slot = lid / (MR * NR);
    let row = min(m0 + i, p.m - 1u);
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
            block_part(base, c0 + j, row, i, j, r);
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
