//! sprout: a portable LLM inference engine for reinforcement-learning rollouts, on wgpu.
//!
//! See DESIGN.md in the repository for the architecture. The library core compiles to
//! wasm32: device setup and read-back are async and nothing here blocks on a thread.

pub mod engine;
pub mod error;
pub mod generate;
pub mod gpu;
pub mod kv;
pub mod model;
pub mod reference;
pub mod sched;
pub mod trajectory;

pub use error::SproutError;
