//! Writing a safetensors file one tensor at a time, so that a model is never held in
//! memory whole.
//!
//! The layout is the one the `safetensors` crate reads (and Python's `safetensors`): a u64
//! little-endian header length `n`, `n` bytes of JSON (`{"__metadata__": {...}, "name":
//! {"dtype", "shape", "data_offsets": [begin, end]}, ...}`, padded with spaces to a
//! multiple of 8 as that crate pads it), then the tensors' bytes back to back.
//!
//! Invariants: the header is built and validated by the `safetensors` crate itself
//! (contiguous offsets from 0, each range exactly its dtype and shape's size) before a
//! byte is written; then each tensor must come in the header's order with exactly its
//! size, and [`SafetensorsWriter::finish`] fails unless every tensor came, so a writer that
//! finished wrote a file whose header matches its data.

use std::collections::HashMap;
use std::io::Write;

use safetensors::Dtype;
use safetensors::tensor::{Metadata, TensorInfo};

use crate::error::SproutError;
use crate::formats::WeightFormat;

/// One tensor of the file: its name, element format (a float format) and shape.
pub struct TensorEntry {
    pub name: String,
    pub format: WeightFormat,
    pub shape: Vec<usize>,
}

/// A safetensors file being written: the header is out, the tensors follow in order.
pub struct SafetensorsWriter<W: Write> {
    out: W,
    /// Each tensor's name and byte length, in the header's order.
    sizes: Vec<(String, usize)>,
    /// How many tensors have been written.
    written: usize,
}

fn dtype(format: WeightFormat, name: &str) -> Result<Dtype, SproutError> {
    match format {
        WeightFormat::F32 => Ok(Dtype::F32),
        WeightFormat::F16 => Ok(Dtype::F16),
        WeightFormat::Bf16 => Ok(Dtype::BF16),
        other => Err(SproutError::Model(format!(
            "tensor {name}: safetensors has no {other} dtype (only f32, f16 and bf16 are written)"
        ))),
    }
}

impl<W: Write> SafetensorsWriter<W> {
    /// Writes the header for `tensors` (in this order in the data) and `metadata` (the
    /// `__metadata__` strings; transformers wants `"format": "pt"`).
    pub fn new(
        mut out: W,
        tensors: &[TensorEntry],
        metadata: HashMap<String, String>,
    ) -> Result<Self, SproutError> {
        let mut infos = Vec::with_capacity(tensors.len());
        let mut sizes = Vec::with_capacity(tensors.len());
        let mut offset = 0usize;
        for t in tensors {
            let elements = t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            let len = elements
                .and_then(|n| t.format.matrix_bytes(1, n).ok())
                .ok_or_else(|| {
                    SproutError::Model(format!(
                        "tensor {} of shape {:?} is too large",
                        t.name, t.shape
                    ))
                })?;
            let end = offset.checked_add(len).ok_or_else(|| {
                SproutError::Model(
                    "the tensors take more bytes than this machine can address".into(),
                )
            })?;
            let info = TensorInfo {
                dtype: dtype(t.format, &t.name)?,
                shape: t.shape.clone(),
                data_offsets: (offset, end),
            };
            infos.push((t.name.clone(), info));
            sizes.push((t.name.clone(), len));
            offset = end;
        }
        let bad = |e: String| SproutError::Model(format!("cannot make a safetensors header: {e}"));
        let header = Metadata::new(Some(metadata), infos).map_err(|e| bad(e.to_string()))?;
        let mut header = serde_json::to_vec(&header).map_err(|e| bad(e.to_string()))?;
        header.resize(header.len().next_multiple_of(8), b' ');
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(&header)?;
        Ok(SafetensorsWriter {
            out,
            sizes,
            written: 0,
        })
    }

    /// Writes the bytes of the next tensor, which must be `name` and of its header size.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), SproutError> {
        let Some((want, len)) = self.sizes.get(self.written) else {
            return Err(SproutError::Model(format!(
                "tensor {name} is not in the safetensors header (all {} are written)",
                self.sizes.len()
            )));
        };
        if want != name || *len != bytes.len() {
            return Err(SproutError::Model(format!(
                "the safetensors header expects tensor {want} of {len} bytes next, not {name} \
                 of {} bytes",
                bytes.len()
            )));
        }
        self.out.write_all(bytes)?;
        self.written += 1;
        Ok(())
    }

    /// Flushes the file and hands back the writer; an error if a tensor is missing.
    pub fn finish(mut self) -> Result<W, SproutError> {
        if let Some((name, _)) = self.sizes.get(self.written) {
            return Err(SproutError::Model(format!(
                "the safetensors file is incomplete: tensor {name} and {} more were never \
                 written",
                self.sizes.len() - self.written - 1
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use safetensors::SafeTensors;

    use super::*;
    use crate::formats::quantize;

    fn entry(name: &str, format: WeightFormat, shape: &[usize]) -> TensorEntry {
        TensorEntry {
            name: name.into(),
            format,
            shape: shape.to_vec(),
        }
    }

    fn metadata() -> HashMap<String, String> {
        HashMap::from([("format".to_string(), "pt".to_string())])
    }

    #[test]
    fn the_safetensors_crate_reads_back_what_was_written() {
        let entries = [
            entry("b", WeightFormat::F32, &[3]),
            entry("a", WeightFormat::Bf16, &[2, 4]),
            entry("c", WeightFormat::F16, &[1, 2]),
        ];
        let b = quantize(WeightFormat::F32, &[1.0, -2.0, 3.5], 3).unwrap();
        let a = quantize(WeightFormat::Bf16, &[0.5; 8], 4).unwrap();
        let c = quantize(WeightFormat::F16, &[7.0, 8.0], 2).unwrap();
        let mut w = SafetensorsWriter::new(Vec::new(), &entries, metadata()).unwrap();
        w.write("b", &b).unwrap();
        w.write("a", &a).unwrap();
        w.write("c", &c).unwrap();
        let file = w.finish().unwrap();
        let header_len = u64::from_le_bytes(file[..8].try_into().unwrap());
        assert_eq!(header_len % 8, 0);
        let (_, meta) = SafeTensors::read_metadata(&file).unwrap();
        assert_eq!(meta.metadata().as_ref().unwrap()["format"], "pt");
        let read = SafeTensors::deserialize(&file).unwrap();
        for (name, dtype, shape, bytes) in [
            ("a", Dtype::BF16, vec![2, 4], &a),
            ("b", Dtype::F32, vec![3], &b),
            ("c", Dtype::F16, vec![1, 2], &c),
        ] {
            let t = read.tensor(name).unwrap();
            assert_eq!((t.dtype(), t.shape()), (dtype, &shape[..]), "{name}");
            assert_eq!(t.data(), &bytes[..], "{name}");
        }
    }

    #[test]
    fn tensors_out_of_order_short_or_missing_are_errors() {
        let entries = [
            entry("x", WeightFormat::F32, &[2]),
            entry("y", WeightFormat::F32, &[2]),
        ];
        let mut w = SafetensorsWriter::new(Vec::new(), &entries, metadata()).unwrap();
        let e = w.write("y", &[0; 8]).unwrap_err().to_string();
        assert!(e.contains("tensor x of 8 bytes next, not y"), "{e}");
        let e = w.write("x", &[0; 4]).unwrap_err().to_string();
        assert!(e.contains("not x of 4 bytes"), "{e}");
        w.write("x", &[0; 8]).unwrap();
        let e = w.finish().unwrap_err().to_string();
        assert!(e.contains("tensor y and 0 more were never written"), "{e}");
        let quantized = [entry("q", WeightFormat::Q8_0, &[32])];
        let e = SafetensorsWriter::new(Vec::new(), &quantized, metadata())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no q8_0 dtype"), "{e}");
    }
}
