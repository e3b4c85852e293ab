//! [`RowInfo`]: what the kernels know of one token row of a step besides its values: where
//! its sequence's block table starts, its position, and the pool row its K and V go to.
//!
//! The q|k|v epilogue reads the position (RoPE) and the slot (the KV write); attention
//! reads the table offset and the position (which keys the row attends). The layout is the
//! shaders' `vec4<u32>`: 16 bytes, the last word zero.

/// One token row's place in the paged KV pool (`rowinfo[t]` in the shaders).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RowInfo {
    /// Where the row's sequence's block table starts in the step's concatenated tables.
    pub table_offset: u32,
    /// The row's absolute position in its sequence: it attends keys `0 ..= position`.
    pub position: u32,
    /// The pool row its K and V are written to (`block * block_size + position % block_size`).
    pub slot: u32,
    /// Zero: pads the row to the shaders' `vec4<u32>`.
    pub reserved: u32,
}

impl RowInfo {
    pub fn new(table_offset: u32, position: u32, slot: u32) -> RowInfo {
        RowInfo {
            table_offset,
            position,
            slot,
            reserved: 0,
        }
    }

    /// The keys the row attends: `position + 1`.
    pub fn keys(&self) -> u32 {
        self.position + 1
    }
}
