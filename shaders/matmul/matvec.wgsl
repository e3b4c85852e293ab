// Shape for few rows of x (decode), shaped for GPUs: many workgroups, k split across the
// invocations, every weight block loaded once for all the rows.
//
// A workgroup of WG invocations owns NR consecutive weight rows (NR even) and MR rows of x
// (dispatch: (ceil(rows / NR), ceil(m / MR), 1)). Its work items are (weight row, block)
// pairs: an invocation decodes the block once and computes its canonical part for each of
// the MR rows of x into `scratch`; then one invocation per (pair of weight rows, row of x)
// adds the parts in block order. Blocks are taken in chunks that fit `scratch`, the running
// sums carried across chunks, so any k works. No subgroup operations: the same code runs on
// every adapter, the browser's included.
//
// The host prepends: const WG, MR, NR, PRO_ROWS (= MR), SCRATCH.

var<workgroup> scratch: array<f32, SCRATCH>;

// The parts of weight row n's block b for the MR rows of x from m0, into scratch at
// item * MR + r.
fn block_parts(n: u32, b: u32, m0: u32, item: u32) {
    let base = n * p.row_bytes;
    let k0 = b * 32u;
    if (k0 + 32u <= p.k) {
        let blk = w_block(base, b);
        var wv: array<vec4<f32>, 8>;
        for (var s = 0u; s < 8u; s += 1u) {
            wv[s] = w_block4(blk, s);
        }
        for (var r = 0u; r < MR; r += 1u) {
            let i = min(m0 + r, p.m - 1u);
            var part = 0.0;
            for (var s = 0u; s < 8u; s += 1u) {
                part = fma4(wv[s], xin4(i, r, k0 + 4u * s), part);
            }
            scratch[item * MR + r] = part;
        }
        return;
    }
    // The last, shorter block of a float format: steps of 4, then single values.
    let k4 = k0 + ((p.k - k0) & ~3u);
    for (var r = 0u; r < MR; r += 1u) {
        let i = min(m0 + r, p.m - 1u);
        var part = 0.0;
        for (var k = k0; k < k4; k += 4u) {
            part = fma4(w_load4(base, k), xin4(i, r, k), part);
        }
        for (var k = k4; k < p.k; k += 1u) {
            part = fma(w_load1(base, k), xin1(i, r, k), part);
        }
        scratch[item * MR + r] = part;
    }
}

@compute @workgroup_size(WG)
fn matmul(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = group.y * MR;
    let n0 = group.x * NR;
    prologue_setup(m0, lid);
    let blocks = (p.k + 31u) / 32u;
    let per_chunk = SCRATCH / (MR * NR); // blocks per chunk
    // This invocation's sums: weight rows n0 + 2 pair and + 1, row of x m0 + r.
    let pair = lid / MR;
    let r = lid % MR;
    var acc0 = 0.0;
    var acc1 = 0.0;
    for (var c0 = 0u; c0 < blocks; c0 += per_chunk) {
        let nb = min(per_chunk, blocks - c0);
        for (var item = lid; item < NR * nb; item += WG) {
            let n = min(n0 + item / nb, p.rows - 1u);
            block_parts(n, c0 + item % nb, m0, item);
        }
        workgroupBarrier();
        if (pair < NR / 2u) {
            for (var j = 0u; j < nb; j += 1u) {
                acc0 = acc0 + scratch[((2u * pair) * nb + j) * MR + r];
                acc1 = acc1 + scratch[((2u * pair + 1u) * nb + j) * MR + r];
            }
        }
        workgroupBarrier();
    }
    if (pair < NR / 2u) {
        emit_pair(m0 + r, n0 + 2u * pair, acc0, acc1);
    }
}
