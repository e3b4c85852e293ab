//! Embedding lookup (shaders/embedding.wgsl): `out[r] = table[ids[r]] * scale`,
//! dequantized, from a [`GpuWeight`] `[vocab, dim]` in any stored format, split into parts
//! or not. `scale` is the model's embedding scale (Gemma multiplies embeddings by
//! `sqrt(hidden)`): one f32 multiply per value after decoding, so 1.0 changes nothing.
//!
//! A table larger than one binding or buffer (Gemma 3's 262,144 rows) is uploaded in parts
//! of whole rows (`gpu::weights`).
//!
//! One dispatch per part; each writes the rows whose id that part holds. The ids live on
//! the GPU, so they cannot be checked here: an id `>= vocab` yields a row of zeros (written
//! by the first part's dispatch). An id with the high bit set ([`DRAWN`]) names a token the
//! step before drew, read from that step's `drawn` buffer on the GPU, so that a step can be
//! recorded before the CPU has read the previous step's tokens back. Decoding is exact, and
//! nothing is reduced, so a row is independent of the batch and of how the table is split.

use crate::formats::WeightFormat;
use crate::gpu::grid::grid;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::with_weights;
use crate::gpu::{Gpu, GpuWeight, Recorder, Tensor};

pub(crate) const SOURCE: &str = include_str!("../../../shaders/embedding.wgsl");
const WORKGROUP: usize = 256;
/// The bit that marks an id as an index into the previous step's drawn tokens.
pub const DRAWN: u32 = 1 << 31;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    dim: u32,
    row_bytes: u32,
    first_row: u32,
    rows: u32,
    vocab: u32,
    zero_invalid: u32,
    scale: f32,
}

/// The embedding kernel for a table in one weight format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EmbeddingKernel(pub WeightFormat);

impl KernelSpec for EmbeddingKernel {
    fn name(&self) -> String {
        format!("embedding/{}", self.0.name())
    }

    fn source(&self) -> String {
        with_weights(SOURCE, self.0)
    }

    fn entry(&self) -> &'static str {
        "embedding"
    }

    fn storage(&self) -> &'static [Access] {
        &[Access::Read, Access::Read, Access::ReadWrite, Access::Read]
    }
}

/// Records `out[m, table.cols] = table[ids[m]] * scale` (ids `>= table.rows` give zeros;
/// an id `DRAWN | i` is `drawn[i]`).
#[allow(clippy::too_many_arguments)]
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    table: &GpuWeight,
    ids: &Tensor,
    drawn: &Tensor,
    m: usize,
    out: &Tensor,
    scale: f32,
) {
    let dim = table.cols;
    assert!(
        ids.len >= m,
        "embedding: ids holds {} values, needs {m}",
        ids.len
    );
    assert!(
        out.len >= m * dim,
        "embedding: out holds {} values, needs {m}x{dim}",
        out.len
    );
    let invocations = m * dim.div_ceil(4);
    assert!(
        u32::try_from(invocations).is_ok(),
        "embedding: {m}x{dim} is too large for one dispatch"
    );
    let kernel = gpu.pipeline(&EmbeddingKernel(table.format));
    for (i, part) in table.parts.iter().enumerate() {
        let params = Params {
            m: m as u32,
            dim: dim as u32,
            row_bytes: table.row_bytes as u32,
            first_row: part.first_row as u32,
            rows: part.rows as u32,
            vocab: table.rows as u32,
            zero_invalid: (i == 0) as u32,
            scale,
        };
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params),
            &[&ids.buffer, &part.buffer, &out.buffer, &drawn.buffer],
            grid(gpu, invocations.div_ceil(WORKGROUP)),
        );
    }
}
