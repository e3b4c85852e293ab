//! Which round trips through a GGUF block format give back the same bytes: a block
//! dequantized (to f32, as `sprout export` writes it) and quantized again on load
//! (`--quantize`, ggml's reference rounding: `sprout::formats::quantize`). The README's
//! claims, each tested here:
//!
//! - Q8_0 (`d`, `q[32]`): exact for a block with `d` a positive finite f16 and some
//!   `|q| = 127`, which is every block ggml's quantizer writes unless its f16 scale rounded
//!   to 0 (a block whose largest magnitude is below about 127 x 2^-25 = 3.8e-6); and for
//!   all-zero blocks.
//! - Q4_0 (`d`, nibbles): exact for a block with `d` a non-zero finite f16 and some nibble
//!   0 (its value `-8d` is the block's signed maximum), which is every block ggml writes
//!   unless its scale rounded to 0 (largest magnitude below 8 x 2^-25 = 2.4e-7); and for
//!   all-zero blocks.
//! - Q4_1 (`d`, `m`, nibbles): exact for a block with `d` a positive finite f16, a nibble 0,
//!   a nibble 15 and `|m| <= 1024 d`, which is every block ggml writes with a non-zero f16
//!   step whose minimum is within 1024 steps of zero (the default model's Q4_1 blocks are
//!   all within 15); and for blocks of one repeated value. Farther from zero it is not always
//!   exact: `d·n + m` rounds in f32 and the step read back can move by one f16 step.
//! - Where the f16 scale rounded to 0, the block comes back as zero quantized values: other
//!   bytes, the same dequantized values.
//!
//! The default model's whole Q4_1 GGUF (3,317,760 blocks) and its Q8_0 embedding are
//! checked the same way in `tests/export.rs`.

use half::f16;
use proptest::prelude::*;
use sprout::formats::{QK, WeightFormat, dequantize, quantize};

/// The block's bytes dequantized to f32 and quantized again.
fn requantized(format: WeightFormat, block: &[u8]) -> Vec<u8> {
    let values = dequantize(format, block, 1, QK).unwrap();
    quantize(format, &values, QK).unwrap()
}

fn scale(block: &[u8]) -> f16 {
    f16::from_le_bytes([block[0], block[1]])
}

/// 32 values `offset + spread * u` with `u` in [-1, 1].
fn values(offset: f32, spread: f32) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-1.0f32..=1.0, QK)
        .prop_map(move |u| u.iter().map(|u| offset + spread * u).collect())
}

/// A spread of 2^e for e in [-17, 10]: from blocks whose f16 scale is subnormal to large ones.
fn spread() -> impl Strategy<Value = f32> {
    (-17i32..=10).prop_map(|e| 2f32.powi(e))
}

/// A positive finite f16, subnormals included.
fn positive_f16() -> impl Strategy<Value = f16> {
    (0x0001u16..=0x7bff).prop_map(f16::from_bits)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn q8_0_blocks_ggml_writes_come_back(x in spread().prop_flat_map(|s| values(0.0, s))) {
        let block = quantize(WeightFormat::Q8_0, &x, QK).unwrap();
        prop_assume!(scale(&block).to_f32() != 0.0);
        prop_assert_eq!(requantized(WeightFormat::Q8_0, &block), block);
    }

    #[test]
    fn q4_0_blocks_ggml_writes_come_back(x in spread().prop_flat_map(|s| values(0.0, s))) {
        let block = quantize(WeightFormat::Q4_0, &x, QK).unwrap();
        prop_assume!(scale(&block).to_f32() != 0.0);
        prop_assert_eq!(requantized(WeightFormat::Q4_0, &block), block);
    }

    #[test]
    fn q4_1_blocks_ggml_writes_come_back(
        x in (spread(), -120i32..=120)
            .prop_flat_map(|(s, k)| values((k as f32 * s).clamp(-6e4, 6e4), s))
    ) {
        let block = quantize(WeightFormat::Q4_1, &x, QK).unwrap();
        let (d, m) = (scale(&block).to_f32(), scale(&block[2..]).to_f32());
        prop_assume!(d > 0.0 && m.is_finite() && m.abs() <= 1024.0 * d);
        prop_assert_eq!(requantized(WeightFormat::Q4_1, &block), block);
    }

    #[test]
    fn q8_0_any_block_with_a_full_scale_value_comes_back(
        d in positive_f16(),
        mut q in prop::collection::vec(-127i8..=127, QK),
        (at, negative) in (0..QK, any::<bool>()),
    ) {
        q[at] = if negative { -127 } else { 127 };
        let mut block = d.to_le_bytes().to_vec();
        block.extend(q.iter().map(|&q| q as u8));
        prop_assert_eq!(requantized(WeightFormat::Q8_0, &block), block);
    }

    #[test]
    fn q4_0_any_block_with_a_zero_nibble_comes_back(
        d in positive_f16(),
        negative in any::<bool>(),
        mut nibbles in prop::collection::vec(0u8..16, QK),
        at in 0..QK,
    ) {
        nibbles[at] = 0;
        let d = if negative { -d } else { d };
        let mut block = d.to_le_bytes().to_vec();
        block.extend((0..QK / 2).map(|j| nibbles[j] | (nibbles[j + QK / 2] << 4)));
        prop_assert_eq!(requantized(WeightFormat::Q4_0, &block), block);
    }

    #[test]
    fn q4_1_any_block_with_both_end_nibbles_near_zero_comes_back(
        d in positive_f16(),
        k in -1024.0f32..=1024.0,
        mut nibbles in prop::collection::vec(0u8..16, QK),
        (lo, apart) in (0..QK, 1..QK),
    ) {
        let m = f16::from_f32((k * d.to_f32()).clamp(-65504.0, 65504.0));
        prop_assume!(m.to_f32().abs() <= 1024.0 * d.to_f32());
        nibbles[lo] = 0;
        nibbles[(lo + apart) % QK] = 15;
        let mut block = d.to_le_bytes().to_vec();
        block.extend(m.to_le_bytes());
        block.extend((0..QK / 2).map(|j| nibbles[j] | (nibbles[j + QK / 2] << 4)));
        prop_assert_eq!(requantized(WeightFormat::Q4_1, &block), block);
    }
}

#[test]
fn zero_and_constant_blocks_come_back() {
    for format in [WeightFormat::Q8_0, WeightFormat::Q4_0, WeightFormat::Q4_1] {
        let zeros = quantize(format, &[0.0; QK], QK).unwrap();
        assert_eq!(requantized(format, &zeros), zeros, "{format}");
    }
    let constant = quantize(WeightFormat::Q4_1, &[0.37; QK], QK).unwrap();
    assert_eq!(scale(&constant).to_f32(), 0.0);
    assert_eq!(requantized(WeightFormat::Q4_1, &constant), constant);
}

#[test]
fn a_scale_that_rounds_to_zero_comes_back_as_zeros_with_the_same_values() {
    let tiny = |amax: f32| -> Vec<f32> {
        (0..QK)
            .map(|j| amax * (j as f32 / 31.0 - 0.5) * 2.0)
            .collect()
    };
    for (format, x) in [
        (WeightFormat::Q8_0, tiny(1e-6)),
        (WeightFormat::Q4_0, tiny(1e-7)),
        (
            WeightFormat::Q4_1,
            tiny(1e-7).iter().map(|v| 0.5 + v).collect(),
        ),
    ] {
        let block = quantize(format, &x, QK).unwrap();
        assert_eq!(scale(&block).to_f32(), 0.0, "{format}: the f16 scale");
        let again = requantized(format, &block);
        assert_ne!(again, block, "{format}: other bytes");
        assert_eq!(
            dequantize(format, &again, 1, QK).unwrap(),
            dequantize(format, &block, 1, QK).unwrap(),
            "{format}: the same values"
        );
    }
}

#[test]
fn q4_1_far_from_zero_is_not_always_exact() {
    // Values 127.99 .. 128.0: the minimum is about 190,000 steps from zero.
    let x: Vec<f32> = (0..QK).map(|j| 127.99 + 0.01 * j as f32 / 31.0).collect();
    let block = quantize(WeightFormat::Q4_1, &x, QK).unwrap();
    let (d, m) = (scale(&block).to_f32(), scale(&block[2..]).to_f32());
    assert!(m.abs() > 1024.0 * d, "m {m}, d {d}");
    let again = requantized(WeightFormat::Q4_1, &block);
    assert_ne!(scale(&again), scale(&block), "the step read back moves");
    assert_eq!(again[4..], block[4..], "the nibbles stay");
}
