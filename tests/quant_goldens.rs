//! sprout's block formats against an independent implementation of ggml's layouts: the
//! `gguf` Python package (tests/fixtures/quant_goldens.json, made by
//! scripts/quant_goldens.py).
//!
//! - Q5_0, Q4_K, Q6_K, Q5_1 and Q5_K blocks of random bytes (their f16 scales normals,
//!   subnormals and zeros) decode to gguf's float32 values bit for bit. Exactly, not within
//!   a tolerance: every value is the exact product of an f16 and small integers (at most 23
//!   significant bits), so the order numpy multiplies in cannot change it, and the one
//!   addition of Q5_1, Q4_K and Q5_K rounds the same in any implementation (see
//!   src/formats/k_quants.rs).
//! - Q5_0's and Q5_1's quantizers give gguf's (ggml's reference rounding) bytes for the
//!   same values.

use serde::Deserialize;
use sprout::formats::{WeightFormat, dequantize, quantize};

#[derive(Deserialize)]
struct Fixture {
    dequantize: Vec<Case>,
    quantize: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    format: String,
    /// The blocks' bytes, hex.
    blocks: String,
    /// f32 bit patterns.
    values: Vec<u32>,
}

fn fixture() -> Fixture {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant_goldens.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn format(name: &str) -> WeightFormat {
    WeightFormat::ALL
        .into_iter()
        .find(|f| f.name() == name)
        .unwrap_or_else(|| panic!("no format {name}"))
}

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn blocks_decode_to_the_gguf_packages_values_exactly() {
    let cases = fixture().dequantize;
    let names: Vec<&str> = cases.iter().map(|c| c.format.as_str()).collect();
    assert_eq!(names, ["q5_0", "q4_k", "q6_k", "q5_1", "q5_k"]);
    for case in &cases {
        let format = format(&case.format);
        let blocks = bytes(&case.blocks);
        let n = case.values.len();
        assert_eq!(blocks.len() / format.block_bytes() * format.block_len(), n);
        // One row of every block, and the same blocks as rows of one block each.
        let whole = dequantize(format, &blocks, 1, n).unwrap();
        let rows = dequantize(format, &blocks, n / format.block_len(), format.block_len());
        for (got, label) in [(whole, "one row"), (rows.unwrap(), "a block a row")] {
            let mut tiny = 0;
            for (i, (g, &want)) in got.iter().zip(&case.values).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    want,
                    "{format} ({label}) value {i}: {g} vs gguf's {}",
                    f32::from_bits(want)
                );
                tiny += usize::from(g.abs() > 0.0 && g.abs() < 6.1e-5);
            }
            assert!(
                tiny > 0,
                "{format}: no value below 6.1e-5 (the scales include subnormals)"
            );
        }
    }
}

#[test]
fn q5_0_and_q5_1_quantize_as_the_gguf_package_does() {
    let cases = fixture().quantize;
    let names: Vec<&str> = cases.iter().map(|c| c.format.as_str()).collect();
    assert_eq!(names, ["q5_0", "q5_1"]);
    for case in &cases {
        let format = format(&case.format);
        let values: Vec<f32> = case.values.iter().map(|&b| f32::from_bits(b)).collect();
        let got = quantize(format, &values, values.len()).unwrap();
        assert_eq!(got, bytes(&case.blocks), "{format}");
    }
}
