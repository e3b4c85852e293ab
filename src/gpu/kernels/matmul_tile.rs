//! Writes the WGSL entry point of the matmul kernel (shaders/matmul.wgsl) for one tile
//! size and one way of loading x.
//!
//! An invocation computes a tile of `rows` rows of x by `cols` weight rows. Its
//! accumulators, weight blocks and x values are named scalars (`acc{j}_{t}`, `wv{j}`, `xv{t}`, ...), written
//! out here for the tile, rather than WGSL arrays indexed in loops: Mesa's llvmpipe (the
//! CPU adapter CI runs on) keeps arrays in memory unless its loop unrolling removes every
//! dynamic index, and the unrolled form ran the tile about 1.5x faster.
//!
//! Invariant: for every output, every tile and both x loads run exactly the same sequence
//! of f32 operations (four fma lanes over k in steps of 4 in increasing k, a scalar fma
//! tail, then `finish`), so results are bitwise the same across tiles, loads and batches.

/// How a tile's invocations get the values of x.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The `matmul` entry point for a `rows` x `cols` tile.
pub fn entry_point(rows: u32, cols: u32, loads: XLoads) -> String {
    let tile = Tile { tm: rows, tn: cols };
    let shuffled = loads == XLoads::Shuffled;
    let mut out = vec![
        format!(
            "// A {rows} x {cols} tile, x loaded {}. Dispatch: (ceil(rows / (64 * {cols})), ceil(m / {rows}), 1).",
            if shuffled {
                "once per subgroup and shuffled"
            } else {
                "directly"
            }
        ),
        "// Out-of-range rows of x and weight rows are clamped to the last one rather than".into(),
        "// branched around, so no load sits under divergent control flow; their results".into(),
        "// are not stored.".into(),
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
    out.push(format!(
        "    let n0 = group.x * WORKGROUP * {cols}u + lane;"
    ));
    for j in 0..cols {
        out.push(format!(
            "    let base{j} = min(n0 + {j}u * WORKGROUP, p.rows - 1u) * p.row_bytes;"
        ));
    }
    for t in 0..rows {
        out.push(format!("    let row{t} = min(m0 + {t}u, p.m - 1u);"));
    }
    for (j, t) in tile.outputs() {
        out.push(format!("    var acc{j}_{t} = vec4<f32>(0.0);"));
        out.push(format!("    var tail{j}_{t} = 0.0;"));
    }

    out.push(
        "    // Whole 32-value blocks: each weight block is loaded once for its 8 steps.".into(),
    );
    out.push("    let blocks = p.k >> 5u;".into());
    out.push("    for (var b = 0u; b < blocks; b += 1u) {".into());
    for j in 0..cols {
        out.push(format!("        let wb{j} = w_block(base{j}, b);"));
    }
    if shuffled {
        for t in 0..rows {
            out.push(format!(
                "        let xb{t} = x4(row{t}, b * 32u + (sg & 7u) * 4u);"
            ));
        }
    }
    out.push("        for (var s = 0u; s < 8u; s += 1u) {".into());
    let x_of = |t: u32| {
        if shuffled {
            format!("subgroupShuffle(xb{t}, s)")
        } else {
            format!("x4(row{t}, b * 32u + s * 4u)")
        }
    };
    tile.step(
        &mut out,
        "            ",
        x_of,
        |j| format!("w_block4(wb{j}, s)"),
        "acc",
    );
    out.push("        }".into());
    out.push("    }".into());

    out.push(
        "    // The remaining steps of 4 and the scalar tail (float formats only, where k".into(),
    );
    out.push("    // need not be a multiple of 32 or of 4).".into());
    out.push("    let k4 = p.k & ~3u;".into());
    out.push("    for (var k = blocks * 32u; k < k4; k += 4u) {".into());
    let x4_of = |t: u32| format!("x4(row{t}, k)");
    tile.step(
        &mut out,
        "        ",
        x4_of,
        |j| format!("w_load4(base{j}, k)"),
        "acc",
    );
    out.push("    }".into());
    out.push("    for (var k = k4; k < p.k; k += 1u) {".into());
    let x1_of = |t: u32| format!("x1(row{t}, k)");
    tile.step(
        &mut out,
        "        ",
        x1_of,
        |j| format!("w_load1(base{j}, k)"),
        "tail",
    );
    out.push("    }".into());
    for (j, t) in tile.outputs() {
        out.push(format!(
            "    store(m0 + {t}u, n0 + {j}u * WORKGROUP, acc{j}_{t}, tail{j}_{t});"
        ));
    }
    out.push("}".into());
    out.join("\n") + "\n"
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
    /// `{acc}{j}_{t} = fma(wv{j}, xv{t}, {acc}{j}_{t})` for every output.
    fn step(
        &self,
        out: &mut Vec<String>,
        indent: &str,
        x_of: impl Fn(u32) -> String,
        w_of: impl Fn(u32) -> String,
        acc: &str,
    ) {
        for t in 0..self.tm {
            out.push(format!("{indent}let xv{t} = {};", x_of(t)));
        }
        for j in 0..self.tn {
            out.push(format!("{indent}let wv{j} = {};", w_of(j)));
            for t in 0..self.tm {
                out.push(format!(
                    "{indent}{acc}{j}_{t} = fma(wv{j}, xv{t}, {acc}{j}_{t});"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_output_of_the_tile_is_accumulated_and_stored_once() {
        let wgsl = entry_point(3, 2, XLoads::Direct);
        for j in 0..2 {
            for t in 0..3 {
                let acc = format!("acc{j}_{t} = fma(wv{j}, xv{t}, acc{j}_{t});");
                // Once in the block loop, once in the remainder loop.
                assert_eq!(wgsl.matches(&acc).count(), 2, "{acc}");
                let store = format!("store(m0 + {t}u, n0 + {j}u * WORKGROUP");
                assert_eq!(wgsl.matches(&store).count(), 1, "{store}");
            }
        }
        assert!(!wgsl.contains("subgroup"));
    }

    #[test]
    fn shuffled_loads_read_x_once_per_block_per_row() {
        let wgsl = entry_point(2, 1, XLoads::Shuffled);
        assert!(wgsl.contains("@builtin(subgroup_invocation_id) sg: u32"));
        assert_eq!(wgsl.matches("subgroupShuffle(").count(), 2);
        assert!(!wgsl.contains("x4(row0, b * 32u + s * 4u)"));
    }
}
