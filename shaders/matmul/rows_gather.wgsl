// Batch row i reads row rows_index[i] of x (the rows whose logits are wanted). An index
// past x reads whatever robust buffer access gives; the host fills the indices.
@group(0) @binding(B_GATHER) var<storage, read> rows_index: array<u32>; // [m]

fn x_row(i: u32) -> u32 {
    return rows_index[i];
}
