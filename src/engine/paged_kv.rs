//! The GPU side of the paged KV pool: per layer, one K and one V buffer of
//! `[num_blocks * block_size, kv_dim]` f32 rows. Block `b` holds pool rows
//! `b * block_size .. (b + 1) * block_size`, contiguous in every buffer, so copying a block
//! (copy-on-write) is one buffer copy per layer and per K/V.
//!
//! Which block holds what is decided on the CPU (`crate::kv`, `crate::sched`); this module
//! only owns the memory and sizes it within the adapter's limits: no one buffer may exceed
//! the maximum storage binding size. A buffer cannot be copied onto itself (WebGPU forbids
//! it), so a block copy goes through a scratch buffer of one block per layer and K/V.

use crate::error::SproutError;
use crate::gpu::{Gpu, Tensor};
use crate::model::config::ModelConfig;
use crate::model::decoder::KvPools;

pub struct PagedKv {
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub block_size: usize,
    pub num_blocks: usize,
    /// One block of every K and V buffer, for copies.
    scratch: Tensor,
}

impl PagedKv {
    /// Bytes one block takes over all layers, K and V together.
    pub fn bytes_per_block(config: &ModelConfig, block_size: usize) -> u64 {
        (2 * config.n_layers * block_size * config.kv_dim() * 4) as u64
    }

    /// The most blocks the adapter's limits allow (one layer's K buffer is the largest
    /// single binding).
    pub fn max_blocks(gpu: &Gpu, config: &ModelConfig, block_size: usize) -> usize {
        let per_layer_block = (block_size * config.kv_dim() * 4) as u64;
        let limit = gpu.caps.max_binding.min(gpu.caps.max_buffer);
        (limit / per_layer_block) as usize
    }

    /// The number of blocks a memory budget of `bytes` buys (over all layers, K and V).
    pub fn blocks_for_memory(config: &ModelConfig, block_size: usize, bytes: u64) -> usize {
        (bytes / Self::bytes_per_block(config, block_size)) as usize
    }

    pub fn new(
        gpu: &Gpu,
        config: &ModelConfig,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<PagedKv, SproutError> {
        let max = Self::max_blocks(gpu, config, block_size);
        if num_blocks == 0 || num_blocks > max {
            return Err(SproutError::Shape(format!(
                "{num_blocks} KV blocks of {block_size} tokens: this adapter allows 1 to {max} \
                 (one layer's keys must fit its {}-byte binding limit)",
                gpu.caps.max_binding
            )));
        }
        let len = num_blocks * block_size * config.kv_dim();
        let kv = PagedKv {
            k: (0..config.n_layers).map(|_| gpu.zeros(len)).collect(),
            v: (0..config.n_layers).map(|_| gpu.zeros(len)).collect(),
            block_size,
            num_blocks,
            scratch: gpu.zeros(2 * config.n_layers * block_size * config.kv_dim()),
        };
        // Clear the pools now. The device zeroes a buffer on its first use anyway, and on a
        // CPU adapter that first touch of the memory costs tens of milliseconds per layer;
        // done here it is part of creating the engine instead of its first steps.
        let mut encoder = gpu.encoder();
        for pool in kv.k.iter().chain(&kv.v) {
            encoder.clear_buffer(&pool.buffer, 0, None);
        }
        gpu.submit(encoder);
        Ok(kv)
    }

    /// Bytes the pool takes on the device (with its copy scratch).
    pub fn device_bytes(&self) -> u64 {
        let pools = self.k.iter().chain(&self.v).chain([&self.scratch]);
        pools.map(|t| t.buffer.size()).sum()
    }

    /// The pools as a forward pass borrows them.
    pub fn pools(&self) -> KvPools<'_> {
        KvPools {
            k: &self.k,
            v: &self.v,
            block_size: self.block_size,
        }
    }

    /// Records copying block `src` to block `dst` in every layer's K and V.
    pub fn encode_copy(&self, encoder: &mut wgpu::CommandEncoder, src: u32, dst: u32) {
        let block_bytes = self.k[0].buffer.size() / self.num_blocks as u64;
        let (from, to) = (src as u64 * block_bytes, dst as u64 * block_bytes);
        let scratch = &self.scratch.buffer;
        let buffers = || self.k.iter().chain(&self.v).enumerate();
        for (i, b) in buffers() {
            let at = i as u64 * block_bytes;
            encoder.copy_buffer_to_buffer(&b.buffer, from, scratch, at, block_bytes);
        }
        for (i, b) in buffers() {
            let at = i as u64 * block_bytes;
            encoder.copy_buffer_to_buffer(scratch, at, &b.buffer, to, block_bytes);
        }
    }
}
