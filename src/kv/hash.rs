//! Names of full KV blocks: a hash chain over the token ids, stable across runs and
//! platforms, so that a prefix computed once can be found again by any later sequence.

use sha2::{Digest, Sha256};

/// Domain separation tag, first in every block hash. Bump the version if the layout of
/// the hashed bytes ever changes, so that old and new names can never collide.
const DOMAIN_TAG: &[u8] = b"sprout-kv-block-v1";

/// Domain separation tag of a cache salt's root (see [`BlockHash::salt_root`]).
const SALT_TAG: &[u8] = b"sprout-kv-salt-v1";

/// Domain separation tag of a LoRA adapter's root (see [`BlockHash::lora_root`]).
const LORA_TAG: &[u8] = b"sprout-kv-lora-v1";

/// The name of a full KV block: its contents (tokens and everything before them) under one
/// weights version. See [`BlockHash::chain`] for the exact definition.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct BlockHash(pub [u8; 32]);

impl BlockHash {
    /// The name of a full block: SHA-256 over the concatenation of
    ///
    /// 1. the domain tag, the 18 ASCII bytes `b"sprout-kv-block-v1"`;
    /// 2. the parent block's hash, 32 bytes (32 zero bytes for the first block of a
    ///    sequence, `parent == None`);
    /// 3. `weights_version` as a `u64`, little-endian (8 bytes);
    /// 4. the number of tokens as a `u32`, little-endian (4 bytes);
    /// 5. each token id as a `u32`, little-endian (4 bytes each), in order.
    ///
    /// This is a specification, not an implementation detail: the result is the same on
    /// every run and every platform (it never uses `DefaultHasher`), so block names can be
    /// logged, compared across processes and pinned in tests. Chaining through the parent
    /// makes a block's name depend on the whole prefix, not just its own tokens, and the
    /// weights version keeps KV computed under old weights from being reused after an
    /// update.
    pub fn chain(parent: Option<&BlockHash>, tokens: &[u32], weights_version: u64) -> BlockHash {
        let tokens_len = u32::try_from(tokens.len()).expect("a block holds fewer than 2^32 tokens");
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN_TAG);
        hasher.update(parent.map_or([0u8; 32], |p| p.0));
        hasher.update(weights_version.to_le_bytes());
        hasher.update(tokens_len.to_le_bytes());
        for &token in tokens {
            hasher.update(token.to_le_bytes());
        }
        BlockHash(hasher.finalize().into())
    }

    /// The parent that a salted sequence's first block chains on, in place of the 32 zero
    /// bytes: SHA-256 over the 17 ASCII bytes `b"sprout-kv-salt-v1"`, the salt's length in
    /// bytes as a `u32` (little-endian) and its UTF-8 bytes. Sequences with different
    /// salts (or one salted and one not) name every block differently, so they never share
    /// a cached block (vLLM's `cache_salt`); equal salts share as unsalted sequences do.
    pub fn salt_root(salt: &str) -> BlockHash {
        let len = u32::try_from(salt.len()).expect("a salt is shorter than 4 GiB");
        let mut hasher = Sha256::new();
        hasher.update(SALT_TAG);
        hasher.update(len.to_le_bytes());
        hasher.update(salt.as_bytes());
        BlockHash(hasher.finalize().into())
    }

    /// The parent that the first block of a sequence run with a LoRA adapter chains on:
    /// SHA-256 over the 17 ASCII bytes `b"sprout-kv-lora-v1"`, `parent`'s 32 bytes (the
    /// salt's root, or 32 zero bytes), the adapter's version as a `u64` (little-endian),
    /// the length of `digest` in bytes as a `u32` (little-endian) and its UTF-8 bytes
    /// (the adapter's contents' digest). Sequences run with different adapters, or
    /// different versions of one, or one with and one without, never share a block.
    pub fn lora_root(parent: Option<&BlockHash>, digest: &str, version: u64) -> BlockHash {
        let len = u32::try_from(digest.len()).expect("a digest is shorter than 4 GiB");
        let mut hasher = Sha256::new();
        hasher.update(LORA_TAG);
        hasher.update(parent.map_or([0u8; 32], |p| p.0));
        hasher.update(version.to_le_bytes());
        hasher.update(len.to_le_bytes());
        hasher.update(digest.as_bytes());
        BlockHash(hasher.finalize().into())
    }

    /// Short lowercase hex of the first 8 bytes (16 characters), for logs and debugging.
    pub fn short(&self) -> String {
        self.0[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The hash chain of every FULL block of `tokens`: `tokens.len() / block_size` hashes, the
/// first with no parent and each later one chained on the one before. The partial tail
/// block (if any) has no name yet: its contents may still grow.
///
/// Panics if `block_size` is 0.
pub fn block_hashes(tokens: &[u32], block_size: usize, weights_version: u64) -> Vec<BlockHash> {
    assert!(block_size > 0, "block_size must be positive");
    let mut hashes: Vec<BlockHash> = Vec::with_capacity(tokens.len() / block_size);
    for block in tokens.chunks_exact(block_size) {
        let hash = BlockHash::chain(hashes.last(), block, weights_version);
        hashes.push(hash);
    }
    hashes
}
