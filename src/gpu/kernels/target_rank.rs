//! The rank of given tokens in their logits rows (shaders/target_rank.wgsl), so that a
//! scored token's place under the model comes back as one u32, never the logits.
//!
//! For entry `e` naming `(row, token)` with logits `x` in that row, `ranks[e] = 1 +
//! #{c : x[c] > x[token]} + #{c < token : x[c] == x[token]}`: the token's 1-based place in
//! the order `top_logprobs` picks in (logit descending, lowest index first among equal
//! logits; -0 and +0 are equal), so a token that is the `j`-th alternative of its row has
//! rank `j + 1`. An entry whose row is past the rows or whose token is past the vocabulary
//! gets 0, which is never a rank. Several entries may name one row.
//!
//! Invariants: a rank is a count of comparisons, exact, so it depends only on its row's
//! logits and its token: the same alone or in any batch, in any chunk of the logits, in
//! both shapes ([`TargetRankShape`]) and whichever tail ends the per-workgroup shape's sum
//! (`reduction`: the subgroup butterfly where the adapter has one). Logits must be finite
//! (see `softmax`).
//!
//! The logits come in chunks of rows ([`Logits`]), one dispatch per chunk, each serving the
//! entries whose row the chunk holds (the first chunk's also those past the rows).

use crate::gpu::grid::grid;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::kernels::reduction::Reduction;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const SOURCE: &str = include_str!("../../../shaders/target_rank.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    vocab: u32,
    rows: u32,
    first_row: u32,
    chunk_rows: u32,
    _pad: [u32; 3],
}

/// Which invocations count an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetRankShape {
    /// One invocation per entry, walking its whole row: CPU adapters, where an invocation
    /// is a lane of a core and workgroup memory and barriers cost more than they share.
    EntryPerInvocation,
    /// One workgroup per entry, its invocations striding over the row and their counts
    /// added in workgroup memory: GPUs, which need many invocations per row.
    EntryPerWorkgroup,
}

impl TargetRankShape {
    pub const ALL: [TargetRankShape; 2] = [
        TargetRankShape::EntryPerInvocation,
        TargetRankShape::EntryPerWorkgroup,
    ];

    /// The untuned choice: entries per invocation on CPU adapters, per workgroup on GPUs.
    pub fn default_for(cpu_shaped: bool) -> TargetRankShape {
        if cpu_shaped {
            TargetRankShape::EntryPerInvocation
        } else {
            TargetRankShape::EntryPerWorkgroup
        }
    }

    /// Invocations per workgroup (`WG` in the shader).
    fn workgroup(self) -> usize {
        match self {
            TargetRankShape::EntryPerInvocation => 64,
            TargetRankShape::EntryPerWorkgroup => 256,
        }
    }
}

/// The kernel of one shape, with the tail of its workgroup sum (the per-invocation shape
/// has none: it takes the tree's module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TargetRankKernel {
    pub shape: TargetRankShape,
    pub reduction: Reduction,
}

impl TargetRankKernel {
    /// `shape` with the adapter's best reductions where it reduces.
    pub fn new(gpu: &Gpu, shape: TargetRankShape) -> TargetRankKernel {
        let reduction = match shape {
            TargetRankShape::EntryPerInvocation => Reduction::Tree,
            TargetRankShape::EntryPerWorkgroup => Reduction::best(&gpu.caps),
        };
        TargetRankKernel { shape, reduction }
    }
}

impl KernelSpec for TargetRankKernel {
    fn name(&self) -> String {
        format!("target_rank/{:?}/{}", self.shape, self.reduction.key())
    }

    fn source(&self) -> String {
        let per_workgroup = self.shape == TargetRankShape::EntryPerWorkgroup;
        let wg = self.shape.workgroup();
        let kernel = self.reduction.compose(SOURCE);
        format!(
            "const ENTRY_PER_WORKGROUP: bool = {per_workgroup};\nconst WG: u32 = {wg}u;\n{kernel}"
        )
    }

    fn entry(&self) -> &'static str {
        "target_rank"
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        // logits, targets, ranks
        &[Read, Read, ReadWrite]
    }
}

/// One dispatch's inputs and output: for each entry `e < n` of `targets` (`[n, 2]` u32: a
/// logits row and a token), the token's rank in that row of rows `0..rows` of `logits`,
/// into `ranks[e]` (u32; 0 for a row `>= rows` or a token `>= vocab`).
pub struct TargetRanks<'a> {
    pub logits: &'a Logits,
    pub rows: usize,
    pub targets: &'a Tensor,
    pub n: usize,
    pub ranks: &'a Tensor,
}

/// Records `op` with the adapter's default shape ([`TargetRankShape::default_for`]).
pub fn encode(gpu: &Gpu, rec: &mut Recorder, op: &TargetRanks) {
    let shape = TargetRankShape::default_for(gpu.cpu_shaped_defaults());
    encode_with(gpu, rec, op, shape);
}

/// Records `op` with `shape`. Panics (naming the problem) when a buffer is too small.
pub fn encode_with(gpu: &Gpu, rec: &mut Recorder, op: &TargetRanks, shape: TargetRankShape) {
    let TargetRanks {
        logits,
        rows,
        targets,
        n,
        ranks,
    } = *op;
    let vocab = logits.vocab;
    assert!(vocab > 0, "target_rank: the vocabulary is empty");
    assert!(
        targets.len >= 2 * n,
        "target_rank: targets hold {} values, need (row, token) of {n}",
        targets.len
    );
    assert!(
        ranks.len >= n,
        "target_rank: ranks hold {} values, need {n}",
        ranks.len
    );
    if n == 0 {
        return;
    }
    let rows = rows.min(logits.rows);
    let kernel = gpu.pipeline(&TargetRankKernel::new(gpu, shape));
    let workgroups = match shape {
        TargetRankShape::EntryPerInvocation => n.div_ceil(shape.workgroup()),
        TargetRankShape::EntryPerWorkgroup => n,
    };
    for chunk in logits.entry_chunks(rows) {
        let params = Params {
            n: n as u32,
            vocab: vocab as u32,
            rows: rows as u32,
            first_row: chunk.first_row as u32,
            chunk_rows: chunk.rows as u32,
            _pad: [0; 3],
        };
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &[&chunk.tensor.buffer, &targets.buffer, &ranks.buffer],
            grid(gpu, workgroups),
        );
    }
}
