//! How much device memory sprout holds, from the best source a backend has.
//!
//! Vulkan and DX12 sub-allocate through gpu-allocator, and wgpu reports its blocks
//! (`Device::generate_allocator_report`): the bytes reserved from the driver, used or
//! not, which is what the device has given the process. Metal, OpenGL and WebGPU report
//! nothing; there the figure is sprout's own accounting of the buffers it holds (the
//! engine's: weights, RoPE tables, KV pool, step buffers), which leaves out pipelines and
//! the driver's own memory.

use serde::Serialize;

use super::Gpu;
use crate::error::SproutError;

/// Where a device-memory figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// wgpu's allocator report: every block reserved from the driver.
    Allocator,
    /// sprout's own sum of the buffers it holds.
    Buffers,
}

impl MemorySource {
    pub fn name(self) -> &'static str {
        match self {
            MemorySource::Allocator => "allocator",
            MemorySource::Buffers => "buffers",
        }
    }
}

/// Device memory held, in bytes, and where the figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceMemory {
    /// What the device has given the process (the allocator's reserved blocks).
    pub bytes: u64,
    /// What live buffers take of it. Unlike `bytes` it does not move with the
    /// allocator's packing of its blocks (a wake that allocates the same buffers in
    /// another order may reserve a block more), so a buffer that leaks shows in it exactly.
    /// Equal to `bytes` where the figure is sprout's own sum.
    pub allocated: u64,
    pub source: MemorySource,
}

/// What wgpu's allocator reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AllocatorBytes {
    /// Reserved from the driver, in blocks, used or not: what the device has given.
    pub reserved: u64,
    /// Taken by live allocations (each buffer's, rounded up to its alignment).
    pub allocated: u64,
}

impl Gpu {
    /// Runs `allocate` inside an out-of-memory error scope: its result, or an error naming
    /// `what` when the device could not allocate it (what it did allocate is dropped).
    pub async fn allocating<T>(
        &self,
        what: &str,
        allocate: impl FnOnce() -> Result<T, SproutError>,
    ) -> Result<T, SproutError> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let made = allocate();
        match scope.pop().await {
            Some(e) => Err(SproutError::OutOfMemory(format!(
                "the device could not allocate {what} (is another process holding its \
                 memory?): {e}"
            ))),
            None => made,
        }
    }

    /// What wgpu's allocator holds, where the backend reports it (Vulkan, DX12).
    pub fn allocator_bytes(&self) -> Option<AllocatorBytes> {
        self.device
            .generate_allocator_report()
            .map(|r| AllocatorBytes {
                reserved: r.total_reserved_bytes,
                allocated: r.total_allocated_bytes,
            })
    }

    /// The device memory held: the allocator's report where there is one, else
    /// `own_buffers` (the caller's sum of the buffers it holds).
    pub fn device_memory(&self, own_buffers: u64) -> DeviceMemory {
        match self.allocator_bytes() {
            Some(bytes) => DeviceMemory {
                bytes: bytes.reserved,
                allocated: bytes.allocated,
                source: MemorySource::Allocator,
            },
            None => DeviceMemory {
                bytes: own_buffers,
                allocated: own_buffers,
                source: MemorySource::Buffers,
            },
        }
    }
}
