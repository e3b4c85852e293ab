//! Sleeping: the engine gives the device its memory back while a trainer on the same
//! machine uses it, and takes it again (vLLM's sleep levels and wake tags).
//!
//! The KV cache sleeps by freeing the pool and every step buffer (the runner): the
//! sequences running are preempted first (they recompute their tokens when they run
//! again, bitwise as before: preemption never changes a sample) and the prefix cache is
//! forgotten, since the memory its blocks named is gone. The weights sleep in the decoder
//! (`model::weight_residency`): kept in host memory ([`SleepLevel::Offload`]) or discarded
//! ([`SleepLevel::Discard`]) until an update brings new ones.
//!
//! Invariants: nothing is freed while a step is in flight (`Engine::settle` first); a step
//! while the KV cache or the weights sleep is an error naming which, and changes nothing
//! (requests may still be queued: they wait in the scheduler until the engine wakes).

use crate::engine::paged_kv::PagedKv;
use crate::engine::{Engine, StepOutput, StepRunner};
use crate::error::SproutError;
use crate::gpu::memory::DeviceMemory;
use crate::model::weight_residency::Residency;

/// How deeply the engine sleeps (vLLM's levels 1 and 2; its level 0, a pause, frees
/// nothing and is the caller's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SleepLevel {
    /// The KV cache freed; the weights kept in host memory and put back on wake.
    Offload,
    /// The KV cache and the weights freed; new weights must be loaded to run again.
    Discard,
}

pub(super) fn kv_asleep() -> SproutError {
    SproutError::Asleep("the KV cache is asleep: wake it first".into())
}

impl Engine<'_> {
    /// Frees the device memory the engine holds, as `level` says, once the step in flight
    /// has been applied: its results are returned, for the caller to route like a step's.
    /// Sleeping deeper than before (level 2 after level 1) discards the weights kept.
    pub async fn sleep(&mut self, level: SleepLevel) -> Result<StepOutput, SproutError> {
        let settled = self.settle().await?;
        self.release_kv_cache()?;
        match level {
            SleepLevel::Offload => self.decoder.offload_weights().await?,
            SleepLevel::Discard => self.decoder.discard_weights(),
        }
        self.let_memory_go()?;
        Ok(settled)
    }

    /// Frees the KV pool and every step buffer, preempting the sequences running and
    /// forgetting the prefix cache; returns how many sequences were preempted. Nothing to
    /// free when the KV cache already sleeps. An error while a step is in flight.
    pub fn release_kv_cache(&mut self) -> Result<usize, SproutError> {
        if self.in_flight.is_some() {
            return Err(SproutError::Asleep(
                "a step is in flight: settle the engine before freeing its KV cache".into(),
            ));
        }
        let preempted = self.scheduler.preempt_all();
        self.scheduler.reset_prefix_cache();
        if self.runner.take().is_some() {
            // Bind groups cached over the freed buffers would keep them.
            self.decoder.gpu.forget_bind_groups();
            self.let_memory_go()?;
        }
        Ok(preempted)
    }

    /// Allocates the KV pool and the step buffers again (the pool empty, as the
    /// scheduler's is); nothing to do while they are there. A device that cannot allocate
    /// them (a trainer still holding its memory) is an error, and they still sleep.
    pub async fn restore_kv_cache(&mut self) -> Result<(), SproutError> {
        if self.runner.is_some() {
            return Ok(());
        }
        let (decoder, c) = (self.decoder, self.scheduler.config());
        let allocate = || {
            let kv = PagedKv::new(&decoder.gpu, &decoder.config, c.num_blocks, c.block_size)?;
            let (max_t, max_r) = (c.max_batch_tokens, c.max_num_seqs);
            Ok(StepRunner::new(decoder, kv, max_t, max_r))
        };
        let runner = decoder.gpu.allocating("the KV cache", allocate).await?;
        self.runner = Some(runner);
        Ok(())
    }

    /// Whether the KV pool and the step buffers are on the device.
    pub fn kv_cache_resident(&self) -> bool {
        self.runner.is_some()
    }

    /// Puts the weights kept in host memory back on the device (an error when they were
    /// discarded: an update brings new ones instead, or when the device cannot allocate
    /// them).
    pub async fn restore_weights(&mut self) -> Result<(), SproutError> {
        self.decoder.restore_weights().await
    }

    /// Bytes the engine holds on the device by its own accounting: the weights (while
    /// there), the RoPE tables, the KV pool and the step buffers. Pipelines and the
    /// driver's own memory are not counted.
    pub fn device_bytes(&self) -> u64 {
        self.decoder.device_bytes() + self.kv_cache_bytes()
    }

    /// Bytes of the KV pool and the step buffers on the device (0 while they sleep).
    pub fn kv_cache_bytes(&self) -> u64 {
        self.runner.as_ref().map_or(0, StepRunner::device_bytes)
    }

    /// The device memory held: wgpu's allocator report where the backend has one, else
    /// [`Engine::device_bytes`] (`gpu::memory`).
    pub fn device_memory(&self) -> DeviceMemory {
        self.decoder.gpu.device_memory(self.device_bytes())
    }

    /// An error naming what sleeps, if anything does: a step cannot run then.
    pub(super) fn check_awake(&self) -> Result<(), SproutError> {
        if self.runner.is_none() {
            return Err(kv_asleep());
        }
        match self.decoder.residency() {
            Residency::Device => Ok(()),
            _ => self.decoder.weights().map(|_| ()),
        }
    }

    /// Waits for the device to have run what was submitted, so that the buffers dropped
    /// or destroyed are freed now rather than at some later poll (native only: a browser
    /// frees them on its own schedule).
    fn let_memory_go(&self) -> Result<(), SproutError> {
        #[cfg(not(target_arch = "wasm32"))]
        self.decoder.gpu.wait_idle()?;
        Ok(())
    }
}
