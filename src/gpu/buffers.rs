//! Activation buffers on the GPU and reading them back.
//!
//! Activations are f32 (or u32 ids), row-major, tightly packed. Read-back is async so the
//! same code runs in a browser; on native it polls the device until the copy is done.

use wgpu::util::DeviceExt;

use super::Gpu;
use crate::error::SproutError;

/// A storage buffer of `len` 32-bit values (f32 or u32).
pub struct Tensor {
    pub buffer: wgpu::Buffer,
    pub len: usize,
}

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    /// A buffer holding `data` (bytes of 32-bit values).
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Tensor {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let len = bytes.len() / 4;
        // A binding may not be empty: keep at least one value.
        let contents = if bytes.is_empty() {
            &[0u8; 4][..]
        } else {
            bytes
        };
        let buffer = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents,
                usage: STORAGE,
            });
        Tensor { buffer, len }
    }

    /// A zeroed buffer of `len` 32-bit values.
    pub fn zeros(&self, len: usize) -> Tensor {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: (len.max(1) * 4) as u64,
            usage: STORAGE,
            mapped_at_creation: false,
        });
        Tensor { buffer, len }
    }

    /// Writes `data` at the start of `tensor`; the write lands before the work of the next
    /// submit.
    pub fn write<T: bytemuck::Pod>(&self, tensor: &Tensor, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        assert!(
            bytes.len() <= 4 * tensor.len,
            "writing {} bytes into a tensor of {} values",
            bytes.len(),
            tensor.len
        );
        self.queue.write_buffer(&tensor.buffer, 0, bytes);
    }

    /// Reads `tensor` back as f32.
    pub async fn read_f32(&self, tensor: &Tensor) -> Result<Vec<f32>, SproutError> {
        let bytes = self
            .read_bytes(&tensor.buffer, tensor.len as u64 * 4)
            .await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Reads `tensor` back as u32.
    pub async fn read_u32(&self, tensor: &Tensor) -> Result<Vec<u32>, SproutError> {
        let bytes = self
            .read_bytes(&tensor.buffer, tensor.len as u64 * 4)
            .await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Copies the first `size` bytes of `buffer` to the CPU (after all submitted work).
    pub async fn read_bytes(
        &self,
        buffer: &wgpu::Buffer,
        size: u64,
    ) -> Result<Vec<u8>, SproutError> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let staging = self.staging(size);
        let mut encoder = self.encoder();
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
        self.submit(encoder);
        self.read_staged(&staging, size).await
    }

    /// A buffer the CPU can read: copy results into it inside a step's own encoder, then
    /// [`Gpu::read_staged`] after the submit (one submit per step, and the buffer is reused).
    pub fn staging(&self, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size: size.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// The first `size` bytes of a [`Gpu::staging`] buffer, once the work submitted so far
    /// has finished.
    pub async fn read_staged(
        &self,
        staging: &wgpu::Buffer,
        size: u64,
    ) -> Result<Vec<u8>, SproutError> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let slice = staging.slice(..size);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| SproutError::ReadBack(e.to_string()))?;
        rx.await
            .map_err(|_| SproutError::ReadBack("the device was lost".into()))?
            .map_err(|e| SproutError::ReadBack(e.to_string()))?;
        if let Some(e) = self.take_device_error() {
            staging.unmap();
            return Err(SproutError::ReadBack(format!(
                "the GPU device reported an error, so this result cannot be trusted: {e}"
            )));
        }
        let view = slice
            .get_mapped_range()
            .map_err(|e| SproutError::ReadBack(e.to_string()))?;
        let out = view.to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Hands the device the uploads made so far and, natively, waits for them to land.
    /// `create_buffer_init` and `write_buffer` stage their bytes in buffers of their own
    /// that wgpu frees only once a submission has carried them: without this, a model's
    /// upload holds a second copy of its weights on the device until the next step (a
    /// browser frees the staging on its own schedule).
    pub fn flush_uploads(&self) -> Result<(), SproutError> {
        self.queue.submit([]);
        #[cfg(not(target_arch = "wasm32"))]
        self.wait_idle()?;
        Ok(())
    }

    /// Blocks until all submitted work has finished (native only; benchmarks and tests).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait_idle(&self) -> Result<(), SproutError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| SproutError::ReadBack(e.to_string()))
    }
}
