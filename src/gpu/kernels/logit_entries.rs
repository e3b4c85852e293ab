//! Recording a kernel whose work is a list of entries on the GPU, each naming one logit by
//! (row, token) (`mask::encode`, `logit_adjust::encode`): one dispatch per chunk of the
//! [`Logits`], one invocation per entry, each dispatch told its chunk's rows so that an
//! entry whose row another chunk holds does nothing there.
//!
//! The shaders share shaders/common/logit_entries.wgsl ([`with_common`]): the parameters
//! `Params { n, rows, vocab, first_row, zero }` (`rows` the chunk's, `zero` always 0: a
//! value no compiler knows, for a kernel that must keep its arithmetic from being
//! contracted), the entry an invocation takes and where its logit lies in the chunk. Their
//! binding 1 is the entries, binding 2 the chunk, and binding 3, for a kernel that has one,
//! one value per entry (`logit_adjust`'s saved logits).

use crate::gpu::grid::grid;
use crate::gpu::kernels::logits::Logits;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const COMMON: &str = include_str!("../../../shaders/common/logit_entries.wgsl");

/// A kernel's WGSL with what the entry kernels share.
fn with_common(kernel: &str) -> String {
    format!("{COMMON}\n{kernel}")
}

/// A kernel over entries: its entry point (also its name) and its WGSL, which binds the
/// entries (read), the chunk (read-write) and, when `per_entry`, one value per entry
/// (read-write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryKernel {
    pub entry: &'static str,
    pub source: &'static str,
    pub per_entry: bool,
}

impl KernelSpec for EntryKernel {
    fn name(&self) -> String {
        self.entry.into()
    }

    fn source(&self) -> String {
        with_common(self.source)
    }

    fn entry(&self) -> &'static str {
        self.entry
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        match self.per_entry {
            false => &[Read, ReadWrite],
            true => &[Read, ReadWrite, ReadWrite],
        }
    }
}

/// Entries per workgroup (`WG` in the shaders).
pub const WORKGROUP: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    rows: u32,
    vocab: u32,
    first_row: u32,
    zero: u32,
    pad: [u32; 3],
}

/// Records `kernel` over the first `n` entries of `entries` (`words` 32-bit values each)
/// for rows `0..rows` of `logits`, once per chunk; `per_entry` (at least `n` values) is
/// bound when the kernel has it.
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    kernel: &EntryKernel,
    logits: &Logits,
    rows: usize,
    (entries, words, n): (&Tensor, usize, usize),
    per_entry: Option<&Tensor>,
) {
    let what = kernel.name();
    let vocab = logits.vocab;
    assert!(vocab > 0, "{what}: the vocabulary is empty");
    assert!(
        logits.rows >= rows,
        "{what}: logits hold {} rows, need {rows}",
        logits.rows
    );
    assert!(
        entries.len >= words * n,
        "{what}: the entries hold {} values, need {words} for each of {n}",
        entries.len
    );
    assert_eq!(
        per_entry.is_some(),
        kernel.per_entry,
        "{what}: a value per entry is bound exactly when the kernel has one"
    );
    if let Some(values) = per_entry {
        assert!(
            values.len >= n,
            "{what}: {} values for {n} entries",
            values.len
        );
    }
    let n = u32::try_from(n).unwrap_or_else(|_| panic!("{what}: more than 2^32 entries"));
    let kernel = gpu.pipeline(kernel);
    for chunk in logits.chunks(rows) {
        let params = Params {
            n,
            rows: chunk.rows as u32,
            vocab: vocab as u32,
            first_row: chunk.first_row as u32,
            zero: 0,
            pad: [0; 3],
        };
        let mut buffers = vec![&entries.buffer, &chunk.tensor.buffer];
        buffers.extend(per_entry.map(|v| &v.buffer));
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &buffers,
            grid(gpu, (n as usize).div_ceil(WORKGROUP)),
        );
    }
}
