//! Log-softmax statistics over the vocabulary (shaders/softmax.wgsl).
//!
//! For `logits [m, vocab]` each row gets its argmax (lowest index on ties), its max logit
//! and its logsumexp `lse`, so that `logprob(token) = logit - lse`. The same pass can also
//! write the full log-softmax `[m, vocab]` or the log-probs of given target ids `[m]`.
//! One workgroup per row reduces in a fixed order: a row's results are bitwise independent
//! of `m`, and `lse` (hence every log-prob) is identical whichever output was asked for.
//!
//! Logits must be finite (WGSL lets implementations assume no inf or NaN): mask a token
//! with a large negative finite logit such as -1e30, not -inf.

use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::with_argmax;
use crate::gpu::{Gpu, Recorder, Tensor};

const KERNEL: &str = include_str!("../../../shaders/softmax.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    vocab: u32,
    _pad: [u32; 2],
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
    /// `out [m, vocab]`: `logit - lse` for every logit.
    LogSoftmax(&'a Tensor),
    /// `logprobs [m]`: `logits[r, targets[r]] - lse[r]` (NaN for a target `>= vocab`).
    TargetLogprobs {
        targets: &'a Tensor,
        logprobs: &'a Tensor,
    },
}

impl Extra<'_> {
    fn kernel(&self) -> SoftmaxKernel {
        match self {
            Extra::Nothing => SoftmaxKernel::RowStats,
            Extra::LogSoftmax(_) => SoftmaxKernel::LogSoftmax,
            Extra::TargetLogprobs { .. } => SoftmaxKernel::TargetLogprobs,
        }
    }
}

/// The entry point that writes the row statistics and what else is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxKernel {
    RowStats,
    LogSoftmax,
    TargetLogprobs,
}

impl KernelSpec for SoftmaxKernel {
    fn name(&self) -> String {
        format!("softmax/{}", self.entry())
    }

    fn source(&self) -> String {
        with_argmax(KERNEL)
    }

    fn entry(&self) -> &'static str {
        match self {
            SoftmaxKernel::RowStats => "row_stats",
            SoftmaxKernel::LogSoftmax => "log_softmax",
            SoftmaxKernel::TargetLogprobs => "target_logprobs",
        }
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        match self {
            SoftmaxKernel::RowStats => &[Read, ReadWrite, ReadWrite],
            SoftmaxKernel::LogSoftmax => &[Read, ReadWrite, ReadWrite, ReadWrite],
            SoftmaxKernel::TargetLogprobs => &[Read, ReadWrite, ReadWrite, ReadWrite, Read],
        }
    }
}

/// Records the row statistics of `logits [m, vocab]` into `out`, and `extra`.
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Tensor,
    m: usize,
    vocab: usize,
    out: &RowStats,
    extra: Extra,
) {
    assert!(vocab > 0, "softmax: the vocabulary is empty");
    assert!(
        logits.len >= m * vocab,
        "softmax: logits holds {} values, needs {m}x{vocab}",
        logits.len
    );
    assert!(
        out.rows >= m,
        "softmax: row stats hold {} rows, need {m}",
        out.rows
    );
    let mut buffers = vec![&logits.buffer, &out.argmax.buffer, &out.stats.buffer];
    match &extra {
        Extra::Nothing => {}
        Extra::LogSoftmax(t) => {
            assert!(
                t.len >= m * vocab,
                "softmax: log-softmax output holds {} values, needs {m}x{vocab}",
                t.len
            );
            buffers.push(&t.buffer);
        }
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
            buffers.extend([&logprobs.buffer, &targets.buffer]);
        }
    }
    let params = Params {
        m: m as u32,
        vocab: vocab as u32,
        _pad: [0; 2],
    };
    rec.dispatch(
        &gpu.pipeline(&extra.kernel()),
        bytemuck::bytes_of(&params),
        &buffers,
        grid(gpu, m),
    );
}
