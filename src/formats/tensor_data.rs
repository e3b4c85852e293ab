//! One tensor's bytes as a file stores them, and their format: what a reader hands the
//! loader, one tensor at a time, and the one way the readers (GGUF, safetensors) read
//! those bytes from a file.

use std::io::{Read, Seek, SeekFrom};

use crate::error::SproutError;

use super::WeightFormat;

/// One tensor's bytes in their stored format. Vectors (norms, biases) have `rows == 1`.
pub struct TensorData {
    pub format: WeightFormat,
    pub rows: usize,
    pub cols: usize,
    pub bytes: Vec<u8>,
}

/// Where a tensor's bytes are in a file, and what they hold: `format`, `rows x cols`.
pub struct StoredTensor<'a> {
    /// The file, as an error names it.
    pub file: &'a str,
    /// The tensor's name in the file.
    pub name: &'a str,
    pub start: u64,
    pub len: u64,
    pub format: WeightFormat,
    pub rows: usize,
    pub cols: usize,
}

impl TensorData {
    /// Reads the bytes of `stored` from `reader`: one allocation, one copy. A file shorter
    /// than the tensor is an error naming both.
    pub fn read(
        reader: &mut (impl Read + Seek),
        stored: StoredTensor,
    ) -> Result<TensorData, SproutError> {
        let StoredTensor {
            file,
            name,
            start,
            len,
            ..
        } = stored;
        let capacity = usize::try_from(len).map_err(|_| {
            SproutError::Model(format!(
                "tensor {name} ({len} bytes) does not fit in memory"
            ))
        })?;
        reader.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity(capacity);
        reader.take(len).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != len {
            return Err(SproutError::Model(format!(
                "{file} is truncated: tensor {name} needs {len} bytes, the file has {}",
                bytes.len()
            )));
        }
        Ok(TensorData {
            format: stored.format,
            rows: stored.rows,
            cols: stored.cols,
            bytes,
        })
    }

    /// `rows x cols` f32 values, stored as F32: what a reader hands out for values it
    /// changed on the way (Gemma's norms, `model::gemma3`).
    pub fn from_f32(rows: usize, cols: usize, values: &[f32]) -> TensorData {
        TensorData {
            format: WeightFormat::F32,
            rows,
            cols,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// The values as f32 (for the small vectors the kernels take in f32: norms, biases).
    pub fn to_f32(&self) -> Result<Vec<f32>, SproutError> {
        Ok(super::dequantize(
            self.format,
            &self.bytes,
            self.rows,
            self.cols,
        )?)
    }
}
