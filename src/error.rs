//! The library's error type: every failure a user can cause names its cause.

use crate::gpu::BackendChoice;

#[derive(Debug, thiserror::Error)]
pub enum SproutError {
    #[error(
        "no GPU adapter found for backend `{0}`. sprout needs a Vulkan, Metal, DX12 or OpenGL \
         driver; on Linux without a GPU install the software one: `apt-get install \
         mesa-vulkan-drivers libvulkan1` (run `sprout devices` to see what is found)"
    )]
    NoAdapter(BackendChoice),
    #[error("unknown backend `{0}`: use one of auto, vulkan, metal, dx12, gl")]
    BadBackend(String),
    #[error("could not open the GPU device: {0}")]
    RequestDevice(#[from] wgpu::RequestDeviceError),
    #[error("reading a buffer back from the GPU failed: {0}")]
    ReadBack(String),
    #[error(transparent)]
    Format(#[from] crate::formats::FormatError),
    #[error("{0}")]
    Shape(String),
    /// A model file or directory that sprout cannot use; the message names the problem.
    #[error("{0}")]
    Model(String),
    /// A LoRA adapter that sprout cannot use with this model; the message names the file
    /// (`adapter_config.json`, `adapter_model.safetensors`, or its path) and the field,
    /// tensor or value.
    #[error("{0}")]
    Adapter(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Two models whose token ids mean different tokens, or whose logits cover different
    /// numbers of ids, so one cannot score the other's tokens; the message names both
    /// (`tokenizer::vocabulary`).
    #[error("{0}")]
    Vocabulary(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The device could not allocate what was asked (waking while a trainer still holds
    /// the memory, say); the message names what.
    #[error("{0}")]
    OutOfMemory(String),
    /// The engine sleeps (its weights or KV cache are off the device): wake it first.
    #[error("{0}")]
    Asleep(String),
    /// A request the scheduler cannot take; the message names the problem.
    #[error(transparent)]
    Request(#[from] crate::sched::SchedError),
}
