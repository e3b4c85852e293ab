// The rows' RowInfo, for the LoRA term's adapter word (the q|k|v epilogue binds it itself).
@group(0) @binding(B_ROWINFO) var<storage, read> rowinfo: array<u32>; // [m, 4]: (table offset, position, slot, adapter)
