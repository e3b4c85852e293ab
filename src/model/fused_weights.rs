//! The weight layouts the fused kernels read, made from a model's tensors at load: rows
//! stacked (q, k and v as one matrix), interleaved (gate and up, alternating), or
//! permuted (q and k so that RoPE's pairs are adjacent rows). Plain data on the CPU: rows
//! move as whole byte runs in their stored format, so nothing is rounded.
//!
//! Tensors to be joined must share a format; when they do not (a file may store its v
//! projection at higher precision than q and k), all of them are dequantized to f32,
//! which holds every dequantized value exactly, so the kernels compute the same products.

use crate::error::SproutError;
use crate::formats::TensorData;
use crate::formats::{WeightFormat, dequantize};

/// One format for all of `tensors`: theirs if they agree, f32 (exact) otherwise.
fn common_format(tensors: &[&TensorData]) -> Result<Vec<TensorData>, SproutError> {
    let format = tensors[0].format;
    if tensors.iter().all(|t| t.format == format) {
        return Ok(tensors
            .iter()
            .map(|t| TensorData {
                format,
                rows: t.rows,
                cols: t.cols,
                bytes: t.bytes.clone(),
            })
            .collect());
    }
    tensors
        .iter()
        .map(|t| {
            let values = dequantize(t.format, &t.bytes, t.rows, t.cols)?;
            Ok(TensorData {
                format: WeightFormat::F32,
                rows: t.rows,
                cols: t.cols,
                bytes: bytemuck::cast_slice(&values).to_vec(),
            })
        })
        .collect()
}

fn check_cols(tensors: &[&TensorData]) -> Result<(), SproutError> {
    let cols = tensors[0].cols;
    if let Some(t) = tensors.iter().find(|t| t.cols != cols) {
        return Err(SproutError::Model(format!(
            "cannot join weights of {} and {cols} columns",
            t.cols
        )));
    }
    Ok(())
}

/// The rows of `tensors` one after another.
pub fn stack_rows(tensors: &[&TensorData]) -> Result<TensorData, SproutError> {
    check_cols(tensors)?;
    let parts = common_format(tensors)?;
    let rows = parts.iter().map(|t| t.rows).sum();
    let bytes = parts.iter().flat_map(|t| t.bytes.iter().copied()).collect();
    Ok(TensorData {
        format: parts[0].format,
        rows,
        cols: parts[0].cols,
        bytes,
    })
}

/// Row 2j is `a`'s row j and row 2j + 1 is `b`'s (gate and up for the SiLU-gate epilogue).
pub fn interleave_rows(a: &TensorData, b: &TensorData) -> Result<TensorData, SproutError> {
    check_cols(&[a, b])?;
    if a.rows != b.rows {
        return Err(SproutError::Model(format!(
            "cannot interleave {} rows with {}",
            a.rows, b.rows
        )));
    }
    let parts = common_format(&[a, b])?;
    let row = parts[0].bytes.len() / a.rows.max(1);
    let mut bytes = Vec::with_capacity(2 * parts[0].bytes.len());
    for j in 0..a.rows {
        bytes.extend_from_slice(&parts[0].bytes[j * row..(j + 1) * row]);
        bytes.extend_from_slice(&parts[1].bytes[j * row..(j + 1) * row]);
    }
    Ok(TensorData {
        format: parts[0].format,
        rows: 2 * a.rows,
        cols: a.cols,
        bytes,
    })
}

/// The order of a head's rows that puts RoPE's half-split pairs `(i, i + head_dim / 2)`
/// next to each other: new row 2i is old row i, new row 2i + 1 is old row i + head_dim / 2.
pub fn half_split_to_adjacent(head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..half).flat_map(|i| [i, i + half]).collect()
}

/// The inverse of [`half_split_to_adjacent`]: the order that takes a head's rows from
/// adjacent RoPE pairs (a llama.cpp GGUF's layout, which its converter made by permuting
/// Hugging Face's rows exactly so) back to the half-split layout: new row i is old row 2i,
/// new row i + head_dim / 2 is old row 2i + 1.
pub fn adjacent_to_half_split(head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..head_dim)
        .map(|r| if r < half { 2 * r } else { 2 * (r - half) + 1 })
        .collect()
}

/// Reorders the rows of every head of `t` (`t.rows` a multiple of `head_dim`) by `order`.
pub fn permute_head_rows(t: &mut TensorData, head_dim: usize, order: &[usize]) {
    debug_assert_eq!(order.len(), head_dim);
    let row = t.bytes.len() / t.rows.max(1);
    let old = t.bytes.clone();
    for head in 0..t.rows / head_dim {
        for (new, &from) in order.iter().enumerate() {
            let (dst, src) = (head * head_dim + new, head * head_dim + from);
            t.bytes[dst * row..(dst + 1) * row].copy_from_slice(&old[src * row..(src + 1) * row]);
        }
    }
}

/// Reorders each head's values of a vector (a bias) by `order`.
pub fn permute_head_values(v: &mut [f32], head_dim: usize, order: &[usize]) {
    let old = v.to_vec();
    for head in 0..v.len() / head_dim {
        for (new, &from) in order.iter().enumerate() {
            v[head * head_dim + new] = old[head * head_dim + from];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::quantize;

    fn tensor(format: WeightFormat, rows: usize, cols: usize, seed: f32) -> TensorData {
        let values: Vec<f32> = (0..rows * cols)
            .map(|i| ((i as f32 + seed) * 0.37).sin())
            .collect();
        TensorData {
            format,
            rows,
            cols,
            bytes: quantize(format, &values, cols).unwrap(),
        }
    }

    fn values(t: &TensorData) -> Vec<f32> {
        t.to_f32().unwrap()
    }

    #[test]
    fn stacking_keeps_every_row_exactly_in_its_format() {
        let (q, k) = (
            tensor(WeightFormat::Q4_1, 4, 64, 0.0),
            tensor(WeightFormat::Q4_1, 2, 64, 9.0),
        );
        let s = stack_rows(&[&q, &k]).unwrap();
        assert_eq!((s.format, s.rows, s.cols), (WeightFormat::Q4_1, 6, 64));
        assert_eq!(values(&s), [values(&q), values(&k)].concat());
    }

    #[test]
    fn mixed_formats_join_as_exact_f32() {
        let (q, v) = (
            tensor(WeightFormat::Q4_1, 2, 32, 0.0),
            tensor(WeightFormat::Q8_0, 2, 32, 3.0),
        );
        let s = stack_rows(&[&q, &v]).unwrap();
        assert_eq!(s.format, WeightFormat::F32);
        assert_eq!(values(&s), [values(&q), values(&v)].concat());
    }

    #[test]
    fn interleaving_alternates_rows() {
        let (g, u) = (
            tensor(WeightFormat::F16, 3, 8, 0.0),
            tensor(WeightFormat::F16, 3, 8, 5.0),
        );
        let s = interleave_rows(&g, &u).unwrap();
        let (gv, uv, sv) = (values(&g), values(&u), values(&s));
        for j in 0..3 {
            assert_eq!(sv[2 * j * 8..(2 * j + 1) * 8], gv[j * 8..(j + 1) * 8]);
            assert_eq!(sv[(2 * j + 1) * 8..(2 * j + 2) * 8], uv[j * 8..(j + 1) * 8]);
        }
        assert!(interleave_rows(&g, &tensor(WeightFormat::F16, 2, 8, 0.0)).is_err());
    }

    #[test]
    fn half_split_pairs_become_adjacent_in_every_head() {
        assert_eq!(half_split_to_adjacent(8), [0, 4, 1, 5, 2, 6, 3, 7]);
        let mut t = tensor(WeightFormat::Q8_0, 16, 32, 0.0);
        let before = values(&t);
        let order = half_split_to_adjacent(8);
        permute_head_rows(&mut t, 8, &order);
        let after = values(&t);
        for head in 0..2 {
            for (new, &old) in order.iter().enumerate() {
                let (a, b) = ((head * 8 + new) * 32, (head * 8 + old) * 32);
                assert_eq!(after[a..a + 32], before[b..b + 32]);
            }
        }
        // The inverse order puts every row back where it was.
        permute_head_rows(&mut t, 8, &adjacent_to_half_split(8));
        assert_eq!(values(&t), before);
        let mut bias: Vec<f32> = (0..16).map(|i| i as f32).collect();
        permute_head_values(&mut bias, 8, &order);
        assert_eq!(bias[..8], [0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]);
        assert_eq!(bias[8..], [8.0, 12.0, 9.0, 13.0, 10.0, 14.0, 11.0, 15.0]);
        permute_head_values(&mut bias, 8, &adjacent_to_half_split(8));
        assert!(bias.iter().enumerate().all(|(i, &v)| v == i as f32));
        assert_eq!(adjacent_to_half_split(8), [0, 2, 4, 6, 1, 3, 5, 7]);
    }
}
