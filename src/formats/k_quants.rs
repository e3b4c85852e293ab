//! GGUF's K-quant super-blocks, Q4_K, Q5_K and Q6_K: 256 values each, decoded as ggml lays
//! them out (the CPU reference every GPU decoder in `shaders/weight_formats/` matches bit for
//! bit), and a simple encoder that makes test weights.
//!
//! Layouts (little-endian, f16 = IEEE half):
//! - Q4_K, 144 bytes: f16 `d`, f16 `dmin`, `scales[12]`, `qs[128]`. Eight sub-blocks of 32
//!   values, each with a 6-bit scale `sc` and a 6-bit minimum `m` packed in `scales` (see
//!   [`q4_k_scale_min`]); sub-block `2c` is the low nibbles of `qs[32c..32c + 32]`, `2c + 1`
//!   their high nibbles. Value `= (d * sc) * q - (dmin * m)`.
//! - Q5_K, 176 bytes: Q4_K's `d`, `dmin` and `scales[12]`, then `qh[32]`, then `qs[128]`;
//!   value `l` of sub-block `j` has Q4_K's nibble as its low four bits and bit `j` of
//!   `qh[l]` as its fifth. Value `= (d * sc) * q - (dmin * m)`, as Q4_K's.
//! - Q6_K, 210 bytes: `ql[128]`, `qh[64]`, i8 `scales[16]`, f16 `d` (last). Two halves of 128
//!   values; in half `h`, value `32g + l` (group `g < 4`, `l < 32`) takes its low 4 bits from
//!   nibble `g / 2` of `ql[64h + 32(g % 2) + l]`, its high 2 bits from bits `2g..2g + 2` of
//!   `qh[32h + l]`, and scale `scales[8h + 2g + l / 16]`. Value `= (d * scale) * (q - 32)`.
//!
//! Invariant: decoding is exact. Every product is of an f16 (11 significant bits) and small
//! integers: Q4_K's `d * sc * q` needs 11 + 6 + 4 = 21 bits, Q5_K's 11 + 6 + 5 = 22, Q6_K's
//! `d * scale * (q - 32)` 11 + 7 + 5 = 23, so each is the real product in any order, and
//! Q4_K's and Q5_K's one subtraction is the value's only rounding. A decoder that multiplies
//! in another order, or fuses the last multiply and subtract, gets the same bits.
//!
//! The encoder is not ggml's (whose K-quant rounding searches scales iteratively): it
//! takes each sub-block's range, rounds the scales to the super-block's grid, then rounds
//! each value to the nearest step. Its blocks are valid and close to the values; it exists
//! to make test weights and fixtures, and `--quantize` does not offer these formats.

use half::f16;

/// Values per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of a Q4_K super-block.
pub const Q4_K_BYTES: usize = 144;
/// Bytes of a Q5_K super-block.
pub const Q5_K_BYTES: usize = 176;
/// Bytes of a Q6_K super-block.
pub const Q6_K_BYTES: usize = 210;

fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Sub-block `j`'s (scale, minimum) from Q4_K's 12 packed bytes: for `j < 4` the low six
/// bits of bytes `j` and `j + 4`; for `j >= 4` four bits from byte `j + 4` and the top two
/// bits of bytes `j - 4` and `j`.
pub fn q4_k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Decodes the eight sub-blocks of a Q4_K or Q5_K super-block: `head` starts with its 16
/// bytes of `d`, `dmin` and packed scales, and `q(j, l)` is value `l` of sub-block `j`'s
/// integer.
fn dequantize_scale_min(head: &[u8], q: impl Fn(usize, usize) -> u8, out: &mut [f32]) {
    let (d, dmin) = (f16_at(&head[0..2]), f16_at(&head[2..4]));
    for (j, o) in out.chunks_exact_mut(32).enumerate() {
        let (sc, m) = q4_k_scale_min(&head[4..16], j);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        for (l, v) in o.iter_mut().enumerate() {
            *v = d1.mul_add(q(j, l) as f32, -m1);
        }
    }
}

/// Nibble `j % 2` of `qs[32 (j / 2) + l]`: the low four bits of value `l` of sub-block `j`
/// (Q4_K's whole value, Q5_K's low bits).
fn nibble(qs: &[u8], j: usize, l: usize) -> u8 {
    (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15
}

/// Decodes one Q4_K super-block (`block`: 144 bytes) into `out` (256 values).
pub fn dequantize_q4_k(block: &[u8], out: &mut [f32]) {
    let qs = &block[16..Q4_K_BYTES];
    dequantize_scale_min(block, |j, l| nibble(qs, j, l), out);
}

/// Decodes one Q5_K super-block (`block`: 176 bytes) into `out` (256 values).
pub fn dequantize_q5_k(block: &[u8], out: &mut [f32]) {
    let (qh, qs) = block[16..Q5_K_BYTES].split_at(32);
    dequantize_scale_min(
        block,
        |j, l| nibble(qs, j, l) | (((qh[l] >> j) & 1) << 4),
        out,
    );
}

/// Decodes one Q6_K super-block (`block`: 210 bytes) into `out` (256 values).
pub fn dequantize_q6_k(block: &[u8], out: &mut [f32]) {
    let (ql, rest) = block.split_at(128);
    let (qh, rest) = rest.split_at(64);
    let (scales, d) = rest.split_at(16);
    let d = f16_at(d);
    // 32-value block i is group g = i % 4 of half h = i / 4.
    for (i, o) in out.chunks_exact_mut(32).enumerate() {
        let (h, g) = (i / 4, i % 4);
        for (l, v) in o.iter_mut().enumerate() {
            let lo = (ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
            let hi = (qh[32 * h + l] >> (2 * g)) & 3;
            let q = (lo | (hi << 4)) as i32 - 32;
            let scale = scales[8 * h + 2 * g + l / 16] as i8;
            *v = (d * scale as f32) * q as f32;
        }
    }
}

/// `x / step` rounded to the nearest integer in `lo..=hi` (0 when the step is 0).
fn nearest(x: f32, step: f32, lo: i32, hi: i32) -> i32 {
    if step == 0.0 {
        return 0;
    }
    ((x / step).round() as i32).clamp(lo, hi)
}

/// Q4_K's 12 bytes holding eight 6-bit scales and minimums (the inverse of
/// [`q4_k_scale_min`]).
fn pack_scale_min(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut scales = [0u8; 12];
    for i in 0..4 {
        scales[i] = sc[i] | ((sc[i + 4] >> 4) << 6);
        scales[i + 4] = m[i] | ((m[i + 4] >> 4) << 6);
        scales[i + 8] = (sc[i + 4] & 15) | ((m[i + 4] & 15) << 4);
    }
    scales
}

/// The first 16 bytes of a Q4_K or Q5_K super-block for 256 values (`d`, `dmin`, the packed
/// scales and minimums, each sub-block's range spanning `levels` steps), appended to `out`,
/// and each value's integer in `0..=levels`.
fn quantize_scale_min(x: &[f32], levels: u8, out: &mut Vec<u8>) -> [u8; QK_K] {
    // Each sub-block's step and minimum (at most 0: stored as its negation, `m >= 0`).
    let mut steps = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    for (j, sub) in x.chunks_exact(32).enumerate() {
        let lo = sub.iter().copied().fold(0.0f32, f32::min);
        let hi = sub.iter().copied().fold(lo, f32::max);
        steps[j] = (hi - lo) / levels as f32;
        mins[j] = -lo;
    }
    let d = f16::from_f32(steps.iter().copied().fold(0.0, f32::max) / 63.0);
    let dmin = f16::from_f32(mins.iter().copied().fold(0.0, f32::max) / 63.0);
    let (df, dminf) = (d.to_f32(), dmin.to_f32());
    let sc: [u8; 8] = std::array::from_fn(|j| nearest(steps[j], df, 0, 63) as u8);
    let m: [u8; 8] = std::array::from_fn(|j| nearest(mins[j], dminf, 0, 63) as u8);
    out.extend(d.to_le_bytes());
    out.extend(dmin.to_le_bytes());
    out.extend(pack_scale_min(&sc, &m));
    std::array::from_fn(|v| {
        let j = v / 32;
        let (d1, m1) = (df * sc[j] as f32, dminf * m[j] as f32);
        nearest(x[v] + m1, d1, 0, levels.into()) as u8
    })
}

/// The 128 bytes of nibbles of a Q4_K or Q5_K super-block whose values' integers are `q`
/// (their low four bits).
fn pack_nibbles(q: &[u8; QK_K], out: &mut Vec<u8>) {
    for c in 0..4 {
        out.extend((0..32).map(|l| (q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4)));
    }
}

/// Encodes 256 values as one Q4_K super-block (test weights; see the module doc).
pub fn quantize_q4_k(x: &[f32], out: &mut Vec<u8>) {
    let q = quantize_scale_min(x, 15, out);
    pack_nibbles(&q, out);
}

/// Encodes 256 values as one Q5_K super-block (test weights; see the module doc).
pub fn quantize_q5_k(x: &[f32], out: &mut Vec<u8>) {
    let q = quantize_scale_min(x, 31, out);
    // qh[l]: bit j is the fifth bit of value l of sub-block j.
    out.extend((0..32).map(|l| (0..8).fold(0u8, |h, j| h | ((q[32 * j + l] >> 4) << j))));
    pack_nibbles(&q, out);
}

/// Encodes 256 values as one Q6_K super-block (test weights; see the module doc).
pub fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    // Each 16-value group's scale maps its value of largest magnitude, signed, to -32.
    let group_scales: Vec<f32> = x
        .chunks_exact(16)
        .map(|g| {
            g.iter()
                .fold(0.0f32, |a, &v| if v.abs() > a.abs() { v } else { a })
                / -32.0
        })
        .collect();
    let largest = group_scales.iter().fold(0.0f32, |a, s| a.max(s.abs()));
    let d = f16::from_f32(largest / 127.0);
    let df = d.to_f32();
    let scales: Vec<i8> = group_scales
        .iter()
        .map(|&s| nearest(s, df, -128, 127) as i8)
        .collect();
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (v, &value) in x.iter().enumerate() {
        let step = df * scales[v / 16] as f32;
        let q = (nearest(value, step, -32, 31) + 32) as u8;
        let (h, g, l) = (v / 128, (v % 128) / 32, v % 32);
        ql[64 * h + 32 * (g % 2) + l] |= (q & 15) << (4 * (g / 2));
        qh[32 * h + l] |= (q >> 4) << (2 * g);
    }
    out.extend(ql);
    out.extend(qh);
    out.extend(scales.iter().map(|&s| s as u8));
    out.extend(d.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_scales_unpack_as_packed() {
        // Sub-block j's scale is 40 + j, its minimum 20 + j: every bit of the packing used.
        let (sc, m): ([u8; 8], [u8; 8]) = (
            std::array::from_fn(|j| 40 + j as u8),
            std::array::from_fn(|j| 20 + j as u8 + if j >= 4 { 32 } else { 0 }),
        );
        let scales = pack_scale_min(&sc, &m);
        for j in 0..8 {
            assert_eq!(q4_k_scale_min(&scales, j), (sc[j], m[j]), "sub-block {j}");
        }
    }

    #[test]
    fn q6_k_places_each_value_where_the_layout_says() {
        // d = 1, every scale 1: value v decodes to q - 32 for the q written at its place.
        let mut block = vec![0u8; Q6_K_BYTES];
        block[192..208].fill(1);
        block[208..210].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        // Value 128 + 64 + 5 (h = 1, g = 2, l = 5): high nibble of ql[64 + 5], bits 4..6
        // of qh[32 + 5]; q = 0b10_0111 = 39.
        block[64 + 5] = 0x70;
        block[128 + 32 + 5] = 0b10 << 4;
        let mut out = [0.0f32; QK_K];
        dequantize_q6_k(&block, &mut out);
        assert_eq!(out[128 + 64 + 5], 39.0 - 32.0);
        assert_eq!(
            out.iter().filter(|&&v| v != -32.0).count(),
            1,
            "only one value is not q = 0"
        );
    }

    #[test]
    fn q5_k_takes_each_fifth_bit_from_qh() {
        // d = 1, dmin = 0, every scale 1, every nibble 15: a value is 15, or 31 where its
        // fifth bit is set. Bit 5 of qh[7] is value 7 of sub-block 5 (qs's high nibbles of
        // bytes 64..96, at 5 * 32 + 7).
        let mut block = vec![0u8; Q5_K_BYTES];
        block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[4..16].copy_from_slice(&pack_scale_min(&[1; 8], &[0; 8]));
        block[16 + 7] = 1 << 5;
        block[48..].fill(0xff);
        let mut out = [0.0f32; QK_K];
        dequantize_q5_k(&block, &mut out);
        for (v, &got) in out.iter().enumerate() {
            let want = if v == 5 * 32 + 7 { 31.0 } else { 15.0 };
            assert_eq!(got, want, "value {v}");
        }
    }

    #[test]
    fn encoders_round_trip_close_to_the_values() {
        let x: Vec<f32> = (0..QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0)
            .collect();
        // Values in ±0.84: Q4_K's step is about 1.67 / 15 = 0.11, Q5_K's 1.67 / 31 = 0.054,
        // Q6_K's 0.84 / 32 = 0.026; each encoder is within about one step (scales rounded to
        // 6 or 8 bits).
        for (encode, decode, bytes, bound) in [
            (
                quantize_q4_k as fn(&[f32], &mut Vec<u8>),
                dequantize_q4_k as fn(&[u8], &mut [f32]),
                Q4_K_BYTES,
                0.12,
            ),
            (quantize_q5_k, dequantize_q5_k, Q5_K_BYTES, 0.06),
            (quantize_q6_k, dequantize_q6_k, Q6_K_BYTES, 0.03),
        ] {
            let mut block = Vec::new();
            encode(&x, &mut block);
            assert_eq!(block.len(), bytes);
            let mut back = [0.0f32; QK_K];
            decode(&block, &mut back);
            let worst = x
                .iter()
                .zip(&back)
                .fold(0.0f32, |w, (a, b)| w.max((a - b).abs()));
            assert!(worst < bound, "{bytes}-byte blocks: worst error {worst}");
        }
    }
}
