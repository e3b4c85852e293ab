//! The GPU side of sprout: adapters, the opened device, buffers, weights in their stored
//! formats, the pipeline cache, the step recorder (one compute pass and one parameter
//! write per step), one module per kernel family, and which kernel variant serves which
//! dispatch on this adapter (`tuning`, with `sprout tune`'s measurements in `tune_file`),
//! how a kernel is timed (`timing`), and how much device memory is held (`memory`).
//!
//! Every kernel here has a CPU reference in `crate::reference` and is checked against it
//! on every adapter by `tests/kernels`. No kernel's reduction order depends on how many
//! rows share a dispatch or on which variant runs it (ARCHITECTURE.md, principle 1).

pub mod adapter;
pub mod bindings;
pub mod buffers;
pub mod context;
pub mod grid;
pub mod kernels;
pub mod memory;
pub mod pipelines;
pub mod profile;
pub mod recorder;
pub mod shaders;
#[cfg(not(target_arch = "wasm32"))]
pub mod timing;
#[cfg(not(target_arch = "wasm32"))]
pub mod tune_file;
pub mod tuning;
pub mod weights;

pub use adapter::{AdapterSummary, BackendChoice, list_adapters, select_adapter};
pub use buffers::Tensor;
pub use context::{Capabilities, Gpu, LimitCaps};
pub use recorder::Recorder;
pub use weights::{GpuWeight, WeightPart};
