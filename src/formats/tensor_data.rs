//! One tensor's bytes as a file stores them, and their format: what a reader hands the
//! loader, one tensor at a time.

use crate::error::SproutError;

use super::WeightFormat;

/// One tensor's bytes in their stored format. Vectors (norms, biases) have `rows == 1`.
pub struct TensorData {
    pub format: WeightFormat,
    pub rows: usize,
    pub cols: usize,
    pub bytes: Vec<u8>,
}

impl TensorData {
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
