// Shape for many rows of x (prefill, large batches), shaped for GPUs: a tiled GEMM with
// the tiles staged in workgroup memory.
//
// A workgroup of 16 x 16 invocations computes a tile of BM = 16 * TM rows of x by 64 weight
// rows (dispatch: (ceil(rows / 64), ceil(m / BM), 1)). Invocation (tx, ty) owns rows
// ty + 16 a (a < TM) and the weight-row pairs (2 tx, 2 tx + 1) and (2 tx + 32, 2 tx + 33).
// k advances 16 values at a time (half a block): the invocations stage x (through the
// prologue) and the weights (decoded to f32) in `scratch`, then each adds its products to
// its parts in increasing k; after each whole block the parts join the sums. That is the
// canonical order, so the outputs equal the other shapes' bit for bit.
//
// The host prepends: const WG (256), TM (4 or 8), BM (16 * TM), PRO_ROWS (= BM), SCRATCH
// (16 * BM + 16 * 64).

const TK: u32 = 16u;
const BN: u32 = 64u;

var<workgroup> scratch: array<f32, SCRATCH>;

// Stages values k0 .. k0 + 16 of the tile's rows of x and weight rows: x at
// scratch[kk * BM + row], weights at scratch[TK * BM + kk * BN + col]. Values past k are
// zero (never used: the product loop stops at k).
fn stage(m0: u32, n0: u32, k0: u32, lid: u32) {
    let whole = k0 + TK <= p.k;
    for (var e = lid; e < BM * 4u; e += WG) {
        let row = e / 4u;
        let kq = (e % 4u) * 4u;
        let i = min(m0 + row, p.m - 1u);
        var v = vec4<f32>(0.0);
        if (whole) {
            v = xin4(i, row, k0 + kq);
        } else {
            for (var c = 0u; c < 4u; c += 1u) {
                if (k0 + kq + c < p.k) {
                    v[c] = xin1(i, row, k0 + kq + c);
                }
            }
        }
        for (var c = 0u; c < 4u; c += 1u) {
            scratch[(kq + c) * BM + row] = v[c];
        }
    }
    let col = lid / 4u;
    let kq = (lid % 4u) * 4u;
    let base = min(n0 + col, p.rows - 1u) * p.row_bytes;
    var v = vec4<f32>(0.0);
    if (whole) {
        v = w_load4(base, k0 + kq);
    } else {
        for (var c = 0u; c < 4u; c += 1u) {
            if (k0 + kq + c < p.k) {
                v[c] = w_load1(base, k0 + kq + c);
            }
        }
    }
    for (var c = 0u; c < 4u; c += 1u) {
        scratch[TK * BM + (kq + c) * BN + col] = v[c];
    }
}

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = group.y * BM;
    let n0 = group.x * BN;
    prologue_setup(m0, lid);
    let tx = lid % 16u;
    let ty = lid / 16u;
    // Per row a: the four weight rows' sums and block parts as one vec4 (x: 2 tx, y: 2 tx
    // + 1, z: 2 tx + 32, w: 2 tx + 33); each component is its own chain.
    var acc: array<vec4<f32>, TM>;
    var part: array<vec4<f32>, TM>;
    for (var a = 0u; a < TM; a += 1u) {
        acc[a] = vec4<f32>(0.0);
        part[a] = vec4<f32>(0.0);
    }
    let blocks = (p.k + 31u) / 32u;
    for (var b = 0u; b < blocks; b += 1u) {
        for (var h = 0u; h < 2u; h += 1u) {
            let k0 = b * 32u + h * TK;
            if (k0 < p.k) {
                stage(m0, n0, k0, lid);
                workgroupBarrier();
                let kn = min(TK, p.k - k0);
                for (var kk = 0u; kk < kn; kk += 1u) {
                    let wr = TK * BM + kk * BN + 2u * tx;
                    let wv = vec4<f32>(scratch[wr], scratch[wr + 1u], scratch[wr + 32u], scratch[wr + 33u]);
                    for (var a = 0u; a < TM; a += 1u) {
                        part[a] = fma(wv, vec4<f32>(scratch[kk * BM + ty + 16u * a]), part[a]);
                    }
                }
                workgroupBarrier();
            }
        }
        for (var a = 0u; a < TM; a += 1u) {
            acc[a] = acc[a] + part[a];
            part[a] = vec4<f32>(0.0);
        }
    }
    for (var a = 0u; a < TM; a += 1u) {
        let i = m0 + ty + 16u * a;
        emit_pair(i, n0 + 2u * tx, acc[a].x, acc[a].y);
        emit_pair(i, n0 + 2u * tx + 32u, acc[a].z, acc[a].w);
    }
}
