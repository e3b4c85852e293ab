//! The block pool: reference counts, the free list, and the prefix cache's hash map.
//!
//! A block is either in use (reference count > 0, owned by one or more sequences' block
//! tables) or free (count 0, on the free list). A free block may still hold a hash: its
//! KV data is intact until the block is reused, so a later sequence with the same prefix
//! can take it back with [`BlockPool::acquire`] instead of recomputing it. Reuse happens
//! in [`BlockPool::allocate`], which takes the least recently freed block and only then
//! forgets its hash (lazy LRU eviction), as vLLM's block pool does.

use std::collections::HashMap;

use super::hash::BlockHash;

/// Index of a block in the pool, `0..num_blocks`.
pub type BlockId = u32;

/// "No block" in the free list's links.
const NIL: u32 = u32::MAX;

/// A fixed number of blocks with reference counts, an index-based doubly linked free list
/// (prev/next arrays of u32, no allocation after [`BlockPool::new`]) in
/// least-recently-freed-first order, and a map from [`BlockHash`] to the block that holds
/// it.
///
/// The free list is what makes eviction LRU: [`BlockPool::release`] appends to the tail,
/// [`BlockPool::allocate`] pops the head, and [`BlockPool::acquire`] unlinks a cache hit
/// from the middle in O(1), which is why it is doubly linked.
#[derive(Clone, Debug)]
pub struct BlockPool {
    ref_counts: Vec<u32>,
    /// The name of each block's contents, if it is a full block that was registered. Kept
    /// while the block is free, cleared when it is reallocated.
    hashes: Vec<Option<BlockHash>>,
    /// Free list links; meaningful only for blocks on the free list.
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Least recently freed block (next to be reused), or NIL.
    head: u32,
    /// Most recently freed block, or NIL.
    tail: u32,
    num_free: usize,
    /// The prefix cache: hash -> the one canonical block holding it (in use or free).
    cached: HashMap<BlockHash, BlockId>,
}

impl BlockPool {
    /// `num_blocks` free, uncached blocks; the free list holds ids 0, 1, ..., n-1 in order.
    ///
    /// Panics if `num_blocks` does not fit below `u32::MAX` (the free list's "none").
    pub fn new(num_blocks: usize) -> BlockPool {
        assert!(
            num_blocks < NIL as usize,
            "a pool holds fewer than {NIL} blocks, asked for {num_blocks}"
        );
        let n = num_blocks as u32;
        // Block i links to i-1 and i+1; the ends link to NIL.
        let prev = (0..n).map(|i| if i == 0 { NIL } else { i - 1 }).collect();
        let next = (0..n)
            .map(|i| if i + 1 == n { NIL } else { i + 1 })
            .collect();
        BlockPool {
            ref_counts: vec![0; num_blocks],
            hashes: vec![None; num_blocks],
            prev,
            next,
            head: if n == 0 { NIL } else { 0 },
            tail: if n == 0 { NIL } else { n - 1 },
            num_free: num_blocks,
            cached: HashMap::new(),
        }
    }

    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks with reference count 0 (cached or not).
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// num_blocks - num_free.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free
    }

    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.ref_counts[id as usize]
    }

    pub fn hash_of(&self, id: BlockId) -> Option<BlockHash> {
        self.hashes[id as usize]
    }

    /// The block that holds `hash`, in use or free-but-cached.
    pub fn lookup(&self, hash: &BlockHash) -> Option<BlockId> {
        self.cached.get(hash).copied()
    }

    /// Takes one more reference on block `id`. If it was free (a cache hit on a freed
    /// block) it leaves the free list, keeping its hash.
    pub fn acquire(&mut self, id: BlockId) {
        if self.ref_counts[id as usize] == 0 {
            self.unlink(id);
        }
        self.ref_counts[id as usize] += 1;
    }

    /// Pops the head of the free list (least recently freed). If that block still holds a
    /// hash, the hash is evicted from the map now (lazy LRU eviction). The block returns
    /// with reference count 1 and no hash. None when no block is free.
    pub fn allocate(&mut self) -> Option<BlockId> {
        if self.head == NIL {
            return None;
        }
        let id = self.head;
        self.unlink(id);
        if let Some(hash) = self.hashes[id as usize].take() {
            // The block may carry a hash that another block holds canonically (its
            // `register` returned false); that entry is not ours to evict.
            if self.cached.get(&hash) == Some(&id) {
                self.cached.remove(&hash);
            }
        }
        self.ref_counts[id as usize] = 1;
        Some(id)
    }

    /// Drops one reference. At zero the block goes to the TAIL of the free list and keeps
    /// its hash, so it can be hit again until it is reused.
    ///
    /// Callers free a finished sequence's blocks in reverse order (last block first): the
    /// prefix blocks, the likeliest to be hit again by another sequence, then sit nearer
    /// the tail and are evicted last.
    ///
    /// Panics (naming the block) on a block whose count is already 0: that is a caller
    /// bug (a double free).
    pub fn release(&mut self, id: BlockId) {
        let count = &mut self.ref_counts[id as usize];
        assert!(
            *count > 0,
            "release of block {id}, whose reference count is already 0"
        );
        *count -= 1;
        if *count == 0 {
            self.push_tail(id);
        }
    }

    /// Names a full block (must be in use): records hash -> id unless the hash already
    /// names some block (then the map does not change: the first holder stays canonical,
    /// as vLLM does), and sets the block's own hash if it had none. Returns true if
    /// recorded.
    ///
    /// Panics if the block is free, or if it already has a different hash: a full block's
    /// contents never change while it is in use, so either is a caller bug.
    pub fn register(&mut self, id: BlockId, hash: BlockHash) -> bool {
        assert!(
            self.ref_counts[id as usize] > 0,
            "register of block {id}, which is free"
        );
        match self.hashes[id as usize] {
            None => self.hashes[id as usize] = Some(hash),
            Some(own) => assert!(
                own == hash,
                "register of block {id} as {}, but it already holds {}",
                hash.short(),
                own.short()
            ),
        }
        if self.cached.contains_key(&hash) {
            return false;
        }
        self.cached.insert(hash, id);
        true
    }

    /// Forgets the hash of every free block (the prefix cache's reusable entries) and
    /// returns how many were forgotten. Blocks in use keep theirs until they are freed and
    /// reused, as their contents are still being read.
    pub fn forget_free_hashes(&mut self) -> usize {
        let mut forgotten = 0;
        for id in 0..self.ref_counts.len() {
            if self.ref_counts[id] > 0 {
                continue;
            }
            if let Some(hash) = self.hashes[id].take() {
                if self.cached.get(&hash) == Some(&(id as BlockId)) {
                    self.cached.remove(&hash);
                }
                forgotten += 1;
            }
        }
        forgotten
    }

    /// Number of cache entries (hash map size).
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    /// Checks the internal invariants and returns a description of the first violation:
    /// the free list (walked both ways) holds exactly the blocks with count 0, each once;
    /// every map entry points at a block whose own hash is that key; num_free matches.
    ///
    /// Allocates and walks the whole pool: for tests and debug assertions, not hot paths.
    pub fn check(&self) -> Result<(), String> {
        let n = self.num_blocks();
        if self.hashes.len() != n || self.prev.len() != n || self.next.len() != n {
            return Err("per-block arrays differ in length".into());
        }

        // Forward walk from the head; a block seen twice means a cycle or a double link.
        let mut seen = vec![false; n];
        let mut forward = Vec::new();
        let (mut at, mut before) = (self.head, NIL);
        while at != NIL {
            if at as usize >= n {
                return Err(format!("free list links to block {at}, out of range"));
            }
            if seen[at as usize] {
                return Err(format!("block {at} is on the free list twice"));
            }
            seen[at as usize] = true;
            if self.prev[at as usize] != before {
                return Err(format!(
                    "block {at}: prev is {}, expected {before}",
                    self.prev[at as usize]
                ));
            }
            forward.push(at);
            before = at;
            at = self.next[at as usize];
        }
        if self.tail != before {
            return Err(format!(
                "tail is {}, but the forward walk ends at {before}",
                self.tail
            ));
        }

        // Backward walk from the tail must visit the same blocks in reverse.
        let mut backward = Vec::new();
        let mut at = self.tail;
        while at != NIL && backward.len() <= forward.len() {
            if at as usize >= n {
                return Err(format!("free list links back to block {at}, out of range"));
            }
            backward.push(at);
            at = self.prev[at as usize];
        }
        backward.reverse();
        if backward != forward {
            return Err(format!(
                "free list walked forward {forward:?} but backward {backward:?}"
            ));
        }

        for (id, &count) in self.ref_counts.iter().enumerate() {
            if (count == 0) != seen[id] {
                return Err(format!(
                    "block {id} has reference count {count} but is {} the free list",
                    if seen[id] { "on" } else { "not on" }
                ));
            }
        }
        if forward.len() != self.num_free {
            return Err(format!(
                "num_free is {}, but the free list holds {}",
                self.num_free,
                forward.len()
            ));
        }

        for (hash, &id) in &self.cached {
            if id as usize >= n {
                return Err(format!("{} maps to block {id}, out of range", hash.short()));
            }
            if self.hashes[id as usize] != Some(*hash) {
                return Err(format!(
                    "{} maps to block {id}, whose own hash is {:?}",
                    hash.short(),
                    self.hashes[id as usize].map(|h| h.short())
                ));
            }
        }
        Ok(())
    }

    /// Takes block `id` (which must be on the free list) out of the free list.
    fn unlink(&mut self, id: BlockId) {
        let (prev, next) = (self.prev[id as usize], self.next[id as usize]);
        if prev == NIL {
            self.head = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.prev[next as usize] = prev;
        }
        self.prev[id as usize] = NIL;
        self.next[id as usize] = NIL;
        self.num_free -= 1;
    }

    /// Appends block `id` (which must not be on the free list) at the tail.
    fn push_tail(&mut self, id: BlockId) {
        self.prev[id as usize] = self.tail;
        self.next[id as usize] = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.num_free += 1;
    }
}
