//! A packed batch's inputs on the GPU: the buffers a forward pass reads (token ids, row
//! descriptions, block tables, the attention plan, the rows whose logits are wanted),
//! written from a [`PackedBatch`] with one `queue.write_buffer` each.
//!
//! The step runner keeps one set for the engine's life and rewrites it every step, so the
//! step loop allocates nothing; a buffer is replaced by a larger one only when a step needs
//! more room than any before.

use super::pack::PackedBatch;
use crate::gpu::kernels::attention::AttentionWork;
use crate::gpu::{Gpu, Tensor};
use crate::model::decoder::BatchView;

/// A storage buffer that is replaced by a larger one when a step needs more room.
pub(super) struct Growable {
    pub(super) tensor: Tensor,
}

impl Growable {
    pub(super) fn new(gpu: &Gpu, len: usize) -> Growable {
        Growable {
            tensor: gpu.zeros(len.max(1)),
        }
    }

    pub(super) fn bytes(&self) -> u64 {
        self.tensor.buffer.size()
    }

    /// Makes room for `words` 32-bit values (growing to the next power of two).
    pub(super) fn reserve(&mut self, gpu: &Gpu, words: usize) {
        if words > self.tensor.len {
            self.tensor = gpu.zeros(words.next_power_of_two());
        }
    }

    /// Writes `data` at the start, growing first if needed.
    pub(super) fn write<T: bytemuck::Pod>(&mut self, gpu: &Gpu, data: &[T]) {
        self.reserve(gpu, size_of_val(data) / 4);
        gpu.write(&self.tensor, data);
    }
}

/// The forward pass's inputs for batches of up to `max_t` rows and `max_r` logit rows
/// (grown when a batch needs more).
pub struct BatchInputs {
    ids: Growable,
    rowinfo: Growable,
    block_tables: Growable,
    attention_items: Growable,
    attention_combine: Growable,
    attention_row_slots: Growable,
    logit_rows: Growable,
}

impl BatchInputs {
    pub fn new(gpu: &Gpu, max_t: usize, max_r: usize) -> BatchInputs {
        BatchInputs {
            ids: Growable::new(gpu, max_t),
            rowinfo: Growable::new(gpu, 4 * max_t),
            block_tables: Growable::new(gpu, 4 * max_t),
            attention_items: Growable::new(gpu, 4 * max_t),
            attention_combine: Growable::new(gpu, 4 * max_r),
            attention_row_slots: Growable::new(gpu, 2 * max_t),
            logit_rows: Growable::new(gpu, max_r),
        }
    }

    /// Bytes these buffers take on the device.
    pub fn device_bytes(&self) -> u64 {
        let all = [
            &self.ids,
            &self.rowinfo,
            &self.block_tables,
            &self.attention_items,
            &self.attention_combine,
            &self.attention_row_slots,
            &self.logit_rows,
        ];
        all.iter().map(|g| g.bytes()).sum()
    }

    /// Writes `batch` (lands before the next submit's work).
    pub fn write(&mut self, gpu: &Gpu, batch: &PackedBatch) {
        self.ids.write(gpu, &batch.ids);
        self.rowinfo.write(gpu, &batch.rowinfo);
        self.block_tables.write(gpu, &batch.block_tables);
        self.attention_items.write(gpu, &batch.attention.items);
        self.attention_combine.write(gpu, &batch.attention.combine);
        self.attention_row_slots
            .write(gpu, &batch.attention.row_slots);
        self.logit_rows.write(gpu, &batch.logit_rows);
    }

    /// The forward pass's view of `batch`, as written. `drawn` holds the tokens the step
    /// before drew, which ids marked `DRAWN` name (`None`: no id does).
    pub fn view<'a>(&'a self, batch: &PackedBatch, drawn: Option<&'a Tensor>) -> BatchView<'a> {
        BatchView {
            t: batch.ids.len(),
            ids: &self.ids.tensor,
            drawn: drawn.unwrap_or(&self.ids.tensor),
            rowinfo: &self.rowinfo.tensor,
            block_tables: &self.block_tables.tensor,
            attention: AttentionWork {
                items: &self.attention_items.tensor,
                n_items: batch.attention.items.len(),
                combine: &self.attention_combine.tensor,
                n_combine: batch.attention.combine.len(),
                row_slots: &self.attention_row_slots.tensor,
                slots: batch.attention.slots as usize,
            },
            r: batch.logit_rows.len(),
            logit_rows: &self.logit_rows.tensor,
            lora: batch.lora_rows > 0,
        }
    }
}
