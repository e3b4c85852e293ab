//! One attention dispatch set up to be checked or timed: what the kernel suite, `sprout
//! check`, `sprout tune` and the kernel benchmarks share.
//!
//! [`AttentionFixture`] uploads the query rows, the K and V pools and the block tables
//! once. For a variant it then plans the rows ([`AttentionFixture::plan`]: the work items,
//! the split rows to fold and their scratch), records the attention and its fold
//! ([`AttentionFixture::encode`]), and [`AttentionFixture::run`] reads the output back;
//! [`AttentionFixture::encode_unfolded`] leaves the split rows for a matmul to fold as it
//! reads them ([`AttentionFixture::fold`]), as the decoder's o-projection does. What the
//! caller puts in the pools (which rows a sequence owns, what the others hold) is its own:
//! a check fills rows no sequence owns with NaN, so that reading one poisons the output.
//!
//! Invariant: before a run, the output and the scratch hold NaN, so a value the kernels
//! fail to write shows as NaN instead of as the value of an earlier run.

use super::{
    AttentionBuffers, AttentionPlan, AttentionShape, AttentionSplit, AttentionVariant,
    AttentionWork, QLoads, encode, encode_unfolded, scratch_per_slot,
};
use crate::error::SproutError;
use crate::gpu::kernels::RowInfo;
use crate::gpu::kernels::matmul::AttentionFold;
use crate::gpu::{Gpu, Recorder, Tensor};

/// Which rows a splitting variant ([`AttentionSplit::DecodePages`]) splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitRows {
    /// Rows that are their sequence's only row in the dispatch (no other row has their
    /// table offset): decodes, as the engine splits them.
    Decodes,
    /// Every row of more than one page, prefill rows included: the split path under the
    /// most rows a check can give it.
    Every,
}

/// Query rows, pools and block tables on the GPU, ready to run any attention variant.
pub struct AttentionFixture {
    pub shape: AttentionShape,
    q: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
    tables: Tensor,
    rowinfo: Tensor,
    /// Per row: its key count, and whether a splitting variant splits it.
    rows: Vec<(u32, bool)>,
    out: Tensor,
}

/// A plan for the fixture's rows under one split, on the GPU.
pub struct PlannedAttention {
    pub plan: AttentionPlan,
    items: Tensor,
    combine: Tensor,
    row_slots: Tensor,
    scratch: Tensor,
}

impl PlannedAttention {
    pub fn work(&self) -> AttentionWork<'_> {
        AttentionWork {
            items: &self.items,
            n_items: self.plan.items.len(),
            combine: &self.combine,
            n_combine: self.plan.combine.len(),
            row_slots: &self.row_slots,
            slots: self.plan.slots as usize,
        }
    }
}

impl AttentionFixture {
    /// `rows.len()` query rows (`shape.t`) of `q` (`[t, n_heads, head_dim]`), attending
    /// keys in `k_pool` and `v_pool` (`[pool rows, kv_dim]`) through `tables`.
    pub fn new(
        gpu: &Gpu,
        shape: AttentionShape,
        (q, k_pool, v_pool): (&[f32], &[f32], &[f32]),
        tables: &[u32],
        rows: &[RowInfo],
        split_rows: SplitRows,
    ) -> AttentionFixture {
        assert_eq!(
            shape.t,
            rows.len(),
            "attention fixture: one RowInfo per row"
        );
        let alone = |r: &RowInfo| {
            rows.iter()
                .filter(|o| o.table_offset == r.table_offset)
                .count()
                == 1
        };
        let rows_planned = rows
            .iter()
            .map(|r| (r.keys(), split_rows == SplitRows::Every || alone(r)))
            .collect();
        AttentionFixture {
            q: gpu.upload(q),
            k_pool: gpu.upload(k_pool),
            v_pool: gpu.upload(v_pool),
            tables: gpu.upload(tables),
            rowinfo: gpu.upload(rows),
            rows: rows_planned,
            out: gpu.upload(&vec![f32::NAN; shape.q_len()]),
            shape,
        }
    }

    /// The work items for `split`, with NaN in the scratch.
    pub fn plan(&self, gpu: &Gpu, split: AttentionSplit) -> PlannedAttention {
        let mut plan = AttentionPlan::default();
        let splits = split == AttentionSplit::DecodePages;
        plan.build(self.rows.iter().map(|&(keys, may)| (keys, splits && may)));
        let slots = (plan.slots as usize).max(1);
        PlannedAttention {
            items: gpu.upload(&plan.items),
            combine: gpu.upload(&plan.combine),
            row_slots: gpu.upload(&plan.row_slots),
            scratch: gpu.upload(&vec![f32::NAN; slots * scratch_per_slot(&self.shape)]),
            plan,
        }
    }

    /// Records the attention of every row and the fold of its split rows.
    pub fn encode(
        &self,
        gpu: &Gpu,
        rec: &mut Recorder,
        q_loads: QLoads,
        planned: &PlannedAttention,
    ) {
        let buffers = self.buffers(planned);
        encode(gpu, rec, &self.shape, q_loads, &buffers, &planned.work());
    }

    /// The output, `[t, n_heads, head_dim]`.
    pub fn out(&self) -> &Tensor {
        &self.out
    }

    /// Fills the output with NaN (lands before the next submit).
    pub fn poison_out(&self, gpu: &Gpu) {
        gpu.write(&self.out, &vec![f32::NAN; self.shape.q_len()]);
    }

    /// Records the attention of every row, leaving the split rows' states for a matmul
    /// reading the output to fold ([`AttentionFixture::fold`]).
    pub fn encode_unfolded(
        &self,
        gpu: &Gpu,
        rec: &mut Recorder,
        q_loads: QLoads,
        planned: &PlannedAttention,
    ) {
        let buffers = self.buffers(planned);
        encode_unfolded(gpu, rec, &self.shape, q_loads, &buffers, &planned.work());
    }

    /// What a matmul reading the output needs to fold `planned`'s split rows.
    pub fn fold<'a>(&self, planned: &'a PlannedAttention) -> AttentionFold<'a> {
        AttentionFold {
            states: &planned.scratch,
            row_slots: &planned.row_slots,
            head_dim: self.shape.head_dim,
        }
    }

    fn buffers<'a>(&'a self, planned: &'a PlannedAttention) -> AttentionBuffers<'a> {
        AttentionBuffers {
            q: &self.q,
            k_pool: &self.k_pool,
            v_pool: &self.v_pool,
            block_tables: &self.tables,
            rowinfo: &self.rowinfo,
            out: &self.out,
            scratch: &planned.scratch,
        }
    }

    /// Runs `variant` (with direct query loads where its own do not fit the shape) and
    /// returns the output `[t, n_heads, head_dim]`.
    pub async fn run(&self, gpu: &Gpu, variant: AttentionVariant) -> Result<Vec<f32>, SproutError> {
        self.poison_out(gpu);
        let planned = self.plan(gpu, variant.split);
        let mut rec = gpu.recorder();
        self.encode(gpu, &mut rec, variant.q_loads_for(&self.shape), &planned);
        rec.submit();
        gpu.read_f32(&self.out).await
    }
}
