//! A picture of the KV block pool at one moment, for displays such as the web demo: which
//! blocks a request's samples share, which belong to one sequence alone, which are free
//! but still hold a cached prefix, and which are free and empty.
//!
//! Plain data, built from the scheduler's block tables and the pool's reference counts and
//! hashes; nothing here changes the scheduler.

use serde::Serialize;

use crate::kv::{BlockId, BlockPool};

/// One unfinished sequence's block table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SeqBlocks {
    /// The index the caller gave its request.
    pub request_index: u32,
    /// Its sample, or `None` for the root of a request that has not forked into samples.
    pub sample: Option<u32>,
    pub blocks: Vec<BlockId>,
}

/// What one block of the pool holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "use", rename_all = "snake_case")]
pub enum BlockUse {
    /// Free, with nothing worth keeping.
    Free,
    /// Free, but still holding a full block of a prefix that a later request can take back.
    Cached,
    /// In the block table of exactly one sequence.
    Private {
        request_index: u32,
        sample: Option<u32>,
    },
    /// In the block tables of `tables` sequences (a group's shared prompt, or a cached
    /// prefix another request reuses).
    Shared { tables: u32 },
}

/// The use of every block of `pool`, by id, given every unfinished sequence's table.
pub fn block_map(pool: &BlockPool, tables: &[SeqBlocks]) -> Vec<BlockUse> {
    let mut uses: Vec<BlockUse> = (0..pool.num_blocks() as BlockId)
        .map(|id| match pool.hash_of(id) {
            Some(_) if pool.ref_count(id) == 0 => BlockUse::Cached,
            _ => BlockUse::Free,
        })
        .collect();
    for table in tables {
        for &id in &table.blocks {
            let slot = &mut uses[id as usize];
            *slot = match *slot {
                BlockUse::Free | BlockUse::Cached => BlockUse::Private {
                    request_index: table.request_index,
                    sample: table.sample,
                },
                BlockUse::Private { .. } => BlockUse::Shared { tables: 2 },
                BlockUse::Shared { tables } => BlockUse::Shared { tables: tables + 1 },
            };
        }
    }
    uses
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::BlockHash;

    fn table(request_index: u32, sample: Option<u32>, blocks: &[BlockId]) -> SeqBlocks {
        SeqBlocks {
            request_index,
            sample,
            blocks: blocks.to_vec(),
        }
    }

    #[test]
    fn shared_private_cached_and_free_blocks_are_told_apart() {
        let mut pool = BlockPool::new(6);
        let a = pool.allocate().unwrap(); // 0: the shared prompt block
        pool.acquire(a);
        let b = pool.allocate().unwrap(); // 1: sample 0's own block
        let c = pool.allocate().unwrap(); // 2: sample 1's own block
        let d = pool.allocate().unwrap(); // 3: a finished request's cached block
        assert!(pool.register(d, BlockHash::chain(None, &[1, 2], 0)));
        pool.release(d);
        let tables = [table(0, Some(0), &[a, b]), table(0, Some(1), &[a, c])];
        let map = block_map(&pool, &tables);
        assert_eq!(map[0], BlockUse::Shared { tables: 2 });
        assert_eq!(
            map[1],
            BlockUse::Private {
                request_index: 0,
                sample: Some(0)
            }
        );
        assert_eq!(
            map[2],
            BlockUse::Private {
                request_index: 0,
                sample: Some(1)
            }
        );
        assert_eq!(map[3], BlockUse::Cached);
        assert_eq!(map[4..], [BlockUse::Free, BlockUse::Free]);
        let json = serde_json::to_string(&map[0]).unwrap();
        assert_eq!(json, r#"{"use":"shared","tables":2}"#);
    }
}
