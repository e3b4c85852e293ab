//! Where a decoder's weights are while the engine sleeps: on the device (serving), kept
//! in host memory with their device buffers freed (vLLM's sleep level 1), or discarded
//! until an update brings new ones (level 2).
//!
//! Offloading reads every buffer back in [`DecoderWeights::buffers`]' order, then destroys
//! it: the device frees the memory at once (once the work submitted before has run),
//! while the handles stay as the layout that restoring fills with new buffers of the same
//! sizes and uses. Restored weights are the same bytes, so a model serves bitwise as
//! before it slept.

use std::sync::Arc;

use serde::Serialize;

use crate::error::SproutError;
use crate::gpu::Gpu;
use crate::model::decoder_weights::DecoderWeights;

/// Where the weights are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Residency {
    /// On the device: the model can run.
    Device,
    /// In host memory, their device buffers freed.
    Host,
    /// Gone: new weights must come (`Decoder::replace_weights`) before the model runs.
    Discarded,
}

/// The weights as a decoder holds them.
pub(crate) enum HeldWeights {
    Device(Arc<DecoderWeights>),
    Host(HostWeights),
    Discarded,
}

impl HeldWeights {
    pub(crate) fn residency(&self) -> Residency {
        match self {
            HeldWeights::Device(_) => Residency::Device,
            HeldWeights::Host(_) => Residency::Host,
            HeldWeights::Discarded => Residency::Discarded,
        }
    }
}

/// Weights kept in host memory: the layout (its buffers destroyed) and each buffer's
/// bytes, in the layout's buffer order.
pub(crate) struct HostWeights {
    layout: Arc<DecoderWeights>,
    bytes: Vec<Vec<u8>>,
}

impl HostWeights {
    /// Bytes held in host memory.
    pub(crate) fn host_bytes(&self) -> u64 {
        self.bytes.iter().map(|b| b.len() as u64).sum()
    }
}

/// Copies `weights` to host memory and frees their device buffers. No step may record
/// with them after (the caller keeps no other handle in use).
pub(crate) async fn offload(
    gpu: &Gpu,
    weights: Arc<DecoderWeights>,
) -> Result<HostWeights, SproutError> {
    let mut bytes = Vec::new();
    for buffer in weights.buffers() {
        bytes.push(gpu.read_bytes(buffer, buffer.size()).await?);
    }
    // Bind groups cached over these buffers would keep their memory.
    gpu.forget_bind_groups();
    for buffer in weights.buffers() {
        buffer.destroy();
    }
    Ok(HostWeights {
        layout: weights,
        bytes,
    })
}

/// Uploads weights kept in host memory back to the device.
pub(crate) fn restore(gpu: &Gpu, host: &HostWeights) -> Result<DecoderWeights, SproutError> {
    use wgpu::util::DeviceExt;
    let old = host.layout.buffers();
    let mut new = old.iter().zip(&host.bytes).map(|(old, bytes)| {
        gpu.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("weight"),
                contents: bytes,
                usage: old.usage(),
            })
    });
    let weights = host.layout.rebuilt(&mut new).ok_or_else(|| {
        SproutError::Shape("the weights kept in host memory lost a buffer (this is a bug)".into())
    })?;
    gpu.flush_uploads()?;
    Ok(weights)
}
