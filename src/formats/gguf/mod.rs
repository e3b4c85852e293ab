//! The GGUF container (versions 2 and 3, little-endian): header, metadata, tensor infos,
//! and one tensor's bytes at a time.
//!
//! Layout: `"GGUF"`, u32 version, u64 tensor count, u64 metadata count, the metadata
//! entries (string key, u32 type, value), the tensor infos (string name, u32 n_dims,
//! u64 dims[n_dims], u32 ggml type, u64 offset), padding to `general.alignment` (default
//! 32), then the tensor data; each offset is relative to that data section. Strings are a
//! u64 byte length and UTF-8 bytes. A tensor's `dims[0]` is its row length.
//!
//! Invariants: opening reads only the header (through a small buffer) and checks every
//! count and length against the file's size before it sizes a loop or an allocation
//! (counts times the smallest item they count, with checked arithmetic), every tensor's
//! element count against ggml's i64 limit, and every supported tensor's bytes for lying
//! inside the file without overlapping another's, so a corrupt or truncated file is an
//! error naming what was being read, never a panic or a huge allocation; tensor bytes are
//! read on demand by seeking, so the file is never held in memory whole. Any reader that
//! is `Read + Seek` works: a `File` natively, a `Cursor<&[u8]>` in the browser.

pub mod metadata;
pub mod writer;

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::SproutError;
use crate::formats::WeightFormat;
use crate::formats::{StoredTensor, TensorData};
pub use metadata::{GgufMetadata, GgufValue};

/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays of arrays deeper than this are rejected (real files use depth 1).
const MAX_ARRAY_DEPTH: usize = 4;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// The smallest tensor info: an empty name (u64 length), n_dims, one dim, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// The smallest metadata entry: an empty key (u64 length), the type, a one-byte value.
const MIN_METADATA_ENTRY_BYTES: u64 = 8 + 4 + 1;

/// A ggml tensor type id, as stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

impl GgmlType {
    const NAMES: [(u32, &'static str); 35] = [
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (4, "Q4_2"),
        (5, "Q4_3"),
        (6, "Q5_0"),
        (7, "Q5_1"),
        (8, "Q8_0"),
        (9, "Q8_1"),
        (10, "Q2_K"),
        (11, "Q3_K"),
        (12, "Q4_K"),
        (13, "Q5_K"),
        (14, "Q6_K"),
        (15, "Q8_K"),
        (16, "IQ2_XXS"),
        (17, "IQ2_XS"),
        (18, "IQ3_XXS"),
        (19, "IQ1_S"),
        (20, "IQ4_NL"),
        (21, "IQ3_S"),
        (22, "IQ2_S"),
        (23, "IQ4_XS"),
        (24, "I8"),
        (25, "I16"),
        (26, "I32"),
        (27, "I64"),
        (28, "F64"),
        (29, "IQ1_M"),
        (30, "BF16"),
        (34, "TQ1_0"),
        (35, "TQ2_0"),
        (39, "MXFP4"),
        (40, "NVFP4"),
    ];

    pub fn from_format(format: WeightFormat) -> GgmlType {
        GgmlType(match format {
            WeightFormat::F32 => 0,
            WeightFormat::F16 => 1,
            WeightFormat::Q4_0 => 2,
            WeightFormat::Q4_1 => 3,
            WeightFormat::Q5_0 => 6,
            WeightFormat::Q5_1 => 7,
            WeightFormat::Q8_0 => 8,
            WeightFormat::Q4_K => 12,
            WeightFormat::Q5_K => 13,
            WeightFormat::Q6_K => 14,
            WeightFormat::Bf16 => 30,
        })
    }

    /// The sprout format with this type's exact layout, if there is one.
    pub fn format(self) -> Option<WeightFormat> {
        WeightFormat::ALL
            .into_iter()
            .find(|&f| GgmlType::from_format(f) == self)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Self::NAMES.iter().find(|(id, _)| *id == self.0) {
            Some((_, name)) => f.write_str(name),
            None => write!(f, "unknown type {}", self.0),
        }
    }
}

/// Where one tensor is and how it is stored.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// ggml's `ne`: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Bytes from the start of the data section.
    pub offset: u64,
}

impl GgufTensorInfo {
    /// The tensor's format, or an error naming the tensor and its unsupported type.
    pub fn format(&self) -> Result<WeightFormat, SproutError> {
        self.ggml_type.format().ok_or_else(|| {
            let supported: Vec<String> = WeightFormat::ALL
                .map(|f| GgmlType::from_format(f).to_string())
                .to_vec();
            SproutError::Model(format!(
                "tensor {} has type {}, which sprout does not support yet (supported: {})",
                self.name,
                self.ggml_type,
                supported.join(", ")
            ))
        })
    }

    /// `(rows, cols)`: a vector is one row; dims past the second must be 1.
    pub fn shape(&self) -> Result<(usize, usize), SproutError> {
        let bad = || {
            SproutError::Model(format!(
                "tensor {} has dims {:?}, which is not a matrix or a vector",
                self.name, self.dims
            ))
        };
        let cols = *self.dims.first().ok_or_else(bad)?;
        let rows = self.dims.get(1).copied().unwrap_or(1);
        if self.dims.iter().skip(2).any(|&d| d != 1) {
            return Err(bad());
        }
        Ok((
            usize::try_from(rows).map_err(|_| bad())?,
            usize::try_from(cols).map_err(|_| bad())?,
        ))
    }

    /// Bytes of the tensor's data (supported formats only).
    pub fn byte_len(&self) -> Result<u64, SproutError> {
        let format = self.format()?;
        let (rows, cols) = self.shape()?;
        let row = format
            .row_bytes(cols)
            .map_err(|e| SproutError::Model(format!("tensor {}: {e}", self.name)))?;
        (row as u64)
            .checked_mul(rows as u64)
            .ok_or_else(|| SproutError::Model(format!("tensor {} is impossibly large", self.name)))
    }
}

/// An open GGUF file: its parsed header and the reader its tensors are read from.
pub struct GgufFile<R> {
    reader: R,
    version: u32,
    metadata: GgufMetadata,
    tensors: Vec<GgufTensorInfo>,
    index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl GgufFile<File> {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SproutError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| {
            SproutError::Model(format!("cannot open GGUF file {}: {e}", path.display()))
        })?;
        Self::from_reader(file).map_err(|e| match e {
            SproutError::Model(m) => SproutError::Model(format!("{}: {m}", path.display())),
            other => other,
        })
    }
}

impl<R: Read + Seek> GgufFile<R> {
    /// Parses the header; tensor data stays in the reader until asked for.
    pub fn from_reader(mut reader: R) -> Result<Self, SproutError> {
        let len = reader.seek(SeekFrom::End(0))?;
        reader.seek(SeekFrom::Start(0))?;
        let mut p = Parser {
            r: BufReader::with_capacity(64 * 1024, reader),
            pos: 0,
            len,
            context: "the header".into(),
        };
        let header = p.header().map_err(|e| p.error(e))?;
        let reader = p.r.into_inner();
        let file = GgufFile {
            reader,
            version: header.version,
            index: header
                .tensors
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
            metadata: header.metadata,
            tensors: header.tensors,
            alignment: header.alignment,
            data_offset: header.data_offset,
        };
        file.check_tensors(len)?;
        Ok(file)
    }

    /// Every tensor of a supported type lies inside the file, and no two overlap.
    fn check_tensors(&self, file_len: u64) -> Result<(), SproutError> {
        let mut ranges = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            if !t.offset.is_multiple_of(self.alignment) {
                return Err(SproutError::Model(format!(
                    "tensor {} starts at offset {}, which is not a multiple of the alignment {}",
                    t.name, t.offset, self.alignment
                )));
            }
            // Tensors of unsupported types fail when they are used, not here.
            let Ok(size) = t.byte_len() else { continue };
            let end = self
                .data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(size));
            if end.is_none_or(|end| end > file_len) {
                return Err(SproutError::Model(format!(
                    "GGUF file is truncated or corrupt: tensor {} ({} bytes at offset {} of \
                     the data section, which starts at byte {}) ends past the end of the file \
                     ({file_len} bytes)",
                    t.name, size, t.offset, self.data_offset
                )));
            }
            // Inside the file, so the end cannot overflow.
            ranges.push((t.offset, t.offset + size, &t.name));
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let ((a_start, a_end, a), (b_start, _, b)) = (pair[0], pair[1]);
            if b_start < a_end {
                return Err(SproutError::Model(format!(
                    "tensors {a} and {b} overlap: {a} spans offsets {a_start}..{a_end} of the \
                     data section and {b} starts at offset {b_start}"
                )));
            }
        }
        Ok(())
    }

    /// Reads one tensor's bytes (one allocation, one copy from the reader).
    pub fn read_tensor(&mut self, name: &str) -> Result<TensorData, SproutError> {
        let info = self
            .tensor(name)
            .ok_or_else(|| SproutError::Model(format!("the GGUF file has no tensor {name}")))?;
        let (rows, cols) = info.shape()?;
        let stored = StoredTensor {
            file: "GGUF file",
            name,
            start: self.data_offset + info.offset,
            len: info.byte_len()?,
            format: info.format()?,
            rows,
            cols,
        };
        TensorData::read(&mut self.reader, stored)
    }
}

impl<R> GgufFile<R> {
    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn metadata(&self) -> &GgufMetadata {
        &self.metadata
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Where the data section starts, in bytes from the start of the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }
}

struct Header {
    version: u32,
    metadata: GgufMetadata,
    tensors: Vec<GgufTensorInfo>,
    alignment: u64,
    data_offset: u64,
}

/// Reads the header through a buffer, tracking the position to check lengths.
struct Parser<R> {
    r: BufReader<R>,
    pos: u64,
    len: u64,
    /// What is being read, for error messages.
    context: String,
}

impl<R: Read> Parser<R> {
    fn error(&self, problem: String) -> SproutError {
        SproutError::Model(format!("{problem} (while reading {})", self.context))
    }

    fn header(&mut self) -> Result<Header, String> {
        let magic: [u8; 4] = self.array()?;
        if &magic != b"GGUF" {
            return Err(format!(
                "not a GGUF file: it starts with {magic:02x?} instead of \"GGUF\""
            ));
        }
        let version = self.u32()?;
        match version {
            2 | 3 => {}
            1 => return Err("GGUF version 1 is not supported (only 2 and 3)".into()),
            v if matches!(v.swap_bytes(), 2 | 3) => {
                return Err("big-endian GGUF files are not supported".into());
            }
            v => return Err(format!("unknown GGUF version {v} (sprout reads 2 and 3)")),
        }
        let n_tensors = self.u64()?;
        let n_kv = self.u64()?;
        // Counts size loops and tables: each must fit in the bytes that remain.
        self.need_count("tensor count", n_tensors, MIN_TENSOR_INFO_BYTES)?;
        self.need_count("metadata count", n_kv, MIN_METADATA_ENTRY_BYTES)?;
        let mut metadata = GgufMetadata::default();
        for i in 0..n_kv {
            self.context = format!("metadata entry {i} of {n_kv}");
            let key = self.string()?;
            self.context = format!("metadata `{key}`");
            let ty = self.u32()?;
            let value = self.value(ty, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(format!("metadata key `{key}` appears twice"));
            }
        }
        self.context = "general.alignment".into();
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() => a,
                Some(a) => return Err(format!("general.alignment {a} is not a power of two")),
                None => {
                    return Err(format!(
                        "general.alignment is a {} where an integer was expected",
                        v.type_name()
                    ));
                }
            },
        };
        let mut tensors = Vec::with_capacity(n_tensors.min(1 << 16) as usize);
        let mut seen = std::collections::HashSet::new();
        for i in 0..n_tensors {
            self.context = format!("tensor info {i} of {n_tensors}");
            let name = self.string()?;
            self.context = format!("tensor info of {name}");
            let n_dims = self.u32()?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(format!("{n_dims} dimensions (ggml allows 1 to {MAX_DIMS})"));
            }
            let dims = (0..n_dims)
                .map(|_| self.u64())
                .collect::<Result<Vec<_>, _>>()?;
            if dims.contains(&0) {
                return Err(format!("a dimension of 0 in {dims:?}"));
            }
            // ggml's limit: the element count must fit in an i64.
            let elements = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            if elements.is_none_or(|e| e > i64::MAX as u64) {
                return Err(format!("dims {dims:?}, whose element count overflows"));
            }
            let ggml_type = GgmlType(self.u32()?);
            let offset = self.u64()?;
            if !seen.insert(name.clone()) {
                return Err(format!("tensor {name} appears twice"));
            }
            tensors.push(GgufTensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        self.context = "the data section".into();
        let data_offset = match self.pos.div_ceil(alignment).checked_mul(alignment) {
            Some(o) if o <= self.len || tensors.is_empty() => o,
            o => {
                return Err(format!(
                    "GGUF file is truncated: its data section would start at byte {}, past \
                     its end ({} bytes)",
                    o.map_or("2^64 or later".into(), |o| o.to_string()),
                    self.len
                ));
            }
        };
        Ok(Header {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }

    /// Fails unless `count` items of at least `min_bytes` each fit in the bytes left.
    fn need_count(&self, what: &str, count: u64, min_bytes: u64) -> Result<(), String> {
        let left = self.len - self.pos;
        if count.checked_mul(min_bytes).is_none_or(|n| n > left) {
            return Err(format!(
                "GGUF file is truncated or corrupt: {what} {count} needs at least {min_bytes} \
                 bytes each, but {left} bytes are left at byte {}",
                self.pos
            ));
        }
        Ok(())
    }

    /// Fails unless `n` more bytes exist.
    fn need(&self, n: u64) -> Result<(), String> {
        if n > self.len - self.pos {
            return Err(format!(
                "GGUF file is truncated or corrupt: {n} bytes needed at byte {}, but the file \
                 has {} bytes",
                self.pos, self.len
            ));
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        self.need(N as u64)?;
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| e.to_string())?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.u64()?;
        self.need(n)?;
        let mut bytes = vec![0u8; n as usize];
        self.r.read_exact(&mut bytes).map_err(|e| e.to_string())?;
        self.pos += n;
        String::from_utf8(bytes).map_err(|e| format!("a string that is not UTF-8: {e}"))
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<GgufValue, String> {
        Ok(match ty {
            0 => GgufValue::U8(u8::from_le_bytes(self.array()?)),
            1 => GgufValue::I8(i8::from_le_bytes(self.array()?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.array()?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(format!("a bool stored as {b}")),
            },
            8 => GgufValue::String(self.string()?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err("arrays nested too deeply".into());
                }
                let elem = self.u32()?;
                let count = self.u64()?;
                // A count whose elements cannot fit in the rest of the file is corrupt.
                self.need_count("array length", count, min_value_bytes(elem))?;
                let mut items = Vec::with_capacity(count.min(1 << 20) as usize);
                for _ in 0..count {
                    items.push(self.value(elem, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array()?)),
            t => return Err(format!("unknown metadata value type {t}")),
        })
    }
}

/// The fewest bytes a metadata value of type `ty` takes: its fixed size, a string's or
/// an array's length field (an unknown type fails when its first element is read).
fn min_value_bytes(ty: u32) -> u64 {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::formats::gguf::writer::GgufWriter;
    use crate::formats::quantize;

    fn sample() -> GgufWriter {
        let q8 = quantize(WeightFormat::Q8_0, &[0.5; 64], 32).unwrap();
        GgufWriter::new()
            .metadata("general.alignment", GgufValue::U32(64))
            .metadata("a.u8", GgufValue::U8(7))
            .metadata("a.i64", GgufValue::I64(-3))
            .metadata("a.f32", GgufValue::F32(1e-5))
            .metadata("a.bool", GgufValue::Bool(true))
            .metadata("a.str", GgufValue::String("héllo".into()))
            .metadata(
                "a.strings",
                GgufValue::Array(vec![
                    GgufValue::String("x".into()),
                    GgufValue::String("".into()),
                ]),
            )
            .metadata(
                "a.nested",
                GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::I16(-1)])]),
            )
            .tensor(
                "v",
                &[3],
                GgmlType(0),
                [1.0f32, 2.0, 3.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            )
            .tensor("m", &[32, 2], GgmlType(8), q8)
    }

    #[test]
    fn a_written_file_reads_back() {
        let bytes = sample().to_bytes();
        let mut f = GgufFile::from_reader(Cursor::new(&bytes[..])).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), 64);
        assert_eq!(f.data_offset() % 64, 0);
        let m = f.metadata();
        assert_eq!(m.u64("a.u8").unwrap(), Some(7));
        assert_eq!(m.get("a.i64").unwrap().as_i64(), Some(-3));
        assert_eq!(m.f64("a.f32").unwrap(), Some(1e-5f32 as f64));
        assert_eq!(m.bool("a.bool").unwrap(), Some(true));
        assert_eq!(m.str("a.str").unwrap(), Some("héllo"));
        assert_eq!(m.strings("a.strings").unwrap(), Some(vec!["x", ""]));
        assert_eq!(m.u64("absent").unwrap(), None);
        let err = m.u64("a.str").unwrap_err().to_string();
        assert!(err.contains("a.str") && err.contains("string"), "{err}");
        assert_eq!(f.tensors().len(), 2);
        assert_eq!(f.tensor("m").unwrap().shape().unwrap(), (2, 32));
        let v = f.read_tensor("v").unwrap();
        assert_eq!((v.format, v.rows, v.cols), (WeightFormat::F32, 1, 3));
        assert_eq!(v.to_f32().unwrap(), vec![1.0, 2.0, 3.0]);
        let q = f.read_tensor("m").unwrap();
        assert_eq!(q.format, WeightFormat::Q8_0);
        assert!(q.to_f32().unwrap().iter().all(|&x| (x - 0.5).abs() < 1e-2));
        let err = f.read_tensor("nope").err().unwrap().to_string();
        assert!(err.contains("nope"), "{err}");
    }

    fn open_err(bytes: &[u8]) -> String {
        match GgufFile::from_reader(Cursor::new(bytes)) {
            Ok(_) => panic!("a bad file opened"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_headers_are_named() {
        let good = sample().to_bytes();
        assert!(open_err(b"GGML\x03\0\0\0").contains("not a GGUF file"));
        let mut v1 = good.clone();
        v1[4] = 1;
        assert!(open_err(&v1).contains("version 1"));
        let mut v9 = good.clone();
        v9[4] = 9;
        assert!(open_err(&v9).contains("unknown GGUF version 9"));
        let mut big = good.clone();
        big[4..8].copy_from_slice(&3u32.to_be_bytes());
        assert!(open_err(&big).contains("big-endian"));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let good = sample().to_bytes();
        for len in 0..good.len() {
            let err = open_err(&good[..len]);
            assert!(
                err.contains("truncated") || err.contains("not a GGUF"),
                "{len}: {err}"
            );
        }
    }

    #[test]
    fn absurd_lengths_do_not_allocate() {
        // One metadata entry: an array claiming 2^60 elements.
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.push(b'k');
        b.extend(9u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((1u64 << 60).to_le_bytes());
        let err = open_err(&b);
        assert!(
            err.contains("truncated") && err.contains("metadata `k`"),
            "{err}"
        );
    }

    #[test]
    fn an_unsupported_type_names_the_tensor() {
        // Q2_K, Q3_K, Q8_1, Q8_K and an IQ type: refused by name, with the tensor's.
        for (id, name) in [
            (10, "Q2_K"),
            (11, "Q3_K"),
            (9, "Q8_1"),
            (15, "Q8_K"),
            (23, "IQ4_XS"),
        ] {
            let bytes = GgufWriter::new()
                .tensor(
                    "blk.0.ffn_down.weight",
                    &[256, 2],
                    GgmlType(id),
                    vec![0; 512],
                )
                .to_bytes();
            let f = GgufFile::from_reader(Cursor::new(&bytes[..])).unwrap();
            let err = f
                .tensor("blk.0.ffn_down.weight")
                .unwrap()
                .format()
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                format!(
                    "tensor blk.0.ffn_down.weight has type {name}, which sprout does not \
                     support yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, \
                     Q5_K, Q6_K)"
                )
            );
        }
    }

    #[test]
    fn k_quants_and_five_bit_formats_read_back_as_written() {
        let values: Vec<f32> = (0..2 * 512)
            .map(|i| ((i % 29) as f32 - 14.0) / 9.0)
            .collect();
        for (format, id) in [
            (WeightFormat::Q5_0, 6),
            (WeightFormat::Q5_1, 7),
            (WeightFormat::Q4_K, 12),
            (WeightFormat::Q5_K, 13),
            (WeightFormat::Q6_K, 14),
        ] {
            assert_eq!(GgmlType::from_format(format), GgmlType(id));
            assert_eq!(GgmlType(id).format(), Some(format));
            let bytes = quantize(format, &values, 512).unwrap();
            let file = GgufWriter::new()
                .tensor("w", &[512, 2], GgmlType(id), bytes.clone())
                .to_bytes();
            let mut f = GgufFile::from_reader(Cursor::new(&file[..])).unwrap();
            let t = f.read_tensor("w").unwrap();
            assert_eq!((t.format, t.rows, t.cols), (format, 2, 512));
            assert_eq!(t.bytes, bytes, "{format}");
        }
    }

    #[test]
    fn a_k_quant_row_of_partial_super_blocks_names_the_tensor() {
        // 576 values a row: two super-blocks and a quarter, which Q4_K cannot store.
        let bytes = GgufWriter::new()
            .tensor(
                "blk.0.attn_q.weight",
                &[576, 2],
                GgmlType(12),
                vec![0; 2 * 324],
            )
            .to_bytes();
        let mut f = GgufFile::from_reader(Cursor::new(&bytes[..])).unwrap();
        let err = f
            .read_tensor("blk.0.attn_q.weight")
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("blk.0.attn_q.weight")
                && err.contains("q4_k")
                && err.contains("256")
                && err.contains("576"),
            "{err}"
        );
    }
}
