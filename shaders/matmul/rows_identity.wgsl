// Batch row i reads row i of x.
fn x_row(i: u32) -> u32 {
    return i;
}
