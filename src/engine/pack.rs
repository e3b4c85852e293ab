//! Packing a [`StepPlan`] into the flat arrays the forward pass reads: plain data, tested
//! on the CPU. The one packer: the engine's steps and teacher-forced passes over a whole
//! sequence ([`PackedBatch::whole_sequence`], `crate::generate`) both go through it.

use crate::gpu::kernels::RowInfo;
use crate::gpu::kernels::attention::{AttentionPlan, AttentionSplit};
use std::sync::Arc;

use crate::sched::{Chunk, SeqId, StepPlan, TokenAdjust};

/// One step's inputs, row by row in chunk order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PackedBatch {
    pub ids: Vec<u32>,
    /// Per row: the offset of its sequence's table in `block_tables`, its position, and the
    /// pool row its K and V go to (`block * block_size + position % block_size`).
    pub rowinfo: Vec<RowInfo>,
    pub block_tables: Vec<u32>,
    /// Which workgroups compute which rows' attention: decode rows split across pages when
    /// `split` asks for it, other rows whole.
    pub attention: AttentionPlan,
    /// The rows whose logits are computed: every row that draws (the last of a chunk, or
    /// each row of a chunk with a draft) or scores a target, in batch order.
    pub logit_rows: Vec<u32>,
    /// Per draw of the plan, the index into `logit_rows` it draws from (the G draws of a
    /// group's prompt share one).
    pub draw_rows: Vec<u32>,
    /// Per target of the plan, the index into `logit_rows` that scores it.
    pub target_rows: Vec<u32>,
    /// (logits row, token) pairs whose logit is masked before drawing: each drawing row's
    /// forbidden tokens, once per row.
    pub masked: Vec<[u32; 2]>,
    /// (logits row, adjustment): each drawing row's bias and penalties, once per row.
    pub adjusts: Vec<(u32, TokenAdjust)>,
    /// (logits row, its allow-list): the rows that may draw only some tokens, once each.
    pub keep_only: Vec<(u32, Arc<[u32]>)>,
    /// Per logits row, how many alternatives to return (the most any of its draws asks).
    pub top_counts: Vec<u32>,
    /// Rows run with the LoRA adapter (their `RowInfo::adapter` is 1).
    pub lora_rows: usize,
}

impl PackedBatch {
    /// One whole sequence `ids` in blocks `0, 1, ...` of a pool of its own, every row's
    /// logits wanted: a teacher-forced pass (scoring, or the logits of every position),
    /// with the LoRA adapter when `lora`.
    pub fn whole_sequence(ids: &[u32], block_size: usize, lora: bool) -> PackedBatch {
        let blocks = ids.len().div_ceil(block_size) as u32;
        let plan = StepPlan {
            chunks: vec![Chunk {
                seq: SeqId(0),
                start: 0,
                tokens: ids.to_vec(),
                block_table: (0..blocks).collect(),
                is_prefill: true,
                drafted: 0,
                lora,
            }],
            ..StepPlan::default()
        };
        let mut batch = PackedBatch::default();
        batch.pack(&plan, block_size, AttentionSplit::Whole);
        batch.logit_rows = (0..ids.len() as u32).collect();
        batch
    }

    /// Packs `plan`, reusing this batch's allocations.
    pub fn pack(&mut self, plan: &StepPlan, block_size: usize, split: AttentionSplit) {
        self.ids.clear();
        self.rowinfo.clear();
        self.block_tables.clear();
        self.logit_rows.clear();
        self.draw_rows.clear();
        self.target_rows.clear();
        self.masked.clear();
        self.adjusts.clear();
        self.keep_only.clear();
        self.top_counts.clear();
        self.lora_rows = 0;
        // (chunk, row within it) of every row that needs logits, in batch order.
        let mut wanted: Vec<(usize, usize)> = plan
            .draws
            .iter()
            .map(|d| (d.chunk, d.offset))
            .chain(plan.targets.iter().map(|t| (t.chunk, t.offset)))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        for chunk in &plan.chunks {
            let offset = self.block_tables.len() as u32;
            self.block_tables.extend_from_slice(&chunk.block_table);
            for (i, &id) in chunk.tokens.iter().enumerate() {
                let pos = chunk.start + i;
                let block = chunk.block_table[pos / block_size] as usize;
                let slot = (block * block_size + pos % block_size) as u32;
                self.ids.push(id);
                let info = RowInfo::new(offset, pos as u32, slot);
                self.rowinfo.push(info.with_adapter(chunk.lora as u32));
            }
            if chunk.lora {
                self.lora_rows += chunk.tokens.len();
            }
        }
        let split_decodes = split == AttentionSplit::DecodePages;
        self.attention.build(plan.chunks.iter().flat_map(|chunk| {
            let decode = split_decodes && chunk.tokens.len() == 1;
            (0..chunk.tokens.len()).map(move |i| ((chunk.start + i + 1) as u32, decode))
        }));
        // Where each chunk's first row sits in the batch.
        let mut first_row = Vec::with_capacity(plan.chunks.len());
        let mut at = 0u32;
        for chunk in &plan.chunks {
            first_row.push(at);
            at += chunk.tokens.len() as u32;
        }
        self.logit_rows
            .extend(wanted.iter().map(|&(c, i)| first_row[c] + i as u32));
        let index = |key: (usize, usize)| wanted.binary_search(&key).expect("collected") as u32;
        for d in &plan.draws {
            self.draw_rows.push(index((d.chunk, d.offset)));
        }
        for t in &plan.targets {
            self.target_rows.push(index((t.chunk, t.offset)));
        }
        self.top_counts.resize(self.logit_rows.len(), 0);
        for (t, &row) in plan.targets.iter().zip(&self.target_rows) {
            let count = &mut self.top_counts[row as usize];
            *count = (*count).max(t.top_logprobs as u32);
        }
        // The draws of one row share its processing (they are consecutive in the plan).
        let mut processed_row = None;
        for (d, &row) in plan.draws.iter().zip(&self.draw_rows) {
            let count = &mut self.top_counts[row as usize];
            *count = (*count).max(d.top_logprobs as u32);
            let p = &d.processing;
            if p.is_empty() || processed_row == Some(row) {
                continue;
            }
            processed_row = Some(row);
            self.masked.extend(p.forbidden.iter().map(|&t| [row, t]));
            self.adjusts.extend(p.adjusts.iter().map(|&a| (row, a)));
            if let Some(allowed) = &p.allowed {
                self.keep_only.push((row, allowed.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{Chunk, Draw, RequestId, RowProcessing, SeqId, Target};

    fn draw(chunk: usize, offset: usize, sample_index: u32) -> Draw {
        Draw {
            chunk,
            offset,
            request: RequestId(0),
            request_index: 0,
            sample_index,
            key_index: 0,
            position: 0,
            seed: 0,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            processing: Arc::default(),
            top_logprobs: 0,
        }
    }

    #[test]
    fn packs_prefill_and_decode_rows_with_their_tables() {
        let adjust = TokenAdjust {
            token: 4,
            bias: 1.5,
            repetition: 1.0,
            subtract: 0.0,
        };
        let processing = Arc::new(RowProcessing {
            forbidden: vec![2, 9],
            allowed: Some(Arc::from(vec![2, 4, 6])),
            adjusts: vec![adjust],
        });
        let plan = StepPlan {
            copies: vec![],
            chunks: vec![
                Chunk {
                    seq: SeqId(0),
                    start: 3,
                    tokens: vec![10, 11, 12],
                    block_table: vec![7, 2],
                    is_prefill: true,
                    drafted: 0,
                    lora: false,
                },
                Chunk {
                    seq: SeqId(1),
                    start: 0,
                    tokens: vec![20, 21],
                    block_table: vec![5],
                    is_prefill: true,
                    drafted: 0,
                    lora: false,
                },
                Chunk {
                    seq: SeqId(2),
                    start: 9,
                    tokens: vec![30],
                    block_table: vec![1, 4, 6],
                    is_prefill: false,
                    drafted: 0,
                    lora: false,
                },
            ],
            draws: vec![
                Draw {
                    processing: processing.clone(),
                    top_logprobs: 3,
                    ..draw(0, 2, 0)
                },
                Draw {
                    processing: processing.clone(),
                    ..draw(0, 2, 1)
                },
                Draw {
                    top_logprobs: 5,
                    ..draw(2, 0, 0)
                },
            ],
            targets: vec![
                Target {
                    chunk: 1,
                    offset: 0,
                    token: 7,
                    sample_index: 0,
                    top_logprobs: 4,
                },
                Target {
                    chunk: 0,
                    offset: 2,
                    token: 8,
                    sample_index: 0,
                    top_logprobs: 2,
                },
            ],
            weights_version: 0,
            lora_version: 0,
        };
        let mut b = PackedBatch::default();
        b.pack(&plan, 4, AttentionSplit::DecodePages);
        assert_eq!(b.ids, [10, 11, 12, 20, 21, 30]);
        // (table offset, position, slot): position 3 is block 7 slot 3; 4 and 5 are block 2
        // slots 0 and 1; 9 is block 6 slot 1.
        let rows = [
            [0, 3, 31],
            [0, 4, 8],
            [0, 5, 9],
            [2, 0, 20],
            [2, 1, 21],
            [3, 9, 25],
        ];
        assert_eq!(b.rowinfo, rows.map(|[t, p, s]| RowInfo::new(t, p, s)));
        assert_eq!(b.block_tables, [7, 2, 5, 1, 4, 6]);
        // Every row fits one page: one whole item each, split or not.
        assert_eq!(b.attention.items.len(), 6);
        assert!(b.attention.combine.is_empty());
        // Chunk 0's last row draws and scores (one logits row); chunk 1's first row scores.
        assert_eq!(b.logit_rows, [2, 3, 5]);
        assert_eq!(b.draw_rows, [0, 0, 2]);
        assert_eq!(b.target_rows, [1, 0]);
        // Row 0's two draws share their processing (packed once); each row takes the largest
        // count of alternatives its draws and targets ask (row 0: 3 drawing, 2 scoring).
        assert_eq!(b.masked, [[0, 2], [0, 9]]);
        assert_eq!(b.adjusts, [(0, adjust)]);
        assert_eq!(b.keep_only.len(), 1);
        assert_eq!((b.keep_only[0].0, &*b.keep_only[0].1), (0, &[2, 4, 6][..]));
        assert_eq!(b.top_counts, [3, 4, 5]);
    }

    #[test]
    fn a_whole_sequence_is_one_chunk_in_blocks_of_its_own_with_every_row_wanted() {
        let b = PackedBatch::whole_sequence(&[5, 6, 7, 8, 9], 2, false);
        assert_eq!(b.ids, [5, 6, 7, 8, 9]);
        assert_eq!(b.block_tables, [0, 1, 2]);
        // Position p lives in pool row p.
        let rows: Vec<RowInfo> = (0..5).map(|p| RowInfo::new(0, p, p)).collect();
        assert_eq!(b.rowinfo, rows);
        assert_eq!(b.logit_rows, [0, 1, 2, 3, 4]);
        // Row p attends p + 1 keys, whole.
        let items: Vec<[u32; 4]> = (0..5).map(|r| [r, 0, 1, u32::MAX]).collect();
        assert_eq!(b.attention.items, items);
        assert!(b.attention.combine.is_empty());
    }

    #[test]
    fn only_decode_rows_are_split_across_pages() {
        let chunk = |seq, start, tokens: Vec<u32>| Chunk {
            seq: SeqId(seq),
            start,
            block_table: (0..(start + tokens.len()).div_ceil(16) as u32).collect(),
            tokens,
            is_prefill: false,
            drafted: 0,
            lora: false,
        };
        let plan = StepPlan {
            copies: vec![],
            // A decode at position 199 (200 keys, 4 pages) and a two-row chunk there.
            chunks: vec![chunk(0, 199, vec![5]), chunk(1, 199, vec![6, 7])],
            draws: vec![draw(0, 0, 0)],
            targets: vec![],
            weights_version: 0,
            lora_version: 0,
        };
        let mut b = PackedBatch::default();
        b.pack(&plan, 16, AttentionSplit::DecodePages);
        let split_items = b.attention.items.iter().filter(|i| i[0] == 0).count();
        assert_eq!(split_items, 4);
        assert_eq!(b.attention.combine, [[0, 0, 4, 0]]);
        // The chunk's rows (200 and 201 keys) are whole.
        assert_eq!(
            b.attention.items[4..],
            [[1, 0, 4, u32::MAX], [2, 0, 4, u32::MAX]]
        );
        b.pack(&plan, 16, AttentionSplit::Whole);
        assert_eq!(b.attention.items.len(), 3);
        assert!(b.attention.combine.is_empty());
    }
}
