//! The block manager: between the scheduler and the [`BlockPool`], the one owner of every
//! sequence's block table and hash chain, and the only code that takes a block from the
//! pool or gives one back. The scheduler decides which sequences run; the manager says
//! whether their blocks are there and hands them out (vLLM's KV cache manager, nano-vllm's
//! block manager).
//!
//! - A sequence's block table maps its positions to blocks: position `p` lives in
//!   `table[p / block_size]`.
//! - Its hash chain names its full blocks in order ([`BlockHash::chain`] over the parent
//!   block's hash, the block's tokens and the weights version). It grows only as far as a
//!   lookup or a computed block needs it, and outlives preemption, so that a recomputed
//!   sequence does not hash its blocks again.
//! - Prefix caching: a sequence being admitted takes the longest run of cached blocks that
//!   its chain names ([`BlockManager::cached_prefix`], [`BlockManager::take_prefix`]); a
//!   block is named in the pool's cache once all its tokens are computed
//!   ([`BlockManager::register_computed`]).
//! - Copy-on-write: a root's samples share all its blocks ([`BlockManager::fork`]); a
//!   sample about to write into a shared block gets a copy of it
//!   ([`BlockManager::allocate`] returns the [`BlockCopy`] for the step to make first).
//! - Blocks go back last first ([`BlockManager::free`], [`BlockManager::truncate`]), so
//!   that the first blocks of a prefix, the likeliest to be hit again, are evicted last.
//!
//! Invariants ([`BlockManager::check`]): the pool's own; a block's reference count equals
//! the number of block tables that hold it; a table covers its sequence's computed tokens;
//! a computed full block that the pool names is named so by its sequence's chain; only
//! live sequences have a table.

use std::collections::{HashMap, HashSet};

use crate::kv::{BlockHash, BlockId, BlockPool};

use super::plan::BlockCopy;
use super::sequence::SeqId;

/// One sequence's blocks and the names of its full ones.
#[derive(Clone, Debug, Default)]
struct SeqTable {
    /// Position `p` lives in `blocks[p / block_size]`.
    blocks: Vec<BlockId>,
    /// The hashes of the sequence's first full blocks, as many as have been needed.
    hashes: Vec<BlockHash>,
    /// What the first block chains on: its request's cache salt ([`BlockHash::salt_root`]),
    /// or nothing.
    root: Option<BlockHash>,
}

impl SeqTable {
    /// Extends the hash chain over the first `blocks` full blocks of `tokens`, under
    /// `weights_version` (the blocks already named keep their names).
    fn extend_chain(
        &mut self,
        tokens: &[u32],
        blocks: usize,
        block_size: usize,
        weights_version: u64,
    ) {
        while self.hashes.len() < blocks {
            let b = self.hashes.len();
            let block = &tokens[b * block_size..(b + 1) * block_size];
            let parent = self.hashes.last().or(self.root.as_ref());
            let hash = BlockHash::chain(parent, block, weights_version);
            self.hashes.push(hash);
        }
    }
}

/// The cached blocks that a sequence's hash chain begins with.
pub(crate) struct CachedPrefix {
    /// The cached blocks, in order, up to the first block that is not cached.
    pub blocks: Vec<BlockId>,
    /// The hash of that first uncached block, if it was looked up.
    pub first_missing: Option<BlockHash>,
}

/// The pool has too few free blocks for what was asked; nothing was taken.
#[derive(Debug)]
pub(crate) struct OutOfBlocks;

pub(crate) struct BlockManager {
    pool: BlockPool,
    block_size: usize,
    /// Whether blocks are named in the pool's cache and looked up there.
    prefix_caching: bool,
    /// The weights the blocks named from now on are computed under.
    weights_version: u64,
    tables: HashMap<SeqId, SeqTable>,
}

impl BlockManager {
    pub fn new(
        num_blocks: usize,
        block_size: usize,
        prefix_caching: bool,
        weights_version: u64,
    ) -> BlockManager {
        BlockManager {
            pool: BlockPool::new(num_blocks),
            block_size,
            prefix_caching,
            weights_version,
            tables: HashMap::new(),
        }
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Names the blocks completed from now on as computed under `version`: blocks computed
    /// under other weights are never a prefix-cache hit for them.
    pub fn set_weights_version(&mut self, version: u64) {
        self.weights_version = version;
    }

    /// Salts sequence `id`, which has no blocks named yet: its chain begins at `root`
    /// ([`BlockHash::salt_root`]), so that it shares blocks only with sequences of the
    /// same salt. Its forks inherit the salt.
    pub fn salt(&mut self, id: SeqId, root: BlockHash) {
        let table = self.tables.entry(id).or_default();
        debug_assert!(
            table.hashes.is_empty(),
            "{id:?} is salted after naming blocks"
        );
        table.root = Some(root);
    }

    /// Sequence `id`'s block table (empty for a sequence that holds no blocks).
    pub fn table(&self, id: SeqId) -> &[BlockId] {
        self.tables.get(&id).map_or(&[], |t| &t.blocks)
    }

    /// The cached blocks that the first `max_blocks` full blocks of sequence `id` (whose
    /// tokens are `tokens`) hit, up to the first miss; none without prefix caching.
    /// Changes no block: [`BlockManager::take_prefix`] takes them.
    pub fn cached_prefix(&mut self, id: SeqId, tokens: &[u32], max_blocks: usize) -> CachedPrefix {
        let mut prefix = CachedPrefix {
            blocks: Vec::new(),
            first_missing: None,
        };
        if !self.prefix_caching {
            return prefix;
        }
        let table = self.tables.entry(id).or_default();
        table.extend_chain(tokens, max_blocks, self.block_size, self.weights_version);
        let hashes = &table.hashes[..max_blocks];
        for hash in hashes {
            match self.pool.lookup(hash) {
                Some(block) => prefix.blocks.push(block),
                None => break,
            }
        }
        prefix.first_missing = hashes.get(prefix.blocks.len()).copied();
        prefix
    }

    /// Starts the table of sequence `id`, which holds no blocks, with the cached `prefix`,
    /// if the pool then still has the free blocks to cover its first `tokens` tokens. All
    /// or nothing: false (and no change) otherwise.
    pub fn take_prefix(&mut self, id: SeqId, prefix: Vec<BlockId>, tokens: usize) -> bool {
        let need = tokens.div_ceil(self.block_size) - prefix.len();
        // A hit on a free block takes it off the free list.
        let free_hits = prefix
            .iter()
            .filter(|&&b| self.pool.ref_count(b) == 0)
            .count();
        if self.pool.num_free() - free_hits < need {
            return false;
        }
        for &b in &prefix {
            self.pool.acquire(b);
        }
        let table = self.tables.entry(id).or_default();
        debug_assert!(table.blocks.is_empty(), "{id:?} is admitted twice");
        table.blocks = prefix;
        true
    }

    /// Gives sequence `id`, whose first `computed` tokens are computed, the blocks for its
    /// next `want` tokens. When the block the first of them goes into is shared (the
    /// partial last block of a forked prompt), the sequence gets a copy of it: the returned
    /// [`BlockCopy`] must run before the step writes. All or nothing: [`OutOfBlocks`] (and
    /// no change) when the pool has too few free blocks.
    pub fn allocate(
        &mut self,
        id: SeqId,
        computed: usize,
        want: usize,
    ) -> Result<Option<BlockCopy>, OutOfBlocks> {
        let bs = self.block_size;
        let table = self.tables.entry(id).or_default();
        let new_blocks = (computed + want)
            .div_ceil(bs)
            .saturating_sub(table.blocks.len());
        let first = computed / bs;
        let shared = table
            .blocks
            .get(first)
            .copied()
            .filter(|&b| self.pool.ref_count(b) > 1);
        if self.pool.num_free() < new_blocks + usize::from(shared.is_some()) {
            return Err(OutOfBlocks);
        }
        let mut taken = Vec::with_capacity(new_blocks);
        for _ in 0..new_blocks {
            taken.push(self.pool.allocate().expect("counted free blocks"));
        }
        let copy = shared.map(|src| {
            let dst = self.pool.allocate().expect("counted free blocks");
            self.pool.release(src);
            BlockCopy { src, dst }
        });
        if let Some(copy) = copy {
            table.blocks[first] = copy.dst;
        }
        table.blocks.extend(taken);
        Ok(copy)
    }

    /// Records that sequence `id` (whose tokens are `tokens`) has computed up to `computed`
    /// tokens, `computed_before` before: every full block this completed is named by its
    /// hash chain, and with prefix caching named in the pool's cache, to be found by later
    /// sequences.
    pub fn register_computed(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        computed_before: usize,
        computed: usize,
    ) {
        let bs = self.block_size;
        let (before, full) = (computed_before / bs, computed / bs);
        if full <= before {
            return;
        }
        let table = self.tables.entry(id).or_default();
        table.extend_chain(tokens, full, bs, self.weights_version);
        if self.prefix_caching {
            let completed = table.blocks[before..full].iter();
            for (&block, &hash) in completed.zip(&table.hashes[before..full]) {
                self.pool.register(block, hash);
            }
        }
    }

    /// The hashes of sequence `id`'s full blocks from the one holding position `computed`
    /// to the last one that `tokens[..upto]` fills: the blocks it has still to compute
    /// whose names are known already. Empty without prefix caching.
    pub fn hashes_to_compute(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        computed: usize,
        upto: usize,
    ) -> Vec<BlockHash> {
        let (from, to) = (computed / self.block_size, upto / self.block_size);
        if !self.prefix_caching || from >= to {
            return Vec::new();
        }
        let table = self.tables.entry(id).or_default();
        table.extend_chain(tokens, to, self.block_size, self.weights_version);
        table.hashes[from..to].to_vec()
    }

    /// Gives sequence `child` a table sharing every block of `parent`'s, and its chain.
    pub fn fork(&mut self, parent: SeqId, child: SeqId) {
        let table = self.tables.get(&parent).cloned().unwrap_or_default();
        for &b in &table.blocks {
            self.pool.acquire(b);
        }
        self.tables.insert(child, table);
    }

    /// Gives back every block of sequence `id` (preempted: it recomputes them later), last
    /// first; its hash chain is kept.
    pub fn free(&mut self, id: SeqId) {
        if let Some(table) = self.tables.get_mut(&id) {
            for b in table.blocks.drain(..).rev() {
                self.pool.release(b);
            }
        }
    }

    /// Gives back every block of sequence `id`, which is gone, last first, and forgets it.
    pub fn remove(&mut self, id: SeqId) {
        self.free(id);
        self.tables.remove(&id);
    }

    /// Gives back the blocks of sequence `id` past those its first `tokens` tokens need,
    /// last first (the blocks only a rejected draft was written into).
    pub fn truncate(&mut self, id: SeqId, tokens: usize) {
        let needed = tokens.div_ceil(self.block_size);
        if let Some(table) = self.tables.get_mut(&id) {
            let keep = needed.min(table.blocks.len());
            for b in table.blocks.drain(keep..).rev() {
                self.pool.release(b);
            }
        }
    }

    /// Forgets the prefix cache's reusable entries (the hashes of free blocks); returns how
    /// many.
    pub fn reset_prefix_cache(&mut self) -> usize {
        self.pool.forget_free_hashes()
    }

    /// Checks the invariants against `computed`, each live sequence with its computed
    /// tokens; describes the first violation.
    pub fn check(&self, computed: impl IntoIterator<Item = (SeqId, usize)>) -> Result<(), String> {
        self.pool.check()?;
        let bs = self.block_size;
        let mut uses = vec![0u32; self.pool.num_blocks()];
        let mut live = HashSet::new();
        let no_table = SeqTable::default();
        for (id, num_computed) in computed {
            live.insert(id);
            let table = self.tables.get(&id).unwrap_or(&no_table);
            for &b in &table.blocks {
                uses[b as usize] += 1;
            }
            let covered = table.blocks.len() * bs;
            if covered < num_computed {
                return Err(format!(
                    "{id:?} has computed {num_computed} tokens but its table covers {covered}"
                ));
            }
            for (b, hash) in table.hashes.iter().enumerate() {
                let Some(&block) = table.blocks.get(b) else {
                    break;
                };
                let computed = (b + 1) * bs <= num_computed;
                match self.pool.hash_of(block) {
                    Some(named) if computed && named != *hash => {
                        return Err(format!(
                            "{id:?} block {b} (id {block}) is named {} but holds {}",
                            named.short(),
                            hash.short()
                        ));
                    }
                    _ => {}
                }
            }
        }
        if let Some(id) = self.tables.keys().find(|id| !live.contains(id)) {
            return Err(format!("{id:?} is gone but still has a block table"));
        }
        for (b, &n) in uses.iter().enumerate() {
            let count = self.pool.ref_count(b as BlockId);
            if count != n {
                return Err(format!(
                    "block {b} has reference count {count} but {n} block-table uses"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: SeqId = SeqId(0);
    const B: SeqId = SeqId(1);

    fn manager(num_blocks: usize) -> BlockManager {
        BlockManager::new(num_blocks, 4, true, 7)
    }

    #[test]
    fn a_fork_shares_every_block_and_its_first_write_copies_the_partial_one() {
        let mut m = manager(8);
        let tokens: Vec<u32> = (1..=6).collect();
        assert_eq!(m.allocate(A, 0, 6).unwrap(), None);
        m.register_computed(A, &tokens, 0, 6);
        m.fork(A, B);
        let (full, partial) = (m.table(A)[0], m.table(A)[1]);
        assert_eq!(m.pool().ref_count(full), 2);
        let copy = m
            .allocate(B, 6, 1)
            .unwrap()
            .expect("the partial block is shared");
        assert_eq!(copy.src, partial);
        assert_eq!(m.table(B), [full, copy.dst]);
        assert_eq!(m.pool().ref_count(partial), 1);
        m.check([(A, 6), (B, 6)]).unwrap();
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut m = manager(2);
        assert!(m.allocate(A, 0, 9).is_err(), "9 tokens need 3 blocks");
        assert!(m.table(A).is_empty());
        assert_eq!(m.pool().num_free(), 2);
        m.check([(A, 0)]).unwrap();
    }

    #[test]
    fn a_later_sequence_takes_the_named_blocks_of_a_gone_one() {
        let mut m = manager(4);
        let tokens: Vec<u32> = (1..=9).collect();
        m.allocate(A, 0, 9).unwrap();
        m.register_computed(A, &tokens, 0, 9);
        let named = m.table(A)[..2].to_vec();
        m.remove(A);
        let prefix = m.cached_prefix(B, &tokens, 2);
        assert_eq!(
            (prefix.blocks.clone(), prefix.first_missing),
            (named.clone(), None)
        );
        assert!(m.take_prefix(B, prefix.blocks, 9), "one more block is free");
        assert_eq!(m.table(B), named);
        m.check([(B, 8)]).unwrap();
    }

    #[test]
    fn truncate_gives_back_the_blocks_past_the_tokens_kept() {
        let mut m = manager(4);
        m.allocate(A, 0, 12).unwrap();
        let kept = m.table(A)[..2].to_vec();
        m.truncate(A, 5);
        assert_eq!(m.table(A), kept);
        assert_eq!(m.pool().num_free(), 2);
        m.check([(A, 5)]).unwrap();
    }

    #[test]
    fn check_finds_a_table_left_by_a_gone_sequence() {
        let mut m = manager(4);
        m.allocate(A, 0, 4).unwrap();
        let err = m.check([]).unwrap_err();
        assert!(err.contains("gone"), "{err}");
    }
}
