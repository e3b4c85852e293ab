//! Log-softmax statistics over the vocabulary (shaders/softmax.wgsl).
//!
//! For `logits [m, vocab]` each row gets its argmax (lowest index on ties), its max logit
//! and its logsumexp `lse`, so that `logprob(token) = logit - lse`. The same pass can also
//! write the full log-softmax `[m, vocab]` or the log-probs of given target ids `[m]`.
//! One workgroup per row reduces in a fixed order: a row's results are bitwise independent
//! of `m`, and `lse` (hence every log-prob) is identical whichever output was asked for.
//!
//! The logits come in chunks of rows ([`Logits`]), one dispatch per chunk; a row's
//! results do not depend on the chunk that holds it.
//!
//! The workgroup's reductions end as [`Reduction::best`] says for the adapter (a subgroup
//! butterfly where it has subgroups): the same bits either way (`kernels::reduction`).
//!
//! Logits must be finite (WGSL lets implementations assume no inf or NaN): mask a token
//! with a large negative finite logit such as -1e30, not -inf.

use crate::gpu::grid::grid;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::kernels::reduction::Reduction;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const KERNEL: &str = include_str!("../../../shaders/softmax.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    vocab: u32,
    first_row: u32,
    _pad: u32,
}

/// Per-row results: `argmax [rows]` u32 and `stats [rows, 2]` f32 = (max logit, lse).
pub struct RowStats {
    pub argmax: Tensor,
    pub stats: Tensor,
    pub rows: usize,
}

impl RowStats {
    pub fn zeros(gpu: &Gpu, rows: usize) -> RowStats {
        RowStats {
            argmax: gpu.zeros(rows),
            stats: gpu.zeros(rows * 2),
            rows,
        }
    }
}

/// What else the pass writes besides [`RowStats`].
pub enum Extra<'a> {
    Nothing,
    /// `out [m, vocab]`, chunked as the logits are: `logit - lse` for every logit.
    LogSoftmax(&'a Logits),
    /// `logprobs [m]`: `logits[r, targets[r]] - lse[r]` (NaN for a target `>= vocab`).
    TargetLogprobs {
        targets: &'a Tensor,
        logprobs: &'a Tensor,
    },
}

impl Extra<'_> {
    fn entry(&self) -> SoftmaxEntry {
        match self {
            Extra::Nothing => SoftmaxEntry::RowStats,
            Extra::LogSoftmax(_) => SoftmaxEntry::LogSoftmax,
            Extra::TargetLogprobs { .. } => SoftmaxEntry::TargetLogprobs,
        }
    }
}

/// The entry point that writes the row statistics and what else is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxEntry {
    RowStats,
    LogSoftmax,
    TargetLogprobs,
}

/// An entry point, with its reductions' tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SoftmaxKernel {
    pub entry: SoftmaxEntry,
    pub reduction: Reduction,
}

impl KernelSpec for SoftmaxKernel {
    fn name(&self) -> String {
        format!("softmax/{}/{}", self.entry(), self.reduction.key())
    }

    fn source(&self) -> String {
        self.reduction.compose(KERNEL)
    }

    fn entry(&self) -> &'static str {
        match self.entry {
            SoftmaxEntry::RowStats => "row_stats",
            SoftmaxEntry::LogSoftmax => "log_softmax",
            SoftmaxEntry::TargetLogprobs => "target_logprobs",
        }
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        match self.entry {
            SoftmaxEntry::RowStats => &[Read, ReadWrite, ReadWrite],
            SoftmaxEntry::LogSoftmax => &[Read, ReadWrite, ReadWrite, ReadWrite],
            SoftmaxEntry::TargetLogprobs => &[Read, ReadWrite, ReadWrite, ReadWrite, Read],
        }
    }
}

/// Records the row statistics of rows `0..m` of `logits` into `out`, and `extra`: one
/// dispatch per chunk of the logits, with the adapter's best reductions.
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    m: usize,
    out: &RowStats,
    extra: Extra,
) {
    let reduction = Reduction::best(&gpu.caps);
    encode_with(gpu, rec, (logits, m), out, extra, reduction);
}

/// [`encode`] with the given reductions (which the adapter must be able to run).
pub fn encode_with(
    gpu: &Gpu,
    rec: &mut Recorder,
    (logits, m): (&Logits, usize),
    out: &RowStats,
    extra: Extra,
    reduction: Reduction,
) {
    let vocab = logits.vocab;
    assert!(vocab > 0, "softmax: the vocabulary is empty");
    assert!(
        logits.rows >= m,
        "softmax: logits hold {} rows, need {m}",
        logits.rows
    );
    assert!(
        out.rows >= m,
        "softmax: row stats hold {} rows, need {m}",
        out.rows
    );
    match &extra {
        Extra::Nothing => {}
        Extra::LogSoftmax(t) => assert!(
            t.vocab == vocab && t.chunk_rows == logits.chunk_rows && t.rows >= m,
            "softmax: the log-softmax output is not chunked as the logits are"
        ),
        Extra::TargetLogprobs { targets, logprobs } => {
            assert!(
                targets.len >= m,
                "softmax: targets holds {} values, needs {m}",
                targets.len
            );
            assert!(
                logprobs.len >= m,
                "softmax: logprobs holds {} values, needs {m}",
                logprobs.len
            );
        }
    }
    let kernel = gpu.pipeline(&SoftmaxKernel {
        entry: extra.entry(),
        reduction,
    });
    for (i, chunk) in logits.chunks(m).enumerate() {
        let mut buffers = vec![&chunk.tensor.buffer, &out.argmax.buffer, &out.stats.buffer];
        match &extra {
            Extra::Nothing => {}
            Extra::LogSoftmax(t) => buffers.push(&t.chunks[i].buffer),
            Extra::TargetLogprobs { targets, logprobs } => {
                buffers.extend([&logprobs.buffer, &targets.buffer])
            }
        }
        let params = Params {
            m: chunk.rows as u32,
            vocab: vocab as u32,
            first_row: chunk.first_row as u32,
            _pad: 0,
        };
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &buffers,
            grid(gpu, chunk.rows),
        );
    }
}
