//! Writes the `matmul` entry point of the GPU-shaped GEMM (`MatmulShape::Gemm`): tiles of
//! x and of the weight staged in workgroup memory, 16 values of k at a time.
//!
//! A workgroup of 16 x 16 invocations computes a tile of `bm = 16 * tm` rows of x by 64
//! weight rows. Invocation (tx, ty) owns rows `ty + 16 a` (a < tm) and the weight-row pairs
//! (2 tx, 2 tx + 1) and (2 tx + 32, 2 tx + 33). Per step of 16 values of k, the invocations
//! stage x (through the prologue) and the weights (decoded to f32) in `scratch`, then each
//! adds its products to its parts in increasing k, 16 steps written out; after each whole
//! block the parts join the sums (the canonical order of shaders/matmul/common.wgsl, so the
//! outputs equal the other shapes' bit for bit).
//!
//! Its sums, parts and loaded values are named scalars written out here rather than WGSL
//! arrays indexed in loops: a driver that cannot keep such an array in registers puts it in
//! memory, which made an array-based version of this kernel about ten times slower than
//! the CPU tiles on an NVIDIA H200.

/// Values of k staged per step.
const TK: u32 = 16;

/// The `matmul` entry point and its constants for tiles of `16 * tm` rows of x (`tm` a
/// multiple of 4).
pub fn entry_point(tm: u32) -> String {
    assert!(tm >= 4 && tm.is_multiple_of(4), "gemm tm {tm}");
    let bm = 16 * tm;
    // vec4s of x each invocation stages per step.
    let xq = bm * TK / 4 / 256;
    let mut o = vec![
        format!("// A GEMM tile of {bm} rows of x by 64 weight rows. Dispatch: (ceil(rows / 64), ceil(m / {bm}), 1)."),
        "const WG: u32 = 256u;".into(),
        format!("const BM: u32 = {bm}u;"),
        format!("const PRO_ROWS: u32 = {bm}u;"),
        format!("const SCRATCH: u32 = {}u;", TK * bm + TK * 64),
        format!("const WOFF: u32 = {}u;", TK * bm),
        "var<workgroup> scratch: array<f32, SCRATCH>;".into(),
        "@compute @workgroup_size(256)".into(),
        "fn matmul(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {".into(),
        "    let m0 = group.y * BM;".into(),
        "    let n0 = group.x * 64u;".into(),
        "    prologue_setup(m0, lid);".into(),
        "    let tx = lid % 16u;".into(),
        "    let ty = lid / 16u;".into(),
        "    // What this invocation stages: x rows (lid + 256 e) / 4, values ((lid + 256 e) % 4) * 4..;".into(),
        "    // weight row lid / 4, values (lid % 4) * 4...".into(),
        "    let kq = (lid % 4u) * 4u;".into(),
        "    let wcol = lid / 4u;".into(),
        "    let wbase = min(n0 + wcol, p.rows - 1u) * p.row_bytes;".into(),
    ];
    for e in 0..xq {
        o.push(format!("    let lrow{e} = (lid + {}u) / 4u;", 256 * e));
        o.push(format!("    let xrow{e} = min(m0 + lrow{e}, p.m - 1u);"));
    }
    for a in 0..tm {
        for c in 0..4 {
            o.push(format!("    var acc{a}_{c} = 0.0;"));
            o.push(format!("    var part{a}_{c} = 0.0;"));
        }
    }
    o.push("    let halves = 2u * ((p.k + 31u) / 32u);".into());
    o.push("    for (var h = 0u; h < halves; h += 1u) {".into());
    o.push(format!("        let k0 = h * {TK}u;"));
    o.push("        if (k0 >= p.k) {".into());
    o.push("            break;".into());
    o.push("        }".into());
    o.push(format!("        if (k0 + {TK}u <= p.k) {{"));
    for e in 0..xq {
        o.push(format!(
            "            let xv{e} = xin4(xrow{e}, lrow{e}, k0 + kq);"
        ));
    }
    o.push("            let wv = w_load4(wbase, k0 + kq);".into());
    stage_stores(&mut o, xq, "            ");
    o.push("        } else {".into());
    o.push(
        "            // The last, shorter step of a float format: values past k are 0 (unused)."
            .into(),
    );
    for e in 0..xq {
        o.push(format!("            var xv{e} = vec4<f32>(0.0);"));
    }
    o.push("            var wv = vec4<f32>(0.0);".into());
    o.push("            for (var c = 0u; c < 4u; c += 1u) {".into());
    o.push("                if (k0 + kq + c < p.k) {".into());
    for e in 0..xq {
        o.push(format!(
            "                    xv{e}[c] = xin1(xrow{e}, lrow{e}, k0 + kq + c);"
        ));
    }
    o.push("                    wv[c] = w_load1(wbase, k0 + kq + c);".into());
    o.push("                }".into());
    o.push("            }".into());
    stage_stores(&mut o, xq, "            ");
    o.push("        }".into());
    o.push("        workgroupBarrier();".into());
    o.push(format!("        if (k0 + {TK}u <= p.k) {{"));
    for kk in 0..TK {
        products(&mut o, tm, &format!("{kk}u"), "            ");
    }
    o.push("        } else {".into());
    o.push("            for (var kk = 0u; kk < p.k - k0; kk += 1u) {".into());
    products(&mut o, tm, "kk", "                ");
    o.push("            }".into());
    o.push("        }".into());
    o.push("        workgroupBarrier();".into());
    o.push("        // The end of a block (or of k): the parts join the sums.".into());
    o.push(format!(
        "        if ((h & 1u) == 1u || k0 + {TK}u >= p.k) {{"
    ));
    for a in 0..tm {
        for c in 0..4 {
            o.push(format!(
                "            acc{a}_{c} = acc{a}_{c} + part{a}_{c};"
            ));
            o.push(format!("            part{a}_{c} = 0.0;"));
        }
    }
    o.push("        }".into());
    o.push("    }".into());
    for a in 0..tm {
        o.push(format!("    let i{a} = m0 + ty + {}u;", 16 * a));
        o.push(format!(
            "    emit_pair(i{a}, n0 + 2u * tx, acc{a}_0, acc{a}_1);"
        ));
        o.push(format!(
            "    emit_pair(i{a}, n0 + 2u * tx + 32u, acc{a}_2, acc{a}_3);"
        ));
    }
    o.push("}".into());
    o.join("\n") + "\n"
}

/// Stores the staged `xv{e}` and `wv` into scratch: x at `[k][row]`, weights at `[k][col]`.
fn stage_stores(o: &mut Vec<String>, xq: u32, indent: &str) {
    for e in 0..xq {
        for (c, comp) in ["x", "y", "z", "w"].iter().enumerate() {
            o.push(format!(
                "{indent}scratch[(kq + {c}u) * BM + lrow{e}] = xv{e}.{comp};"
            ));
        }
    }
    for (c, comp) in ["x", "y", "z", "w"].iter().enumerate() {
        o.push(format!(
            "{indent}scratch[WOFF + (kq + {c}u) * 64u + wcol] = wv.{comp};"
        ));
    }
}

/// One value of k: the invocation's four weights and `tm` values of x, then every part.
fn products(o: &mut Vec<String>, tm: u32, kk: &str, indent: &str) {
    o.push(format!("{indent}{{"));
    o.push(format!("{indent}    let wr = WOFF + {kk} * 64u + 2u * tx;"));
    o.push(format!("{indent}    let w0 = scratch[wr];"));
    o.push(format!("{indent}    let w1 = scratch[wr + 1u];"));
    o.push(format!("{indent}    let w2 = scratch[wr + 32u];"));
    o.push(format!("{indent}    let w3 = scratch[wr + 33u];"));
    o.push(format!("{indent}    let xr = {kk} * BM + ty;"));
    for a in 0..tm {
        o.push(format!("{indent}    let x{a} = scratch[xr + {}u];", 16 * a));
        for c in 0..4 {
            o.push(format!(
                "{indent}    part{a}_{c} = fma(w{c}, x{a}, part{a}_{c});"
            ));
        }
    }
    o.push(format!("{indent}}}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_output_is_accumulated_in_both_loops_folded_and_emitted_once() {
        let wgsl = entry_point(8);
        for a in 0..8 {
            for c in 0..4 {
                let fma = format!("part{a}_{c} = fma(w{c}, x{a}, part{a}_{c});");
                // 16 written-out steps and the shorter step's loop.
                assert_eq!(wgsl.matches(&fma).count(), 17, "{fma}");
                let fold = format!("acc{a}_{c} = acc{a}_{c} + part{a}_{c};");
                assert_eq!(wgsl.matches(&fold).count(), 1, "{fold}");
            }
            assert_eq!(wgsl.matches(&format!("emit_pair(i{a},")).count(), 2);
        }
        // 128 rows x 16 values = 512 vec4s of x: two per invocation.
        assert!(wgsl.contains("let xv1 = xin4(xrow1, lrow1, k0 + kq);"));
        assert!(!wgsl.contains("xv2"));
    }
}
