//! Logits on the GPU in chunks of rows, each chunk its own buffer within one storage
//! binding.
//!
//! A step's logits are `[rows, vocab]` f32. At a vocabulary of 262,144 (Gemma 3) a row is
//! 1 MiB, so 256 rows are 256 MiB: more than WebGPU's default 128 MiB binding. Rather than
//! cap how many sequences a step may draw for, the logits are kept as consecutive chunks
//! of `chunk_rows` rows (the last may hold fewer), each a buffer that one binding can hold
//! (and whose values a u32 can index). The vocabulary projection writes each chunk with
//! one matmul dispatch, and every kernel that reads logits (softmax, top log-probs, the
//! mask, truncation, sampling, draw log-probs) dispatches once per chunk, told the chunk's
//! first row, so that rows keep their global indices everywhere else (row stats, params,
//! cuts, keys).
//!
//! Invariant: a row's values and everything computed from them do not depend on the
//! chunking. Each kernel computes a row (or a draw from a row) by the same code whatever
//! chunk holds it, reading only that row: a chunk only moves where the row's values live.

use crate::error::SproutError;
use crate::gpu::{Gpu, Tensor};

/// `[rows, vocab]` f32 logits in chunks of `chunk_rows` rows.
pub struct Logits {
    pub vocab: usize,
    /// Rows the chunks hold together.
    pub rows: usize,
    /// Rows per chunk (the last holds `rows - (chunks - 1) * chunk_rows`).
    pub chunk_rows: usize,
    /// At least one, even for no rows (a binding may not be empty).
    pub chunks: Vec<Tensor>,
}

/// One chunk of [`Logits`]: rows `first_row .. first_row + rows`, row `first_row + i` at
/// `tensor[i * vocab ..]`.
#[derive(Clone, Copy)]
pub struct LogitsChunk<'a> {
    pub first_row: usize,
    pub rows: usize,
    pub tensor: &'a Tensor,
}

impl Logits {
    /// The most rows of `vocab` logits one chunk may hold on `gpu`: what fits its largest
    /// binding and buffer, and stays indexable by a u32 (at least one row; that one row
    /// fits is [`Logits::check_row_fits`]'s to say).
    pub fn rows_per_chunk(gpu: &Gpu, vocab: usize) -> usize {
        let limit = gpu.caps.max_binding.min(gpu.caps.max_buffer).min(1 << 32);
        ((limit / (4 * vocab.max(1) as u64)) as usize).max(1)
    }

    /// An error when not even one row of `vocab` logits fits `gpu`'s binding.
    pub fn check_row_fits(gpu: &Gpu, vocab: usize) -> Result<(), SproutError> {
        let limit = gpu.caps.max_binding.min(gpu.caps.max_buffer);
        let bytes = 4 * vocab as u64;
        if bytes > limit {
            return Err(SproutError::Model(format!(
                "a row of {vocab} logits ({bytes} bytes) does not fit the adapter's \
                 {limit}-byte storage-binding limit"
            )));
        }
        Ok(())
    }

    /// Zeroed logits for `rows` rows, in the largest chunks `gpu` can bind.
    pub fn zeros(gpu: &Gpu, rows: usize, vocab: usize) -> Logits {
        Self::zeros_chunked(gpu, rows, vocab, Self::rows_per_chunk(gpu, vocab))
    }

    /// Zeroed logits for `rows` rows in chunks of `chunk_rows` (at least 1).
    pub fn zeros_chunked(gpu: &Gpu, rows: usize, vocab: usize, chunk_rows: usize) -> Logits {
        let chunk_rows = chunk_rows.max(1);
        let chunks = (0..rows.div_ceil(chunk_rows).max(1))
            .map(|i| gpu.zeros(chunk_rows.min(rows - (i * chunk_rows).min(rows)) * vocab))
            .collect();
        Logits {
            vocab,
            rows,
            chunk_rows,
            chunks,
        }
    }

    /// `values` (`[rows, vocab]`) on the GPU, in chunks of `chunk_rows` rows (tests and
    /// fixtures; `None`: the largest chunks `gpu` can bind).
    pub fn upload(gpu: &Gpu, values: &[f32], vocab: usize, chunk_rows: Option<usize>) -> Logits {
        assert!(
            vocab > 0 && values.len().is_multiple_of(vocab),
            "logits: {} values are not whole rows of {vocab}",
            values.len()
        );
        let rows = values.len() / vocab;
        let chunk_rows = chunk_rows
            .unwrap_or_else(|| Self::rows_per_chunk(gpu, vocab))
            .max(1);
        let chunks = match rows {
            0 => vec![gpu.zeros(0)],
            _ => values
                .chunks(chunk_rows * vocab)
                .map(|c| gpu.upload(c))
                .collect(),
        };
        Logits {
            vocab,
            rows,
            chunk_rows,
            chunks,
        }
    }

    /// The chunks holding rows `0..rows` (clamped to the rows held), each with the part of
    /// those rows it holds; none for no rows.
    pub fn chunks(&self, rows: usize) -> impl Iterator<Item = LogitsChunk<'_>> {
        let rows = rows.min(self.rows);
        self.chunks
            .iter()
            .zip(spans(self.chunk_rows, rows))
            .map(|(tensor, (first_row, rows))| LogitsChunk {
                first_row,
                rows,
                tensor,
            })
    }

    /// [`Logits::chunks`], or the first chunk with no rows when there are none: what a
    /// kernel whose entries name rows (draws, targets) dispatches over, so that even with
    /// no rows one dispatch marks the entries whose rows are past them.
    pub fn entry_chunks(&self, rows: usize) -> Vec<LogitsChunk<'_>> {
        let mut chunks: Vec<LogitsChunk> = self.chunks(rows).collect();
        if chunks.is_empty() {
            chunks.push(LogitsChunk {
                first_row: 0,
                rows: 0,
                tensor: &self.chunks[0],
            });
        }
        chunks
    }

    /// Rows `0..rows` read back (`[rows, vocab]`).
    pub async fn read(&self, gpu: &Gpu, rows: usize) -> Result<Vec<f32>, SproutError> {
        let mut out = Vec::with_capacity(rows.min(self.rows) * self.vocab);
        for c in self.chunks(rows) {
            let bytes = gpu
                .read_bytes(&c.tensor.buffer, (c.rows * self.vocab * 4) as u64)
                .await?;
            out.extend(bytemuck::pod_collect_to_vec::<u8, f32>(&bytes));
        }
        Ok(out)
    }
}

/// (first row, rows) of each chunk of `chunk_rows` holding part of rows `0..rows`.
fn spans(chunk_rows: usize, rows: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..rows.div_ceil(chunk_rows)).map(move |i| {
        let first = i * chunk_rows;
        (first, chunk_rows.min(rows - first))
    })
}

#[cfg(test)]
mod tests {
    use super::spans;

    #[test]
    fn chunks_cover_the_rows_asked_for_in_order() {
        let all = |chunk_rows, rows| spans(chunk_rows, rows).collect::<Vec<_>>();
        assert_eq!(all(4, 10), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(all(4, 5), [(0, 4), (4, 1)]);
        assert_eq!(all(4, 0), []);
        assert_eq!(all(8, 3), [(0, 3)]);
    }
}
