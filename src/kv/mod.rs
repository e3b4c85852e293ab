//! The paged KV cache's bookkeeping: which block of the pool holds what, and who uses it.
//!
//! The KV cache is a fixed pool of blocks of `block_size` tokens
//! ([`DEFAULT_BLOCK_SIZE`] by default). The K and V tensors themselves live in GPU
//! buffers owned by the runner; this module owns only the plain data about them, so it
//! never imports wgpu, compiles to wasm32, and is testable on the CPU in microseconds:
//!
//! - [`hash`]: the name of a full block, a hash chain over (parent block's hash, the
//!   block's token ids, weights version) with a specified, stable function (SHA-256).
//!   Two sequences whose prompts share a prefix get the same names for the shared full
//!   blocks, which is how prefix caching finds them.
//! - [`pool`]: the [`BlockPool`]: a reference count per block, a free list in
//!   least-recently-freed order, and the map from [`BlockHash`] to the block holding it.
//!
//! Invariants the pool keeps (checked by [`BlockPool::check`]):
//! - a block is on the free list exactly when its reference count is 0, and at most once;
//! - a freed block keeps its hash and can still be found by [`BlockPool::lookup`] until it
//!   is reused by [`BlockPool::allocate`] (lazy LRU eviction);
//! - every entry of the hash map points at a block whose own hash is that key (a block may
//!   carry a hash that the map does not point at, when another block held it first).

pub mod hash;
pub mod pool;

pub use hash::{BlockHash, block_hashes};
pub use pool::{BlockId, BlockPool};

/// Tokens per KV block unless configured otherwise.
pub const DEFAULT_BLOCK_SIZE: usize = 16;
