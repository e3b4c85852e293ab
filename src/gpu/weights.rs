//! Weight matrices on the GPU, kept in their stored format.
//!
//! A `GpuWeight` holds the bytes of a `rows x cols` matrix as the model file stores them
//! (every format of `WeightFormat::ALL`); kernels dequantize as they read. The exception:
//! formats whose blocks are not a multiple of 4 bytes and hold fields that a kernel reads
//! as words get two zero bytes in each block ([`block_padding`]), so that every word a
//! kernel reads is 4-byte aligned (unaligned words cost two loads and a branch on every
//! read):
//! - Q8_0, 34 bytes to 36: the f16 scale, two zero bytes, the 32 quants;
//! - Q5_0, 22 bytes to 24: the f16 scale, two zero bytes, the u32 of fifth bits, the 16
//!   bytes of nibbles;
//! - Q6_K, 210 bytes to 212: the 208 bytes of quants and scales, the f16 scale, two zero
//!   bytes.
//!
//! (Q4_0's 18-byte blocks stay as they are: its decoder reads them with the unaligned
//! helpers. Q4_1's, Q5_1's, Q4_K's and Q5_K's are whole words, every field aligned, as
//! stored.) A matrix larger than the adapter's storage-binding limit is split by rows
//! into parts, each its own buffer.
//!
//! Invariant: every part starts on a 4-byte boundary (parts hold an even number of rows
//! when a row's size is not a multiple of 4), and each part's buffer is padded to 4 bytes.
//! `row_bytes` is a row's size on the GPU.

use wgpu::util::DeviceExt;

use super::Gpu;
use crate::error::SproutError;
use crate::formats::WeightFormat;

/// Where a format's blocks get zero bytes on the GPU: (offset in the file's block, bytes
/// inserted there), or `None` for a format uploaded as stored. The decoders in
/// `shaders/weight_formats/` read this layout.
pub fn block_padding(format: WeightFormat) -> Option<(usize, usize)> {
    match format {
        // After the f16 scale: what follows (quants, or Q5_0's fifth bits) starts aligned.
        WeightFormat::Q8_0 | WeightFormat::Q5_0 => Some((2, 2)),
        // After the trailing f16 scale: the block becomes 53 words.
        WeightFormat::Q6_K => Some((210, 2)),
        WeightFormat::F32
        | WeightFormat::F16
        | WeightFormat::Bf16
        | WeightFormat::Q4_0
        | WeightFormat::Q4_1
        | WeightFormat::Q5_1
        | WeightFormat::Q4_K
        | WeightFormat::Q5_K => None,
    }
}

/// Bytes of one of `format`'s blocks on the GPU.
pub fn gpu_block_bytes(format: WeightFormat) -> usize {
    format.block_bytes() + block_padding(format).map_or(0, |(_, pad)| pad)
}

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
        let (bytes, row_bytes) = match block_padding(format) {
            Some((at, pad)) => {
                aligned = pad_blocks(bytes, format.block_bytes(), at, pad);
                let blocks = file_row_bytes / format.block_bytes();
                (&aligned[..], blocks * gpu_block_bytes(format))
            }
            None => (bytes, file_row_bytes),
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
                    // Read back when the engine sleeps and keeps its weights on the host.
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
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

/// Blocks of `block` bytes with `pad` zero bytes inserted at offset `at` of each.
fn pad_blocks(bytes: &[u8], block: usize, at: usize, pad: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / block * (block + pad));
    for b in bytes.chunks_exact(block) {
        out.extend_from_slice(&b[..at]);
        out.extend(std::iter::repeat_n(0, pad));
        out.extend_from_slice(&b[at..]);
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
    use super::{block_padding, gpu_block_bytes, pad_blocks, rows_per_part};
    use crate::formats::WeightFormat;

    /// Two blocks of `format` (bytes 0, 1, 2, ...), as uploaded.
    fn padded(format: WeightFormat) -> Vec<u8> {
        let n = format.block_bytes();
        let block: Vec<u8> = (0..n as u8).collect();
        let (at, pad) = block_padding(format).unwrap();
        pad_blocks(&[block.clone(), block].concat(), n, at, pad)
    }

    #[test]
    fn blocks_are_padded_after_their_scale() {
        for format in [WeightFormat::Q8_0, WeightFormat::Q5_0] {
            let n = format.block_bytes() as u8;
            let padded = padded(format);
            assert_eq!(padded.len(), 2 * gpu_block_bytes(format));
            for b in padded.chunks_exact(gpu_block_bytes(format)) {
                assert_eq!(&b[..4], &[0, 1, 0, 0], "{format}");
                assert_eq!(&b[4..], &(2..n).collect::<Vec<u8>>()[..], "{format}");
            }
        }
        let padded = padded(WeightFormat::Q6_K);
        assert_eq!(gpu_block_bytes(WeightFormat::Q6_K), 212);
        for b in padded.chunks_exact(212) {
            assert_eq!(&b[..210], &(0..210).collect::<Vec<u8>>()[..]);
            assert_eq!(&b[210..], &[0, 0]);
        }
    }

    #[test]
    fn every_format_on_the_gpu_has_blocks_of_whole_words() {
        for format in WeightFormat::ALL {
            // Q4_0's 18-byte blocks are read with the unaligned helpers; the float formats'
            // "blocks" are single values.
            if format.is_quantized() && format != WeightFormat::Q4_0 {
                assert_eq!(gpu_block_bytes(format) % 4, 0, "{format}");
            }
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
