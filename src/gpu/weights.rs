//! Weight matrices on the GPU, kept in their stored format.
//!
//! A `GpuWeight` holds the bytes of a `rows x cols` matrix as the model file stores them
//! (f32, f16, bf16, Q8_0, Q4_0, Q4_1); kernels dequantize as they read. One exception:
//! Q8_0's 34-byte blocks are padded to 36 (`Q8_0_GPU_BLOCK`: the f16 scale, two zero
//! bytes, the 32 quants), so that every word a kernel reads is 4-byte aligned; unaligned
//! words cost two loads and a branch on every read. A matrix larger than the adapter's
//! storage-binding limit is split by rows into parts, each its own buffer.
//!
//! Invariant: every part starts on a 4-byte boundary (parts hold an even number of rows
//! when a row's size is not a multiple of 4), and each part's buffer is padded to 4 bytes.
//! `row_bytes` is a row's size on the GPU.

use wgpu::util::DeviceExt;

use super::Gpu;
use crate::error::SproutError;
use crate::formats::WeightFormat;

/// Bytes of a Q8_0 block on the GPU (34 in the file, padded after the scale).
pub const Q8_0_GPU_BLOCK: usize = 36;

/// One buffer of consecutive rows.
pub struct WeightPart {
    pub buffer: wgpu::Buffer,
    pub first_row: usize,
    pub rows: usize,
}

pub struct GpuWeight {
    pub format: WeightFormat,
    pub rows: usize,
    pub cols: usize,
    /// Bytes per row on the GPU.
    pub row_bytes: usize,
    pub parts: Vec<WeightPart>,
}

impl GpuWeight {
    /// Uploads `bytes` (a `rows x cols` matrix in `format`), split at the adapter's limit.
    pub fn upload(
        gpu: &Gpu,
        format: WeightFormat,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<GpuWeight, SproutError> {
        Self::upload_with_limit(
            gpu,
            format,
            bytes,
            rows,
            cols,
            gpu.caps.max_binding.min(gpu.caps.max_buffer),
        )
    }

    /// As `upload`, with an explicit per-part byte limit (tests use a small one to
    /// exercise splitting).
    pub fn upload_with_limit(
        gpu: &Gpu,
        format: WeightFormat,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        limit: u64,
    ) -> Result<GpuWeight, SproutError> {
        let file_row_bytes = format.check_matrix(rows, cols, bytes.len())?;
        let aligned;
        let (bytes, row_bytes) = match format {
            WeightFormat::Q8_0 => {
                aligned = pad_q8_0_blocks(bytes);
                (&aligned[..], file_row_bytes / 34 * Q8_0_GPU_BLOCK)
            }
            _ => (bytes, file_row_bytes),
        };
        let rows_per_part = rows_per_part(row_bytes, limit).ok_or_else(|| {
            SproutError::Shape(format!(
                "a {format} row of {cols} values ({row_bytes} bytes) does not fit the adapter's \
                 storage-binding limit of {limit} bytes"
            ))
        })?;
        let mut parts = Vec::new();
        let mut first_row = 0;
        while first_row < rows {
            let n = rows_per_part.min(rows - first_row);
            let chunk = &bytes[first_row * row_bytes..(first_row + n) * row_bytes];
            let mut padded = chunk.to_vec();
            padded.resize(chunk.len().div_ceil(4).max(1) * 4, 0);
            let buffer = gpu
                .device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("weight"),
                    contents: &padded,
                    usage: wgpu::BufferUsages::STORAGE,
                });
            parts.push(WeightPart {
                buffer,
                first_row,
                rows: n,
            });
            first_row += n;
        }
        Ok(GpuWeight {
            format,
            rows,
            cols,
            row_bytes,
            parts,
        })
    }

    /// The part holding `row`, and the row's index inside it.
    pub fn locate(&self, row: usize) -> Option<(&WeightPart, usize)> {
        self.parts
            .iter()
            .find(|p| (p.first_row..p.first_row + p.rows).contains(&row))
            .map(|p| (p, row - p.first_row))
    }
}

/// Q8_0 blocks of 34 bytes (f16 scale, 32 quants) as 36: the scale, two zero bytes, the
/// quants.
fn pad_q8_0_blocks(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / 34 * Q8_0_GPU_BLOCK);
    for block in bytes.chunks_exact(34) {
        out.extend_from_slice(&block[..2]);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&block[2..]);
    }
    out
}

/// Most rows per part under `limit` bytes such that every part begins 4-byte aligned.
fn rows_per_part(row_bytes: usize, limit: u64) -> Option<usize> {
    let fit = (limit.saturating_sub(3) / row_bytes.max(1) as u64) as usize;
    let step = 4 / gcd(row_bytes, 4);
    let rows = fit / step * step;
    (rows > 0).then_some(rows)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::{Q8_0_GPU_BLOCK, pad_q8_0_blocks, rows_per_part};

    #[test]
    fn q8_0_blocks_are_padded_after_the_scale() {
        let block: Vec<u8> = (0..34).collect();
        let two = [block.clone(), block].concat();
        let padded = pad_q8_0_blocks(&two);
        assert_eq!(padded.len(), 2 * Q8_0_GPU_BLOCK);
        for b in padded.chunks_exact(Q8_0_GPU_BLOCK) {
            assert_eq!(&b[..4], &[0, 1, 0, 0]);
            assert_eq!(&b[4..], &(2..34).collect::<Vec<u8>>()[..]);
        }
    }

    #[test]
    fn parts_start_aligned() {
        // 34-byte rows (one Q8_0 block): parts hold an even number of rows.
        assert_eq!(rows_per_part(34, 200), Some(4));
        // 40-byte rows: any count.
        assert_eq!(rows_per_part(40, 200), Some(4));
        // 14-byte rows (f16, 7 columns): multiples of 2.
        assert_eq!(rows_per_part(14, 100), Some(6));
        assert_eq!(rows_per_part(34, 40), None);
    }
}
