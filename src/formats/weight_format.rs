//! Weight formats and their exact byte layouts.
//!
//! A weight matrix is `rows x cols` (a linear layer stores `[out_features, in_features]`),
//! each row contiguous. Quantized formats group each row into blocks of 32 values, or
//! super-blocks of 256 (the K-quants, `k_quants.rs`), laid out bit for bit as GGUF (ggml)
//! defines them:
//!
//! | format | values | bytes | block layout                                                   | value                          |
//! |--------|--------|-------|----------------------------------------------------------------|--------------------------------|
//! | Q8_0   | 32     | 34    | f16 d, i8 q[32]                                                | d * q[j]                       |
//! | Q4_0   | 32     | 18    | f16 d, u8 qs[16] (j<16 low nibble, j>=16 high)                 | d * (nibble - 8)               |
//! | Q4_1   | 32     | 20    | f16 d, f16 m, u8 qs[16] (nibbles as Q4_0)                      | d * nibble + m                 |
//! | Q5_0   | 32     | 22    | f16 d, u32 qh (bit j: value j's fifth bit), u8 qs[16] (as Q4_0) | d * ((nibble \| bit << 4) - 16) |
//! | Q5_1   | 32     | 24    | f16 d, f16 m, u32 qh (as Q5_0), u8 qs[16] (as Q4_0)            | d * (nibble \| bit << 4) + m   |
//! | Q4_K   | 256    | 144   | f16 d, f16 dmin, u8 scales[12], u8 qs[128]                     | (d * sc) * q - dmin * m        |
//! | Q5_K   | 256    | 176   | f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]          | (d * sc) * q - dmin * m        |
//! | Q6_K   | 256    | 210   | u8 ql[128], u8 qh[64], i8 scales[16], f16 d                    | (d * scale) * (q - 32)         |
//!
//! The GPU keeps these bytes (Q8_0, Q5_0 and Q6_K with a little padding, `gpu::weights`)
//! and dequantizes inside its kernels; this module is the CPU side of the same contract
//! (sizes, dequantization for references, and quantization to make test weights: the
//! 32-value formats rounded the way ggml does, the K-quants by a simpler encoder). Each
//! decoder's products are exact and it rounds at most once (the fma of Q4_1, Q5_1, Q4_K and
//! Q5_K), so the GPU's decoders, written in the same order, equal these bit for bit;
//! `tests/quant_goldens.rs` checks these against the `gguf` package's.

use half::{bf16, f16};
use serde::{Deserialize, Serialize};

use super::k_quants::{self, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, QK_K};

/// Values per quantization block of the 32-value formats, and the block every matmul folds
/// (a K-quant super-block is 8 of them).
pub const QK: usize = 32;

/// How a weight tensor's elements are stored. Variants are spelled as GGUF names the types
/// (`Q4_K`, not `Q4K`).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl WeightFormat {
    /// The formats' registry: the kernel suite, `sprout check`, `sprout tune`, the
    /// benchmarks, the GGUF reader and the CLI's format names all iterate it.
    pub const ALL: [WeightFormat; 11] = [
        WeightFormat::F32,
        WeightFormat::F16,
        WeightFormat::Bf16,
        WeightFormat::Q8_0,
        WeightFormat::Q4_0,
        WeightFormat::Q4_1,
        WeightFormat::Q5_0,
        WeightFormat::Q5_1,
        WeightFormat::Q4_K,
        WeightFormat::Q5_K,
        WeightFormat::Q6_K,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "f32",
            WeightFormat::F16 => "f16",
            WeightFormat::Bf16 => "bf16",
            WeightFormat::Q8_0 => "q8_0",
            WeightFormat::Q4_0 => "q4_0",
            WeightFormat::Q4_1 => "q4_1",
            WeightFormat::Q5_0 => "q5_0",
            WeightFormat::Q5_1 => "q5_1",
            WeightFormat::Q4_K => "q4_k",
            WeightFormat::Q5_K => "q5_k",
            WeightFormat::Q6_K => "q6_k",
        }
    }

    /// Elements per storage block (1 for plain floating-point formats; 256 for the
    /// K-quants' super-blocks, so their rows are whole multiples of 256).
    pub fn block_len(self) -> usize {
        match self {
            WeightFormat::F32 | WeightFormat::F16 | WeightFormat::Bf16 => 1,
            WeightFormat::Q8_0
            | WeightFormat::Q4_0
            | WeightFormat::Q4_1
            | WeightFormat::Q5_0
            | WeightFormat::Q5_1 => QK,
            WeightFormat::Q4_K | WeightFormat::Q5_K | WeightFormat::Q6_K => QK_K,
        }
    }

    /// Bytes per storage block.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::F32 => 4,
            WeightFormat::F16 | WeightFormat::Bf16 => 2,
            WeightFormat::Q8_0 => 2 + QK,
            WeightFormat::Q4_0 => 2 + QK / 2,
            WeightFormat::Q4_1 => 4 + QK / 2,
            WeightFormat::Q5_0 => 6 + QK / 2,
            WeightFormat::Q5_1 => 8 + QK / 2,
            WeightFormat::Q4_K => Q4_K_BYTES,
            WeightFormat::Q5_K => Q5_K_BYTES,
            WeightFormat::Q6_K => Q6_K_BYTES,
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// Bytes of one row of `cols` elements, or an error when `cols` does not fill whole blocks.
    pub fn row_bytes(self, cols: usize) -> Result<usize, FormatError> {
        if !cols.is_multiple_of(self.block_len()) {
            return Err(FormatError::PartialBlock {
                format: self,
                cols,
                block: self.block_len(),
            });
        }
        (cols / self.block_len())
            .checked_mul(self.block_bytes())
            .ok_or(FormatError::TooLarge {
                format: self,
                rows: 1,
                cols,
            })
    }

    /// Bytes of `rows` rows of `cols` elements, checked: sizes come from files, and a
    /// wrapped product would size a buffer wrongly instead of failing.
    pub fn matrix_bytes(self, rows: usize, cols: usize) -> Result<usize, FormatError> {
        self.row_bytes(cols)?
            .checked_mul(rows)
            .ok_or(FormatError::TooLarge {
                format: self,
                rows,
                cols,
            })
    }

    /// Checks that `got` bytes hold exactly a `rows x cols` matrix in this format, and
    /// returns the bytes of one row: what every reader of a matrix's bytes checks first.
    pub fn check_matrix(self, rows: usize, cols: usize, got: usize) -> Result<usize, FormatError> {
        let want = self.matrix_bytes(rows, cols)?;
        if got != want {
            return Err(FormatError::WrongSize {
                format: self,
                rows,
                cols,
                got,
                want,
            });
        }
        self.row_bytes(cols)
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("{format} stores rows in blocks of {block} values, but a row has {cols} values")]
    PartialBlock {
        format: WeightFormat,
        cols: usize,
        block: usize,
    },
    #[error(
        "{format} data of {got} bytes does not hold {rows} rows of {cols} values ({want} bytes)"
    )]
    WrongSize {
        format: WeightFormat,
        rows: usize,
        cols: usize,
        got: usize,
        want: usize,
    },
    #[error("{rows} rows of {cols} {format} values take more bytes than this machine can address")]
    TooLarge {
        format: WeightFormat,
        rows: usize,
        cols: usize,
    },
}

/// Decodes one row's bytes into f32 values (the CPU reference of every GPU dequantizer).
pub fn dequantize_row(format: WeightFormat, bytes: &[u8], out: &mut [f32]) {
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    match format {
        WeightFormat::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        WeightFormat::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = h(c);
            }
        }
        WeightFormat::Bf16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        WeightFormat::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(bytes.chunks_exact(34)) {
                let d = h(&b[0..2]);
                for (j, v) in o.iter_mut().enumerate() {
                    *v = d * (b[2 + j] as i8) as f32;
                }
            }
        }
        WeightFormat::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(bytes.chunks_exact(18)) {
                let d = h(&b[0..2]);
                for j in 0..QK / 2 {
                    let q = b[2 + j];
                    o[j] = d * ((q & 0x0f) as i32 - 8) as f32;
                    o[j + QK / 2] = d * ((q >> 4) as i32 - 8) as f32;
                }
            }
        }
        WeightFormat::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(bytes.chunks_exact(20)) {
                let d = h(&b[0..2]);
                let m = h(&b[2..4]);
                for j in 0..QK / 2 {
                    let q = b[4 + j];
                    o[j] = d.mul_add((q & 0x0f) as f32, m);
                    o[j + QK / 2] = d.mul_add((q >> 4) as f32, m);
                }
            }
        }
        WeightFormat::Q5_0 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(bytes.chunks_exact(22)) {
                let d = h(&b[0..2]);
                for (v, q) in o.iter_mut().zip(five_bit_values(&b[2..])) {
                    *v = d * (q as i32 - 16) as f32;
                }
            }
        }
        WeightFormat::Q5_1 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(bytes.chunks_exact(24)) {
                let (d, m) = (h(&b[0..2]), h(&b[2..4]));
                for (v, q) in o.iter_mut().zip(five_bit_values(&b[4..])) {
                    *v = d.mul_add(q as f32, m);
                }
            }
        }
        WeightFormat::Q4_K => {
            for (o, b) in out
                .chunks_exact_mut(QK_K)
                .zip(bytes.chunks_exact(Q4_K_BYTES))
            {
                k_quants::dequantize_q4_k(b, o);
            }
        }
        WeightFormat::Q5_K => {
            for (o, b) in out
                .chunks_exact_mut(QK_K)
                .zip(bytes.chunks_exact(Q5_K_BYTES))
            {
                k_quants::dequantize_q5_k(b, o);
            }
        }
        WeightFormat::Q6_K => {
            for (o, b) in out
                .chunks_exact_mut(QK_K)
                .zip(bytes.chunks_exact(Q6_K_BYTES))
            {
                k_quants::dequantize_q6_k(b, o);
            }
        }
    }
}

/// The 32 five-bit integers of a Q5_0 or Q5_1 block from its u32 of fifth bits (bit `j`:
/// value `j`'s) and the 16 bytes of nibbles after it (ordered as Q4_0's).
fn five_bit_values(qh_qs: &[u8]) -> [u8; QK] {
    let (qh, qs) = qh_qs.split_at(4);
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    std::array::from_fn(|j| {
        let nibble = (qs[j % (QK / 2)] >> (4 * (j / (QK / 2)))) & 0x0f;
        nibble | (((qh >> j) & 1) as u8) << 4
    })
}

/// Q4_1's and Q5_1's rounding (ggml's): a block's range in `levels` steps of `d` from its
/// minimum `m`. Appends f16 `d` and `m` and returns each value's integer in `0..=levels`.
fn min_and_steps(x: &[f32], levels: u8, out: &mut Vec<u8>) -> Vec<u8> {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / f32::from(levels);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    x.iter()
        .map(|v| (((v - min) * id + 0.5) as i8).clamp(0, levels as i8) as u8)
        .collect()
}

/// Appends a Q5_0 or Q5_1 block's u32 of fifth bits and 16 bytes of nibbles for the
/// integers `q` (each below 32): the inverse of [`five_bit_values`].
fn pack_five_bit_values(q: &[u8], out: &mut Vec<u8>) {
    let qh = (0..QK).fold(0u32, |h, j| h | (u32::from(q[j] >> 4) << j));
    out.extend(qh.to_le_bytes());
    out.extend((0..QK / 2).map(|j| (q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4)));
}

/// Decodes a whole `rows x cols` matrix into f32 (references and tests only: the engine
/// never expands weights on the CPU).
pub fn dequantize(
    format: WeightFormat,
    bytes: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Vec<f32>, FormatError> {
    let row_bytes = format.check_matrix(rows, cols, bytes.len())?;
    // The bytes are present, so the values (at most 8 per byte) can be allocated.
    let mut out = vec![0.0f32; rows * cols];
    for (o, b) in out
        .chunks_exact_mut(cols.max(1))
        .zip(bytes.chunks_exact(row_bytes.max(1)))
    {
        dequantize_row(format, b, o);
    }
    Ok(out)
}

/// Encodes f32 values (`rows x cols`, row-major) in `format`, rounding as ggml's reference
/// quantizers do (the K-quants: a simpler encoder of valid blocks close to the values, not
/// ggml's rounding; see `k_quants.rs`). Used to make test weights and fixtures, and the
/// 32-value formats and 16-bit floats to quantize on load.
pub fn quantize(format: WeightFormat, values: &[f32], cols: usize) -> Result<Vec<u8>, FormatError> {
    format.row_bytes(cols)?;
    let mut out = Vec::with_capacity(values.len() / format.block_len() * format.block_bytes());
    match format {
        WeightFormat::F32 => values.iter().for_each(|v| out.extend(v.to_le_bytes())),
        WeightFormat::F16 => values
            .iter()
            .for_each(|v| out.extend(f16::from_f32(*v).to_le_bytes())),
        WeightFormat::Bf16 => values
            .iter()
            .for_each(|v| out.extend(bf16::from_f32(*v).to_le_bytes())),
        WeightFormat::Q8_0 => {
            for x in values.chunks_exact(QK) {
                let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend(f16::from_f32(d).to_le_bytes());
                out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
            }
        }
        WeightFormat::Q4_0 => {
            for x in values.chunks_exact(QK) {
                // The value of largest magnitude, with its sign, maps to -8.
                let max = x
                    .iter()
                    .fold(0.0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
                out.extend(f16::from_f32(d).to_le_bytes());
                out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
            }
        }
        WeightFormat::Q4_1 => {
            for x in values.chunks_exact(QK) {
                let q = min_and_steps(x, 15, &mut out);
                out.extend((0..QK / 2).map(|j| q[j] | (q[j + QK / 2] << 4)));
            }
        }
        WeightFormat::Q5_0 => {
            for x in values.chunks_exact(QK) {
                // As Q4_0 with five bits: the value of largest magnitude, with its sign,
                // maps to -16.
                let max = x
                    .iter()
                    .fold(0.0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = max / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q: Vec<u8> = x
                    .iter()
                    .map(|v| ((v * id + 16.5) as i8).clamp(0, 31) as u8)
                    .collect();
                out.extend(f16::from_f32(d).to_le_bytes());
                pack_five_bit_values(&q, &mut out);
            }
        }
        WeightFormat::Q5_1 => {
            for x in values.chunks_exact(QK) {
                let q = min_and_steps(x, 31, &mut out);
                pack_five_bit_values(&q, &mut out);
            }
        }
        WeightFormat::Q4_K => values
            .chunks_exact(QK_K)
            .for_each(|x| k_quants::quantize_q4_k(x, &mut out)),
        WeightFormat::Q5_K => values
            .chunks_exact(QK_K)
            .for_each(|x| k_quants::quantize_q5_k(x, &mut out)),
        WeightFormat::Q6_K => values
            .chunks_exact(QK_K)
            .for_each(|x| k_quants::quantize_q6_k(x, &mut out)),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_match_ggml() {
        assert_eq!(WeightFormat::Q8_0.row_bytes(64), Ok(68));
        assert_eq!(WeightFormat::Q4_0.row_bytes(64), Ok(36));
        assert_eq!(WeightFormat::Q4_1.row_bytes(64), Ok(40));
        assert_eq!(WeightFormat::Q5_0.row_bytes(64), Ok(44));
        assert_eq!(WeightFormat::Q5_1.row_bytes(64), Ok(48));
        assert_eq!(WeightFormat::Q4_K.row_bytes(512), Ok(288));
        assert_eq!(WeightFormat::Q5_K.row_bytes(512), Ok(352));
        assert!(WeightFormat::Q5_K.row_bytes(288).is_err());
        assert_eq!(WeightFormat::Q6_K.row_bytes(512), Ok(420));
        assert!(WeightFormat::Q4_K.row_bytes(576).is_err());
        assert_eq!(WeightFormat::F16.row_bytes(7), Ok(14));
        assert!(WeightFormat::Q4_1.row_bytes(48).is_err());
    }

    #[test]
    fn sizes_past_the_address_space_are_errors() {
        let huge = usize::MAX / 2 + 1;
        assert!(matches!(
            WeightFormat::F32.row_bytes(huge),
            Err(FormatError::TooLarge { .. })
        ));
        assert!(matches!(
            WeightFormat::Q8_0.matrix_bytes(huge, 64),
            Err(FormatError::TooLarge { .. })
        ));
        assert_eq!(WeightFormat::Q8_0.matrix_bytes(3, 64), Ok(204));
    }

    #[test]
    fn q4_0_nibble_order_is_ggml_order() {
        // d = 1.0, byte j holds value j (low nibble) and value j + 16 (high nibble).
        let mut block = f16::from_f32(1.0).to_le_bytes().to_vec();
        block.extend((0..16u8).map(|j| (j & 0xf) | (((15 - j) & 0xf) << 4)));
        let mut out = [0.0f32; 32];
        dequantize_row(WeightFormat::Q4_0, &block, &mut out);
        assert_eq!(out[3], 3.0 - 8.0);
        assert_eq!(out[16 + 3], (15.0 - 3.0) - 8.0);
    }

    #[test]
    fn quantization_round_trips_within_a_step() {
        let cols = 256;
        let values: Vec<f32> = (0..2 * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        for format in WeightFormat::ALL {
            let bytes = quantize(format, &values, cols).unwrap();
            let back = dequantize(format, &bytes, 2, cols).unwrap();
            // One step of each block's grid (floats: of each value's own; K-quants: of the
            // super-block's coarsest sub-block).
            let span = format.block_len().max(QK);
            for (block, got) in values.chunks(span).zip(back.chunks(span)) {
                let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let (lo, hi) = block
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                let widest = block
                    .chunks(QK)
                    .map(|s| {
                        s.iter().fold(0.0f32, |w, &v| w.max(v))
                            - s.iter().fold(0.0f32, |w, &v| w.min(v))
                    })
                    .fold(0.0f32, f32::max);
                for (a, b) in block.iter().zip(got) {
                    let step = match format {
                        WeightFormat::F32 => 0.0,
                        WeightFormat::F16 => a.abs() / 1024.0,
                        WeightFormat::Bf16 => a.abs() / 128.0,
                        WeightFormat::Q8_0 => amax / 127.0,
                        WeightFormat::Q4_0 => amax / 8.0,
                        WeightFormat::Q4_1 => (hi - lo) / 15.0,
                        WeightFormat::Q5_0 => amax / 16.0,
                        WeightFormat::Q5_1 => (hi - lo) / 31.0,
                        WeightFormat::Q4_K => widest / 15.0,
                        WeightFormat::Q5_K => widest / 31.0,
                        WeightFormat::Q6_K => amax / 32.0,
                    };
                    // A quantized block's scale (and Q4_1's minimum) are stored as f16:
                    // allow for their rounding. A K-quant's sub-block scales (and Q4_K's
                    // minimums) are 6 or 8 bits of the super-block's f16 unit: rounding
                    // them moves the end of a range by up to an eighth of a step (Q6_K:
                    // 32 values of half of 1/127 of the largest scale; Q4_K: 15 of half of
                    // 1/63) and a minimum by 1/126 of the largest.
                    let allowed = match format {
                        WeightFormat::F32 | WeightFormat::F16 | WeightFormat::Bf16 => step,
                        WeightFormat::Q4_K | WeightFormat::Q5_K | WeightFormat::Q6_K => {
                            1.25 * step + amax / 64.0
                        }
                        _ => step + amax / 1024.0,
                    };
                    assert!(
                        (a - b).abs() <= allowed,
                        "{format}: {a} vs {b} (step {step})"
                    );
                }
            }
        }
    }

    #[test]
    fn q5_0_and_q5_1_take_each_fifth_bit_from_qh() {
        // d = 1 (Q5_1: m = -16, so both decode q - 16), every nibble 15; qh sets the fifth
        // bit of values 3 and 16 + 3 only.
        let qh = ((1u32 << 3) | (1 << 19)).to_le_bytes();
        let one = f16::from_f32(1.0).to_le_bytes();
        let q5_0 = [&one[..], &qh, &[0xff; 16]].concat();
        let q5_1 = [
            &one[..],
            &f16::from_f32(-16.0).to_le_bytes(),
            &qh,
            &[0xff; 16],
        ]
        .concat();
        for (format, block) in [(WeightFormat::Q5_0, q5_0), (WeightFormat::Q5_1, q5_1)] {
            let mut out = [0.0f32; QK];
            dequantize_row(format, &block, &mut out);
            for (j, v) in out.iter().enumerate() {
                let want = if j == 3 || j == 19 {
                    31.0 - 16.0
                } else {
                    15.0 - 16.0
                };
                assert_eq!(*v, want, "{format} value {j}");
            }
        }
    }
}
