//! Writes the `matmul` entry point of the CPU-shaped tile (`MatmulShape::Tile`) for one
//! tile size and one way of loading x.
//!
//! An invocation computes a tile of `rows` rows of x by `cols` weight rows, walking all of
//! k itself: no workgroup memory (bar the RMSNorm prologue's) and no cross-invocation sums,
//! which is what a CPU adapter runs best, its invocations being SIMD lanes. The weight rows
//! come in adjacent pairs (`2q`, `2q + 1`), pair `q0 + c * 64` for `c < cols / 2`, so that
//! the pairwise epilogues (SiLU-gate, RoPE) see both values of a pair.
//!
//! Its sums, parts, weight blocks and x values are named scalars (`acc{j}_{t}`,
//! `wv{j}`, `xv{t}`, ...), written out here for the tile, rather than WGSL arrays indexed in
//! loops: Mesa's llvmpipe keeps arrays in memory unless its loop unrolling removes every
//! dynamic index, and the unrolled form ran the tile about 1.5x faster.
//!
//! With a LoRA term the tile adds it itself, before `emit_pair`: for each j of the rank it
//! loads B'[col, j] once per weight row and t[i, j] once per row of x (the same for every
//! invocation) and runs every output's chain, rather than each output loading its own
//! B' row again for each row of x as the output-by-output wrapper does
//! (shaders/matmul/lora_emit.wgsl). On llvmpipe a load whose address differs between
//! invocations is a loop over the SIMD lanes, so sharing it across the tile's rows is what
//! makes the term cheap; its loop also runs outside the epilogue's divergent branches.
//! The arithmetic is lora.wgsl's `lora_term`, chain for chain.
//!
//! Invariant: every output runs the canonical order of `shaders/matmul/common.wgsl` (a
//! sequential fma chain per block of 32, the blocks' parts added in order), so results are
//! bitwise those of every other shape and tile, for either way of loading x.

/// How a tile's invocations get the values of x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum XLoads {
    /// Every invocation loads each x value it uses.
    Direct,
    /// For each 32-value block, each invocation of a subgroup loads 4 values and all read
    /// them from one another with `subgroupShuffle`: 8x fewer loads. Needs subgroups of at
    /// least 8 invocations. The values, and so the results, are those of `Direct`.
    Shuffled,
}

/// The smallest subgroup `XLoads::Shuffled` works with (8 invocations of 4 values each
/// cover a block of 32).
pub const MIN_SHUFFLE_SUBGROUP: u32 = 8;

/// Invocations per workgroup of the tile shape.
pub const WORKGROUP: u32 = 64;

/// The `matmul` entry point for a `rows` x `cols` tile (`cols` even), adding the LoRA term
/// of shaders/matmul/lora.wgsl when `lora`.
pub fn entry_point(rows: u32, cols: u32, loads: XLoads, lora: bool) -> String {
    assert!(cols >= 2 && cols.is_multiple_of(2), "tile cols {cols}");
    let tile = Tile { tm: rows, tn: cols };
    let shuffled = loads == XLoads::Shuffled;
    let mut out = vec![
        format!(
            "// A {rows} x {cols} tile, x loaded {}. Dispatch: (ceil(rows / (2 * 64 * {})), ceil(m / {rows}), 1).",
            if shuffled {
                "once per subgroup and shuffled"
            } else {
                "directly"
            },
            cols / 2
        ),
        "// Out-of-range rows of x and weight rows are clamped to the last one rather than".into(),
        "// branched around, so no load sits under divergent control flow; the epilogue".into(),
        "// stores nothing for them. With direct loads, an invocation none of whose weight".into(),
        "// rows is in range leaves at once.".into(),
        format!("const WG: u32 = {WORKGROUP}u;"),
        format!("const PRO_ROWS: u32 = {rows}u;"),
        "const SCRATCH: u32 = 256u;".into(),
        "var<workgroup> scratch: array<f32, SCRATCH>;".into(),
        "@compute @workgroup_size(64)".into(),
        "fn matmul(".into(),
        "    @builtin(workgroup_id) group: vec3<u32>,".into(),
        "    @builtin(local_invocation_index) lane: u32,".into(),
    ];
    if shuffled {
        out.push("    @builtin(subgroup_invocation_id) sg: u32,".into());
    }
    out.push(") {".into());
    out.push(format!("    let m0 = group.y * {rows}u;"));
    out.push("    prologue_setup(m0, lane);".into());
    out.push(format!("    let q0 = group.x * WG * {}u + lane;", cols / 2));
    if !shuffled {
        // An invocation with no weight row in range leaves (its SIMD group, on a CPU
        // adapter, then skips the loops once all its lanes have): a narrow weight, such as
        // a LoRA adapter's A of 16 to 48 rows, would otherwise run up to 16x its work on
        // clamped rows. Shuffled loads need every lane of the subgroup, so they keep them.
        out.push("    if (2u * q0 >= p.rows) {".into());
        out.push("        return;".into());
        out.push("    }".into());
    }
    for j in 0..cols {
        out.push(format!(
            "    let base{j} = min({}, p.rows - 1u) * p.row_bytes;",
            weight_row(j)
        ));
    }
    for t in 0..rows {
        out.push(format!("    let row{t} = min(m0 + {t}u, p.m - 1u);"));
    }
    for (j, t) in tile.outputs() {
        out.push(format!("    var acc{j}_{t} = 0.0;"));
        out.push(format!("    var part{j}_{t} = 0.0;"));
    }

    out.push("    // Whole blocks: each weight block is loaded once for its 8 steps.".into());
    out.push("    let blocks = p.k >> 5u;".into());
    out.push("    for (var b = 0u; b < blocks; b += 1u) {".into());
    for j in 0..cols {
        out.push(format!("        let wb{j} = w_block(base{j}, b);"));
    }
    if shuffled {
        for t in 0..rows {
            out.push(format!(
                "        let xb{t} = xin4(row{t}, {t}u, b * 32u + (sg & 7u) * 4u);"
            ));
        }
    }
    out.push("        for (var s = 0u; s < 8u; s += 1u) {".into());
    let x_of = |t: u32| {
        if shuffled {
            format!("subgroupShuffle(xb{t}, s)")
        } else {
            format!("xin4(row{t}, {t}u, b * 32u + s * 4u)")
        }
    };
    tile.step(
        &mut out,
        "            ",
        x_of,
        |j| format!("w_block4(wb{j}, s)"),
        "fma4",
    );
    out.push("        }".into());
    tile.fold(&mut out, "        ");
    out.push("    }".into());

    out.push("    // The last, shorter block (float formats only, where k need not be a".into());
    out.push("    // multiple of 32 or of 4): steps of 4, then single values.".into());
    out.push("    if (blocks * 32u < p.k) {".into());
    out.push("        let k4 = p.k & ~3u;".into());
    out.push("        for (var k = blocks * 32u; k < k4; k += 4u) {".into());
    tile.step(
        &mut out,
        "            ",
        |t| format!("xin4(row{t}, {t}u, k)"),
        |j| format!("w_load4(base{j}, k)"),
        "fma4",
    );
    out.push("        }".into());
    out.push("        for (var k = k4; k < p.k; k += 1u) {".into());
    tile.step(
        &mut out,
        "            ",
        |t| format!("xin1(row{t}, {t}u, k)"),
        |j| format!("w_load1(base{j}, k)"),
        "fma",
    );
    out.push("        }".into());
    tile.fold(&mut out, "        ");
    out.push("    }".into());
    if lora {
        lora_term(&tile, &mut out);
    }
    for t in 0..rows {
        for c in 0..cols / 2 {
            let (j0, j1) = (2 * c, 2 * c + 1);
            out.push(format!(
                "    emit_pair(m0 + {t}u, 2u * (q0 + {c}u * WG), acc{j0}_{t}, acc{j1}_{t});"
            ));
        }
    }
    out.push("}".into());
    out.join("\n") + "\n"
}

/// Adds the LoRA term to every sum of the tile whose row of x has the adapter: each
/// output's chain `lora = fma(B'[col, j], t[i, j], lora)` over j = 0..R from 0 (lora.wgsl's
/// `lora_term`, in the same order), then `acc = acc + lora`. The clamped weight rows and
/// rows of x read in range and are never emitted; a row without the adapter keeps its sum
/// untouched (its term is computed and dropped, in uniform control flow).
fn lora_term(tile: &Tile, out: &mut Vec<String>) {
    out.push("    // The LoRA term: B' loaded once per weight row for all the tile's rows.".into());
    for j in 0..tile.tn {
        out.push(format!(
            "    let lb{j} = (p.n_offset + min({}, p.rows - 1u)) * p.lora_rank;",
            weight_row(j)
        ));
    }
    for t in 0..tile.tm {
        out.push(format!("    let lt{t} = row{t} * p.lora_rank;"));
    }
    for (j, t) in tile.outputs() {
        out.push(format!("    var lora{j}_{t} = 0.0;"));
    }
    out.push("    for (var r = 0u; r < p.lora_rank; r += 1u) {".into());
    for t in 0..tile.tm {
        out.push(format!("        let tv{t} = lora_t[lt{t} + r];"));
    }
    for j in 0..tile.tn {
        out.push(format!("        let bv{j} = lora_b[lb{j} + r];"));
        for t in 0..tile.tm {
            out.push(format!(
                "        lora{j}_{t} = fma(bv{j}, tv{t}, lora{j}_{t});"
            ));
        }
    }
    out.push("    }".into());
    for t in 0..tile.tm {
        out.push(format!("    if (rowinfo[4u * row{t} + 3u] != 0u) {{"));
        for j in 0..tile.tn {
            out.push(format!("        acc{j}_{t} = acc{j}_{t} + lora{j}_{t};"));
        }
        out.push("    }".into());
    }
}

/// The WGSL expression of tile column `j`'s weight row: pair `q0 + (j / 2) * WG`, first or
/// second of it.
fn weight_row(j: u32) -> String {
    format!("2u * (q0 + {}u * WG) + {}u", j / 2, j % 2)
}

/// A tile of `tm` rows of x by `tn` weight rows.
struct Tile {
    tm: u32,
    tn: u32,
}

impl Tile {
    /// (weight row, row of x) of every output.
    fn outputs(&self) -> impl Iterator<Item = (u32, u32)> {
        let tm = self.tm;
        (0..self.tn).flat_map(move |j| (0..tm).map(move |t| (j, t)))
    }

    /// One step: load x for every row and the weight for every weight row, then
    /// `part{j}_{t} = {op}(wv{j}, xv{t}, part{j}_{t})` for every output.
    fn step(
        &self,
        out: &mut Vec<String>,
        indent: &str,
        x_of: impl Fn(u32) -> String,
        w_of: impl Fn(u32) -> String,
        op: &str,
    ) {
        for t in 0..self.tm {
            out.push(format!("{indent}let xv{t} = {};", x_of(t)));
        }
        for j in 0..self.tn {
            out.push(format!("{indent}let wv{j} = {};", w_of(j)));
            for t in 0..self.tm {
                out.push(format!(
                    "{indent}part{j}_{t} = {op}(wv{j}, xv{t}, part{j}_{t});"
                ));
            }
        }
    }

    /// The end of a block: every part joins its sum and restarts from 0.
    fn fold(&self, out: &mut Vec<String>, indent: &str) {
        for (j, t) in self.outputs() {
            out.push(format!("{indent}acc{j}_{t} = acc{j}_{t} + part{j}_{t};"));
            out.push(format!("{indent}part{j}_{t} = 0.0;"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_output_of_the_tile_is_accumulated_folded_and_emitted_once() {
        let wgsl = entry_point(3, 4, XLoads::Direct, false);
        for j in 0..4 {
            for t in 0..3 {
                let step = format!("part{j}_{t} = fma4(wv{j}, xv{t}, part{j}_{t});");
                // Once in the block loop, once in the shorter block's steps of 4.
                assert_eq!(wgsl.matches(&step).count(), 2, "{step}");
                let single = format!("part{j}_{t} = fma(wv{j}, xv{t}, part{j}_{t});");
                assert_eq!(wgsl.matches(&single).count(), 1, "{single}");
                let fold = format!("acc{j}_{t} = acc{j}_{t} + part{j}_{t};");
                assert_eq!(wgsl.matches(&fold).count(), 2, "{fold}");
            }
        }
        for t in 0..3 {
            for c in 0..2 {
                let emit = format!(
                    "emit_pair(m0 + {t}u, 2u * (q0 + {c}u * WG), acc{}_{t}, acc{}_{t});",
                    2 * c,
                    2 * c + 1
                );
                assert_eq!(wgsl.matches(&emit).count(), 1, "{emit}");
            }
        }
        assert!(!wgsl.contains("subgroup"));
        assert!(!wgsl.contains("lora"));
    }

    #[test]
    fn the_lora_term_runs_one_chain_per_output_and_joins_rows_with_the_adapter() {
        let wgsl = entry_point(2, 4, XLoads::Direct, true);
        // One load of B' per weight row and of t per row of x, per step of the rank.
        assert_eq!(wgsl.matches("= lora_b[").count(), 4);
        assert_eq!(wgsl.matches("= lora_t[").count(), 2);
        for j in 0..4 {
            for t in 0..2 {
                let step = format!("lora{j}_{t} = fma(bv{j}, tv{t}, lora{j}_{t});");
                assert_eq!(wgsl.matches(&step).count(), 1, "{step}");
                let join = format!("acc{j}_{t} = acc{j}_{t} + lora{j}_{t};");
                assert_eq!(wgsl.matches(&join).count(), 1, "{join}");
            }
        }
        assert_eq!(wgsl.matches("if (rowinfo[4u * row").count(), 2);
        // The term joins the sums before they are emitted.
        let joined = wgsl.find("acc0_0 = acc0_0 + lora0_0;").unwrap();
        assert!(joined < wgsl.find("emit_pair(").unwrap());
    }

    #[test]
    fn only_direct_loads_let_invocations_without_weight_rows_leave() {
        let exit = "if (2u * q0 >= p.rows) {";
        let direct = entry_point(4, 2, XLoads::Direct, false);
        assert_eq!(direct.matches(exit).count(), 1);
        // After the prologue's barriers, before any weight is read.
        let at = direct.find(exit).unwrap();
        assert!(direct.find("prologue_setup(").unwrap() < at);
        assert!(at < direct.find("w_block(").unwrap());
        assert!(!entry_point(4, 2, XLoads::Shuffled, false).contains(exit));
    }

    #[test]
    fn shuffled_loads_read_x_once_per_block_per_row() {
        let wgsl = entry_point(2, 2, XLoads::Shuffled, false);
        assert!(wgsl.contains("@builtin(subgroup_invocation_id) sg: u32"));
        assert_eq!(wgsl.matches("subgroupShuffle(").count(), 2);
        assert!(!wgsl.contains("xin4(row0, 0u, b * 32u + s * 4u)"));
    }
}
