//! [`RowInfo`]: what the kernels know of one token row of a step besides its values: where
//! its sequence's block table starts, its position, and the pool row its K and V go to.
//!
//! The q|k|v epilogue reads the position (RoPE) and the slot (the KV write); attention
//! reads the table offset and the position (which keys the row attends); a matmul with a
//! LoRA term reads the adapter word (whether the row gets the term). The layout is the
//! shaders' `vec4<u32>`: 16 bytes.

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
    /// Which adapter the row runs with: 0 for the base model alone, 1 for the active
    /// LoRA adapter. A matmul with a LoRA term adds it only to rows whose word is not 0, so
    /// a base-model row is bitwise what the kernel without the term gives it, whichever
    /// rows share its batch.
    pub adapter: u32,
}

impl RowInfo {
    pub fn new(table_offset: u32, position: u32, slot: u32) -> RowInfo {
        RowInfo {
            table_offset,
            position,
            slot,
            adapter: 0,
        }
    }

    /// The same row, run with `adapter` (0: the base model alone, 1: the active adapter).
    pub fn with_adapter(self, adapter: u32) -> RowInfo {
        RowInfo { adapter, ..self }
    }

    /// The keys the row attends: `position + 1`.
    pub fn keys(&self) -> u32 {
        self.position + 1
    }
}
