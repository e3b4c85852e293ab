// Batch row i reads row rows_index[gather_first + i] of x (the rows whose logits are
// wanted; a dispatch per chunk of logits starts further in). An index past x reads
// whatever robust buffer access gives; the host fills the indices.
@group(0) @binding(B_GATHER) var<storage, read> rows_index: array<u32>; // [gather_first + m]

fn x_row(i: u32) -> u32 {
    return rows_index[p.gather_first + i];
}
