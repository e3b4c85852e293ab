//! Which workgroups compute which rows of a step's attention: plain data, built on the CPU
//! from each row's key count.
//!
//! A row's keys are taken in pages of [`PAGE`] from key 0 (shaders/attention.wgsl). A work
//! item folds a run of a row's pages: either all of them, writing the output, or (when the
//! row is split, flash-decoding) a first run or a single page, writing its state to a
//! scratch slot; a combine step then folds the row's slots in order. The first item of a
//! split row covers every page but the last `MAX_SLOTS_PER_ROW - 1`, each of which gets an
//! item of its own, so a row never takes more than `MAX_SLOTS_PER_ROW` slots however long
//! its context.
//!
//! Invariant: whatever the split, a row's pages are folded in page order with the same
//! operations, so the output is bitwise the same split or whole.

use serde::{Deserialize, Serialize};

/// Keys per page (the shader's workgroup size).
pub const PAGE: u32 = 64;
/// Most scratch slots (work items) one split row takes.
pub const MAX_SLOTS_PER_ROW: u32 = 32;
/// The `slot` of a work item that writes its row's output.
pub const NO_SLOT: u32 = u32::MAX;

/// Which rows are split across workgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionSplit {
    /// One workgroup per row (and group of heads): no scratch, no combine step. What CPU
    /// adapters run best, and what long prefill chunks need anyway.
    Whole,
    /// Rows that are their sequence's only row in the step (decodes) take a workgroup per
    /// page, so that few sequences with long contexts still fill a GPU.
    DecodePages,
}

/// One step's work items and the rows to combine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttentionPlan {
    /// `(row, first page, pages, slot)` per work item.
    pub items: Vec<[u32; 4]>,
    /// `(row, first slot, slots, 0)` per split row.
    pub combine: Vec<[u32; 4]>,
    /// Per row, `(first slot, slots)` when it is split, else `(NO_SLOT, 0)`: how a matmul
    /// prologue that folds the states itself finds a row's (shaders/matmul/
    /// prologue_attention_fold.wgsl).
    pub row_slots: Vec<[u32; 2]>,
    /// Scratch slots used.
    pub slots: u32,
}

impl AttentionPlan {
    /// Plans rows given as `(key count, split it)`, in row order, reusing allocations. A
    /// row of one page is never split (there is nothing to share out).
    pub fn build(&mut self, rows: impl IntoIterator<Item = (u32, bool)>) {
        self.items.clear();
        self.combine.clear();
        self.row_slots.clear();
        self.slots = 0;
        for (row, (keys, split)) in rows.into_iter().enumerate() {
            let row = row as u32;
            let pages = keys.div_ceil(PAGE).max(1);
            if !split || pages == 1 {
                self.items.push([row, 0, pages, NO_SLOT]);
                self.row_slots.push([NO_SLOT, 0]);
                continue;
            }
            let items = pages.min(MAX_SLOTS_PER_ROW);
            let first_run = pages - (items - 1);
            let first_slot = self.slots;
            self.items.push([row, 0, first_run, first_slot]);
            for j in 1..items {
                self.items.push([row, first_run + j - 1, 1, first_slot + j]);
            }
            self.combine.push([row, first_slot, items, 0]);
            self.row_slots.push([first_slot, items]);
            self.slots += items;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_rows_take_one_item_each_and_write_their_output() {
        let mut plan = AttentionPlan::default();
        plan.build([(1, false), (64, false), (65, false), (1000, false)]);
        assert_eq!(
            plan.items,
            [
                [0, 0, 1, NO_SLOT],
                [1, 0, 1, NO_SLOT],
                [2, 0, 2, NO_SLOT],
                [3, 0, 16, NO_SLOT]
            ]
        );
        assert!(plan.combine.is_empty());
        assert_eq!(plan.slots, 0);
        assert_eq!(plan.row_slots, [[NO_SLOT, 0]; 4]);
    }

    #[test]
    fn split_rows_take_a_slot_per_page_in_order() {
        let mut plan = AttentionPlan::default();
        plan.build([(64, true), (130, true), (7, false), (256, true)]);
        assert_eq!(
            plan.items,
            [
                [0, 0, 1, NO_SLOT],
                [1, 0, 1, 0],
                [1, 1, 1, 1],
                [1, 2, 1, 2],
                [2, 0, 1, NO_SLOT],
                [3, 0, 1, 3],
                [3, 1, 1, 4],
                [3, 2, 1, 5],
                [3, 3, 1, 6],
            ]
        );
        assert_eq!(plan.combine, [[1, 0, 3, 0], [3, 3, 4, 0]]);
        assert_eq!(plan.slots, 7);
        let whole = [NO_SLOT, 0];
        assert_eq!(plan.row_slots, [whole, [0, 3], whole, [3, 4]]);
    }

    #[test]
    fn a_long_row_folds_its_first_pages_in_one_item() {
        let mut plan = AttentionPlan::default();
        let pages = 100;
        plan.build([(pages * PAGE, true)]);
        let first_run = pages - (MAX_SLOTS_PER_ROW - 1);
        assert_eq!(plan.items[0], [0, 0, first_run, 0]);
        assert_eq!(plan.items.len() as u32, MAX_SLOTS_PER_ROW);
        // Every page is covered once, in order.
        let mut next = 0;
        for item in &plan.items {
            assert_eq!(item[1], next);
            next += item[2];
        }
        assert_eq!(next, pages);
        assert_eq!(plan.combine, [[0, 0, MAX_SLOTS_PER_ROW, 0]]);
    }
}
