//! The paged KV block pool and the block hash chain, in the style of vLLM's block pool
//! tests: exact ids, exact eviction order, and a model-based property test.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;
use sprout::kv::{BlockHash, BlockId, BlockPool, DEFAULT_BLOCK_SIZE, block_hashes};

/// A made-up block name for pool tests (the pool does not care how it was computed).
fn h(k: u8) -> BlockHash {
    BlockHash([k; 32])
}

fn hex(hash: &BlockHash) -> String {
    hash.0.iter().map(|b| format!("{b:02x}")).collect()
}

fn allocate_n(pool: &mut BlockPool, n: usize) -> Vec<BlockId> {
    (0..n)
        .map(|_| pool.allocate().expect("a free block"))
        .collect()
}

#[test]
fn new_pool_is_all_free_and_uncached() {
    let pool = BlockPool::new(4);
    assert_eq!(pool.num_blocks(), 4);
    assert_eq!(pool.num_free(), 4);
    assert_eq!(pool.num_used(), 0);
    assert_eq!(pool.num_cached(), 0);
    for id in 0..4 {
        assert_eq!(pool.ref_count(id), 0);
        assert_eq!(pool.hash_of(id), None);
    }
    pool.check().unwrap();
    BlockPool::new(0).check().unwrap();
}

#[test]
fn allocate_returns_ids_in_order() {
    let mut pool = BlockPool::new(5);
    assert_eq!(allocate_n(&mut pool, 5), vec![0, 1, 2, 3, 4]);
    for id in 0..5 {
        assert_eq!(pool.ref_count(id), 1);
    }
    assert_eq!(pool.num_used(), 5);
    assert_eq!(pool.num_free(), 0);
    pool.check().unwrap();
}

#[test]
fn allocate_past_pool_returns_none() {
    let mut pool = BlockPool::new(2);
    allocate_n(&mut pool, 2);
    assert_eq!(pool.allocate(), None);
    assert_eq!(pool.allocate(), None);
    pool.release(1);
    assert_eq!(pool.allocate(), Some(1));
    assert_eq!(pool.allocate(), None);
    assert_eq!(BlockPool::new(0).allocate(), None);
    pool.check().unwrap();
}

#[test]
fn free_then_allocate_returns_least_recently_freed_first() {
    let mut pool = BlockPool::new(6);
    allocate_n(&mut pool, 6);
    for id in [3, 0, 5, 1] {
        pool.release(id);
        pool.check().unwrap();
    }
    assert_eq!(pool.num_free(), 4);
    assert_eq!(allocate_n(&mut pool, 4), vec![3, 0, 5, 1]);
    assert_eq!(pool.allocate(), None);
    pool.check().unwrap();
}

#[test]
fn release_keeps_block_until_last_reference() {
    let mut pool = BlockPool::new(3);
    let id = pool.allocate().unwrap();
    pool.acquire(id);
    assert_eq!(pool.ref_count(id), 2);
    pool.release(id);
    assert_eq!(pool.ref_count(id), 1);
    assert_eq!(pool.num_free(), 2);
    pool.release(id);
    assert_eq!(pool.ref_count(id), 0);
    assert_eq!(pool.num_free(), 3);
    pool.check().unwrap();
    // Untouched blocks 1 and 2 were freed before block 0, so they are reused first.
    assert_eq!(allocate_n(&mut pool, 3), vec![1, 2, 0]);
}

#[test]
fn reverse_order_free_evicts_tail_blocks_first() {
    // Two sequences of three full, named blocks each. Freed last block first, each
    // sequence's prefix block is the last of its blocks to be evicted.
    let mut pool = BlockPool::new(6);
    let a = allocate_n(&mut pool, 3);
    let b = allocate_n(&mut pool, 3);
    for (i, &id) in a.iter().chain(&b).enumerate() {
        assert!(pool.register(id, h(i as u8)));
    }
    for &id in a.iter().rev().chain(b.iter().rev()) {
        pool.release(id);
    }
    pool.check().unwrap();
    assert_eq!(pool.num_cached(), 6);

    // Eviction order: a's blocks 2, 1, 0, then b's blocks 5, 4, 3.
    let expected: [BlockId; 6] = [2, 1, 0, 5, 4, 3];
    for (n, &want) in expected.iter().enumerate() {
        assert_eq!(pool.allocate(), Some(want));
        assert_eq!(
            pool.lookup(&h(want as u8)),
            None,
            "hash of block {want} evicted"
        );
        assert_eq!(pool.num_cached(), 5 - n);
        pool.check().unwrap();
    }
}

#[test]
fn freed_cached_block_is_hit_and_acquire_takes_it_off_free_list() {
    let mut pool = BlockPool::new(4);
    let ids = allocate_n(&mut pool, 3);
    assert!(pool.register(ids[0], h(7)));
    for &id in ids.iter().rev() {
        pool.release(id);
    }
    // Free list now: 3, 2, 1, 0. Block 0 is free but still named.
    assert_eq!(pool.lookup(&h(7)), Some(0));
    assert_eq!(pool.hash_of(0), Some(h(7)));
    assert_eq!(pool.num_free(), 4);

    pool.acquire(0);
    assert_eq!(pool.ref_count(0), 1);
    assert_eq!(pool.num_free(), 3);
    assert_eq!(
        pool.hash_of(0),
        Some(h(7)),
        "a cache hit keeps the block's hash"
    );
    assert_eq!(pool.lookup(&h(7)), Some(0));
    pool.check().unwrap();

    // The next allocations skip the acquired block.
    assert_eq!(allocate_n(&mut pool, 3), vec![3, 2, 1]);
    assert_eq!(pool.allocate(), None);
    assert_eq!(pool.lookup(&h(7)), Some(0));
    pool.check().unwrap();
}

#[test]
fn forgetting_free_hashes_keeps_the_blocks_in_use_named() {
    let mut pool = BlockPool::new(4);
    let ids = allocate_n(&mut pool, 3);
    for (k, &id) in ids.iter().enumerate() {
        assert!(pool.register(id, h(k as u8)));
    }
    pool.release(ids[0]);
    pool.release(ids[1]);
    assert_eq!(pool.forget_free_hashes(), 2);
    assert_eq!((pool.lookup(&h(0)), pool.lookup(&h(1))), (None, None));
    assert_eq!(pool.hash_of(ids[0]), None);
    assert_eq!(pool.lookup(&h(2)), Some(ids[2]), "in use: still named");
    assert_eq!(pool.num_free(), 3, "the blocks themselves stay free");
    pool.check().unwrap();
    assert_eq!(pool.forget_free_hashes(), 0);
}

#[test]
fn acquire_of_head_and_tail_of_free_list() {
    let mut pool = BlockPool::new(3);
    pool.acquire(0); // head
    pool.acquire(2); // tail
    pool.check().unwrap();
    assert_eq!(pool.num_free(), 1);
    assert_eq!(pool.allocate(), Some(1));
    assert_eq!(pool.allocate(), None);
    pool.check().unwrap();
}

#[test]
fn eviction_removes_only_the_evicted_hash() {
    let mut pool = BlockPool::new(3);
    let ids = allocate_n(&mut pool, 3);
    for &id in &ids {
        assert!(pool.register(id, h(10 + id as u8)));
    }
    pool.release(1);
    pool.release(2);
    // Block 1 is the least recently freed: reusing it forgets its hash, and only its.
    assert_eq!(pool.allocate(), Some(1));
    assert_eq!(pool.hash_of(1), None);
    assert_eq!(pool.lookup(&h(11)), None);
    assert_eq!(pool.lookup(&h(10)), Some(0));
    assert_eq!(pool.lookup(&h(12)), Some(2));
    assert_eq!(pool.num_cached(), 2);
    pool.check().unwrap();
}

#[test]
fn register_duplicate_hash_keeps_first_holder() {
    let mut pool = BlockPool::new(3);
    let ids = allocate_n(&mut pool, 2);
    assert!(pool.register(ids[0], h(1)));
    assert!(
        !pool.register(ids[1], h(1)),
        "the hash already names block 0"
    );
    assert_eq!(pool.lookup(&h(1)), Some(0));
    assert_eq!(pool.num_cached(), 1);
    // The duplicate still knows what it holds, though the map does not point at it.
    assert_eq!(pool.hash_of(1), Some(h(1)));
    // Registering the canonical block again changes nothing.
    assert!(!pool.register(ids[0], h(1)));
    assert_eq!(pool.lookup(&h(1)), Some(0));
    pool.check().unwrap();
}

#[test]
fn evicting_a_duplicate_holder_keeps_the_canonical_entry() {
    let mut pool = BlockPool::new(2);
    let ids = allocate_n(&mut pool, 2);
    assert!(pool.register(ids[0], h(1)));
    assert!(!pool.register(ids[1], h(1)));
    pool.release(1);
    // Reusing block 1 must not remove the entry, which belongs to block 0.
    assert_eq!(pool.allocate(), Some(1));
    assert_eq!(pool.hash_of(1), None);
    assert_eq!(pool.lookup(&h(1)), Some(0));
    pool.check().unwrap();
}

#[test]
fn duplicate_holder_can_take_over_after_the_canonical_block_is_evicted() {
    let mut pool = BlockPool::new(2);
    let ids = allocate_n(&mut pool, 2);
    assert!(pool.register(ids[0], h(1)));
    assert!(!pool.register(ids[1], h(1)));
    pool.release(0);
    assert_eq!(pool.allocate(), Some(0)); // evicts h(1)
    assert_eq!(pool.lookup(&h(1)), None);
    assert!(pool.register(ids[1], h(1)));
    assert_eq!(pool.lookup(&h(1)), Some(1));
    pool.check().unwrap();
}

#[test]
#[should_panic(expected = "block 1")]
fn release_of_free_block_panics() {
    let mut pool = BlockPool::new(2);
    let id = allocate_n(&mut pool, 2)[1];
    pool.release(id);
    pool.release(id);
}

#[test]
#[should_panic(expected = "block 0")]
fn register_of_free_block_panics() {
    let mut pool = BlockPool::new(1);
    pool.register(0, h(1));
}

#[test]
fn hash_chain_is_pinned() {
    // The hash chain is a specification (see BlockHash::chain); these values were
    // computed once, independently (Python hashlib over the documented byte layout).
    let one = BlockHash::chain(None, &[1, 2, 3], 0);
    assert_eq!(
        hex(&one),
        "8cbabbc450f04e223de9739d42b62cb65177aa845fd5d59dbf41f5ade43ce07e"
    );
    assert_eq!(one.short(), "8cbabbc450f04e22");

    let chain = block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, 0);
    assert_eq!(chain.len(), 2);
    assert_eq!(
        hex(&chain[0]),
        "ce7f5fd9941c52df4ea4288fdc7f849b26a72808517f159002ffd81f84ce54b7"
    );
    assert_eq!(
        hex(&chain[1]),
        "ae3a746cb0fe6a12df5f8ade630fc5125ea3869c6fcfc4bef26d5fe98bf04e49"
    );
    assert_eq!(chain[0], BlockHash::chain(None, &[1, 2, 3, 4], 0));
    assert_eq!(
        chain[1],
        BlockHash::chain(Some(&chain[0]), &[5, 6, 7, 8], 0)
    );
}

#[test]
fn hash_chain_depends_on_weights_version_tokens_and_parent() {
    let base = BlockHash::chain(None, &[1, 2, 3], 0);
    assert_eq!(base, BlockHash::chain(None, &[1, 2, 3], 0), "deterministic");
    assert_ne!(
        base,
        BlockHash::chain(None, &[1, 2, 3], 1),
        "weights version"
    );
    assert_ne!(base, BlockHash::chain(None, &[1, 2, 4], 0), "a token");
    assert_ne!(base, BlockHash::chain(None, &[3, 2, 1], 0), "token order");
    assert_ne!(base, BlockHash::chain(None, &[1, 2], 0), "token count");
    let parent = BlockHash::chain(None, &[9], 0);
    assert_ne!(
        base,
        BlockHash::chain(Some(&parent), &[1, 2, 3], 0),
        "a parent"
    );
    // An explicit all-zero parent is the documented stand-in for "no parent".
    assert_eq!(
        base,
        BlockHash::chain(Some(&BlockHash([0; 32])), &[1, 2, 3], 0)
    );

    // A change in an early block changes every later block's name.
    let a = block_hashes(&[1, 2, 3, 4, 5, 6], 2, 0);
    let b = block_hashes(&[0, 2, 3, 4, 5, 6], 2, 0);
    assert!(a.iter().zip(&b).all(|(x, y)| x != y));
}

#[test]
fn block_hashes_ignores_partial_tail() {
    let tokens: Vec<u32> = (0..(2 * DEFAULT_BLOCK_SIZE as u32 + 5)).collect();
    let full = block_hashes(&tokens[..2 * DEFAULT_BLOCK_SIZE], DEFAULT_BLOCK_SIZE, 3);
    assert_eq!(full.len(), 2);
    assert_eq!(block_hashes(&tokens, DEFAULT_BLOCK_SIZE, 3), full);
    assert!(block_hashes(&tokens[..DEFAULT_BLOCK_SIZE - 1], DEFAULT_BLOCK_SIZE, 3).is_empty());
    assert!(block_hashes(&[], DEFAULT_BLOCK_SIZE, 3).is_empty());
}

/// One step of the property test. Indices select among the blocks that make the step
/// legal, so every generated sequence is valid.
#[derive(Clone, Debug)]
enum Op {
    Allocate,
    /// Acquire any block, free or in use.
    Acquire(usize),
    /// Look a hash up and acquire its block on a hit (a prefix-cache hit).
    AcquireHit(u8),
    /// Release an in-use block.
    Release(usize),
    /// Register an in-use block (under its own hash if it has one already).
    Register(usize, u8),
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct hashes, so duplicates and hits are common.
    prop_oneof![
        3 => Just(Op::Allocate),
        1 => any::<usize>().prop_map(Op::Acquire),
        2 => (0u8..6).prop_map(Op::AcquireHit),
        3 => any::<usize>().prop_map(Op::Release),
        2 => (any::<usize>(), 0u8..6).prop_map(|(i, k)| Op::Register(i, k)),
    ]
}

/// The obvious implementation: the free list as a VecDeque in LRU order.
struct Model {
    refs: Vec<u32>,
    hashes: Vec<Option<BlockHash>>,
    free: VecDeque<BlockId>,
    map: HashMap<BlockHash, BlockId>,
}

impl Model {
    fn new(n: usize) -> Model {
        Model {
            refs: vec![0; n],
            hashes: vec![None; n],
            free: (0..n as BlockId).collect(),
            map: HashMap::new(),
        }
    }

    fn in_use(&self) -> Vec<BlockId> {
        (0..self.refs.len() as BlockId)
            .filter(|&id| self.refs[id as usize] > 0)
            .collect()
    }

    fn allocate(&mut self) -> Option<BlockId> {
        let id = self.free.pop_front()?;
        if let Some(hash) = self.hashes[id as usize].take()
            && self.map.get(&hash) == Some(&id)
        {
            self.map.remove(&hash);
        }
        self.refs[id as usize] = 1;
        Some(id)
    }

    fn acquire(&mut self, id: BlockId) {
        if self.refs[id as usize] == 0 {
            self.free.retain(|&f| f != id);
        }
        self.refs[id as usize] += 1;
    }

    fn release(&mut self, id: BlockId) {
        self.refs[id as usize] -= 1;
        if self.refs[id as usize] == 0 {
            self.free.push_back(id);
        }
    }

    fn register(&mut self, id: BlockId, hash: BlockHash) -> bool {
        self.hashes[id as usize].get_or_insert(hash);
        if self.map.contains_key(&hash) {
            return false;
        }
        self.map.insert(hash, id);
        true
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_operations_match_model(n in 1usize..8, ops in prop::collection::vec(op(), 0..200)) {
        let mut pool = BlockPool::new(n);
        let mut model = Model::new(n);
        for op in ops {
            match op {
                Op::Allocate => prop_assert_eq!(pool.allocate(), model.allocate()),
                Op::Acquire(i) => {
                    let id = (i % n) as BlockId;
                    pool.acquire(id);
                    model.acquire(id);
                }
                Op::AcquireHit(k) => {
                    let found = pool.lookup(&h(k));
                    prop_assert_eq!(found, model.map.get(&h(k)).copied());
                    if let Some(id) = found {
                        pool.acquire(id);
                        model.acquire(id);
                    }
                }
                Op::Release(i) => {
                    let used = model.in_use();
                    if !used.is_empty() {
                        let id = used[i % used.len()];
                        pool.release(id);
                        model.release(id);
                    }
                }
                Op::Register(i, k) => {
                    let used = model.in_use();
                    if !used.is_empty() {
                        let id = used[i % used.len()];
                        let hash = model.hashes[id as usize].unwrap_or(h(k));
                        prop_assert_eq!(pool.register(id, hash), model.register(id, hash));
                    }
                }
            }
            if let Err(violation) = pool.check() {
                return Err(TestCaseError::fail(format!("after {op:?}: {violation}")));
            }
            for id in 0..n as BlockId {
                prop_assert_eq!(pool.ref_count(id), model.refs[id as usize]);
                prop_assert_eq!(pool.hash_of(id), model.hashes[id as usize]);
            }
            prop_assert_eq!(pool.num_free(), model.free.len());
            prop_assert_eq!(pool.num_used(), n - model.free.len());
            prop_assert_eq!(pool.num_cached(), model.map.len());
            for k in 0..6 {
                prop_assert_eq!(pool.lookup(&h(k)), model.map.get(&h(k)).copied());
            }
        }
    }
}
