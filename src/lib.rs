//! sprout: a portable LLM inference engine for reinforcement-learning rollouts, on wgpu.
//!
//! ARCHITECTURE.md in the repository maps the modules and their rules. The library core compiles to
//! wasm32: device setup and read-back are async and nothing here blocks on a thread.

#[cfg(not(target_arch = "wasm32"))]
pub mod cache;
pub mod engine;
pub mod error;
pub mod formats;
pub mod generate;
pub mod gpu;
pub mod kv;
pub mod mismatch;
pub mod model;
pub mod prompts;
pub mod reference;
pub mod rng;
pub mod sched;
pub mod spec;
pub mod tokenizer;
pub mod trajectory;

pub use error::SproutError;
