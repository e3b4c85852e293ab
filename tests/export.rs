//! `sprout export` end to end, on every adapter:
//! - the tiny fixtures (Llama f32, tied Llama bf16, Qwen2 f16 with q/k/v biases) exported
//!   and read back: every tensor's values exactly the source's, the same config, tokenizer
//!   and chat template, and logits within 1e-4 of the source's;
//! - the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) exported to f32: sprout's logits
//!   on the export equal its logits on the GGUF within [`LOGIT_TOLERANCE`] (the same math on
//!   the dequantized weights), and match transformers' on the same export
//!   (`tests/fixtures/export_smollm2.json`, made by `scripts/check_export.py`): prompt ids
//!   and chat rendering equal, top-5 logits within [`LOGIT_TOLERANCE`] at every prompt
//!   position, and over transformers' 16 greedy tokens (teacher forced) the same argmax at
//!   every step and their log-probs within 1e-3;
//! - the export quantized on load gives the GGUF's own blocks back: q4_1 its Q4_1
//!   matrices, q8_0 its Q8_0 embedding, bit for bit.
//!
//! How the directory is written (refusing a non-empty `--out`, never leaving a partial
//! export under its name) is tested beside the code, in `model::export::directory`.

mod common;

use std::path::Path;

use common::fixtures::{check_close, f32s, fixtures, json, load, max_abs_diff, u32s};
use common::scratch::ScratchDir;
use common::{gpus, log_softmax_f64, smollm2_path};
use serde_json::Value;
use sprout::formats::WeightFormat;
use sprout::generate::logits;
use sprout::model::config::Architecture;
use sprout::model::export::directory::{ExportOptions, export};
use sprout::model::fused_weights::{half_split_to_adjacent, permute_head_rows};
use sprout::model::names::{LayerTensor, TensorName};
use sprout::model::open::{OpenedModel, open, open_quantized};
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;
use sprout::tokenizer::chat_template::{ChatTemplate, Message};

/// How far sprout's logits on the f32 export may be from its logits on the GGUF and from
/// transformers' on the export (SmolLM2's logits reach 30). Measured on lavapipe and
/// llvmpipe GL: 0 (bitwise equal) and 3.8e-5; the tests print their figures.
const LOGIT_TOLERANCE: f32 = 1e-3;

fn export_to(model: &mut OpenedModel, out: &Path, format: WeightFormat) {
    let options = ExportOptions {
        format,
        overwrite: false,
    };
    export(model, out, options, &mut |_, _| {}).unwrap();
}

fn values(source: &mut dyn WeightSource, name: TensorName) -> Vec<f32> {
    source.read(&name.to_string()).unwrap().to_f32().unwrap()
}

#[test]
fn tiny_fixtures_export_and_reload_unchanged() {
    let gpus = gpus();
    for name in [
        "tiny-llama",
        "tiny-llama-tied",
        "tiny-qwen2",
        "tiny-smollm3",
        "tiny-gemma3",
    ] {
        let src = fixtures().join(name);
        for format in [WeightFormat::F32, WeightFormat::Bf16] {
            let out = ScratchDir::new("export", &format!("{name}-{format}"));
            let mut model = open(Some(&src)).unwrap();
            export_to(&mut model, out.path(), format);
            let mut back = open(Some(out.path())).unwrap();
            let config = model.source.config().clone();
            assert_eq!(
                serde_json::to_value(back.source.config()).unwrap(),
                serde_json::to_value(&config).unwrap(),
                "{name} {format}: config"
            );
            assert_eq!(back.source.has("lm_head"), !config.tied_embeddings);
            // f32 holds every value as it was; bf16 each value rounded to nearest even. A
            // Gemma norm is read as the multiplier 1 + w and stored as w, which bf16 rounds.
            let gemma = config.architecture == Architecture::Gemma3;
            for tensor in TensorName::all(&config) {
                let hf_norm = gemma && tensor.is_norm();
                let want: Vec<f32> = values(model.source.as_mut(), tensor)
                    .into_iter()
                    .map(|v| match (format, hf_norm) {
                        (WeightFormat::Bf16, true) => 1.0 + half::bf16::from_f32(v - 1.0).to_f32(),
                        (WeightFormat::Bf16, false) => half::bf16::from_f32(v).to_f32(),
                        _ => v,
                    })
                    .collect();
                let got = values(back.source.as_mut(), tensor);
                let same = want.len() == got.len()
                    && want
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{name} {format}: {tensor}");
            }
            assert_eq!(
                back.tokenizer.sha256().unwrap(),
                model.tokenizer.sha256().unwrap()
            );
            assert_eq!(back.chat_template, model.chat_template, "{name}");
            if format != WeightFormat::F32 {
                continue;
            }
            let ids = back
                .tokenizer
                .encode("<|im_start|>user\nThe grey cat counted 27 apples.<|im_end|>")
                .unwrap();
            for gpu in &gpus {
                let (a, b) = (
                    load(gpu, model.source.as_mut()),
                    load(gpu, back.source.as_mut()),
                );
                let want = pollster::block_on(logits(&a, &ids)).unwrap();
                let got = pollster::block_on(logits(&b, &ids)).unwrap();
                let what = format!("{name} exported to f32, on {}: logits", gpu.adapter.label());
                check_close(&what, &got, &want, 1e-4);
            }
        }
    }
}

/// Gemma's norms are read as the multiplier `1 + w` and exported as Hugging Face stores them,
/// `w' = (1 + w) - 1` in f32. `w'` may differ from the file's `w` (bits of a small `w`
/// below 2^-24 are gone), by at most 2^-24 (6e-8), the export's stated tolerance; what
/// transformers computes from it, `1.0 + w'.float()`, is the source's multiplier bit for
/// bit, so transformers runs the export with the norms it ran the source with.
#[test]
fn gemma_norms_export_as_transformers_reads_them() {
    let src = fixtures().join("tiny-gemma3");
    let out = ScratchDir::new("export", "gemma-norms");
    let mut model = open(Some(&src)).unwrap();
    export_to(&mut model, out.path(), WeightFormat::F32);
    let read = |dir: &Path| std::fs::read(dir.join("model.safetensors")).unwrap();
    let (source_bytes, export_bytes) = (read(&src), read(out.path()));
    let source = safetensors::SafeTensors::deserialize(&source_bytes).unwrap();
    let export = safetensors::SafeTensors::deserialize(&export_bytes).unwrap();
    let config = model.source.config().clone();
    let (mut norms, mut moved, mut worst) = (0, 0, 0f32);
    for name in TensorName::all(&config).into_iter().filter(|n| n.is_norm()) {
        let hf = sprout::model::safetensors_dir::hf_name(name, config.architecture);
        // The fixture stores bf16; the export f32.
        let w: Vec<f32> = source
            .tensor(&hf)
            .unwrap()
            .data()
            .chunks(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let exported: Vec<f32> = export
            .tensor(&hf)
            .unwrap()
            .data()
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let multiplier = values(model.source.as_mut(), name);
        for ((&w, &e), &m) in w.iter().zip(&exported).zip(&multiplier) {
            assert_eq!(
                (1.0 + e).to_bits(),
                m.to_bits(),
                "{hf}: 1 + w' is not the multiplier"
            );
            assert_eq!(
                (1.0 + w).to_bits(),
                m.to_bits(),
                "{hf}: 1 + w is not the multiplier"
            );
            worst = worst.max((e - w).abs());
            moved += usize::from(e != w);
        }
        norms += w.len();
    }
    println!("Gemma norms: {norms} values, {moved} moved by the export, at most {worst:e}");
    assert!(worst <= 2f32.powi(-24), "a norm weight moved by {worst}");
}

/// The default model and its export to f32 (removed when dropped).
fn smollm2_and_export(tag: &str) -> (OpenedModel, OpenedModel, ScratchDir) {
    let mut gguf = open(Some(&smollm2_path())).unwrap();
    let out = ScratchDir::new("export", &format!("smollm2-{tag}"));
    export_to(&mut gguf, out.path(), WeightFormat::F32);
    let exported = open(Some(out.path())).unwrap();
    (gguf, exported, out)
}

fn export_fixture() -> Value {
    json(&fixtures().join("export_smollm2.json"))
}

#[test]
fn smollm2_export_computes_what_the_gguf_computes() {
    let (mut gguf, mut exported, _dir) = smollm2_and_export("same-math");
    let fixture = export_fixture();
    for gpu in gpus() {
        let (a, b) = (
            load(&gpu, gguf.source.as_mut()),
            load(&gpu, exported.source.as_mut()),
        );
        assert_eq!(b.weight_format(), "f32");
        let mut worst = 0.0f32;
        for prompt in fixture["prompts"].as_array().unwrap() {
            let ids = u32s(&prompt["prompt_ids"]);
            let want = pollster::block_on(logits(&a, &ids)).unwrap();
            let got = pollster::block_on(logits(&b, &ids)).unwrap();
            worst = worst.max(max_abs_diff(&want, &got));
        }
        println!(
            "SmolLM2 f32 export vs its GGUF in sprout on {}: logits max |diff| {worst:.2e} \
             (every position, every token, 4 prompts)",
            gpu.adapter.label()
        );
        assert!(worst <= LOGIT_TOLERANCE, "logits differ by {worst}");
    }
}

#[test]
fn smollm2_export_matches_transformers_on_it() {
    let (_gguf, mut exported, dir) = smollm2_and_export("transformers");
    let fixture = export_fixture();
    let tokenizer = &exported.tokenizer;
    let vocab = exported.source.config().vocab_size;
    let chat = &fixture["chat"];
    let messages: Vec<Message> = serde_json::from_value(chat["messages"].clone()).unwrap();
    let template = SafetensorsDir::open(dir.path())
        .unwrap()
        .chat_template()
        .unwrap()
        .unwrap();
    let text = |id: Option<u32>| id.map_or(String::new(), |id| tokenizer.decode(&[id]).unwrap());
    let config = exported.source.config().clone();
    let rendered = ChatTemplate::new(
        &template,
        &text(config.bos_token_id),
        &text(config.eos_token_ids.first().copied()),
    )
    .unwrap()
    .render(&messages)
    .unwrap();
    assert_eq!(
        rendered,
        chat["text"].as_str().unwrap(),
        "the exported chat template"
    );
    assert_eq!(tokenizer.encode(&rendered).unwrap(), u32s(&chat["ids"]));
    for gpu in gpus() {
        let decoder = load(&gpu, exported.source.as_mut());
        for prompt in fixture["prompts"].as_array().unwrap() {
            let label = format!(
                "{} on {}",
                prompt["name"].as_str().unwrap(),
                gpu.adapter.label()
            );
            let ids = tokenizer.encode(prompt["text"].as_str().unwrap()).unwrap();
            assert_eq!(ids, u32s(&prompt["prompt_ids"]), "{label}: prompt ids");
            // One pass over the prompt and transformers' greedy tokens: its rows at the
            // prompt give the top-5 logits, the rows after it the greedy choices.
            let want = u32s(&prompt["greedy_ids"]);
            let full: Vec<u32> = ids.iter().chain(&want).copied().collect();
            let got = pollster::block_on(logits(&decoder, &full)).unwrap();
            let row = |pos: usize| &got[pos * vocab..(pos + 1) * vocab];
            let argmax = |pos: usize| {
                let r = row(pos);
                (0..vocab).max_by(|&x, &y| r[x].total_cmp(&r[y])).unwrap() as u32
            };
            let (mut worst, mut argmax_same) = (0.0f32, 0);
            for (pos, (top_ids, top_logits)) in prompt["top_ids"]
                .as_array()
                .unwrap()
                .iter()
                .zip(prompt["top_logits"].as_array().unwrap())
                .enumerate()
            {
                let ours: Vec<f32> = u32s(top_ids)
                    .iter()
                    .map(|&id| row(pos)[id as usize])
                    .collect();
                worst = worst.max(max_abs_diff(&ours, &f32s(top_logits)));
                argmax_same += usize::from(argmax(pos) == u32s(top_ids)[0]);
            }
            let steps = ids.len() - 1..full.len() - 1;
            let chosen: Vec<u32> = steps.clone().map(argmax).collect();
            let logprobs: Vec<f32> = steps
                .zip(&want)
                .map(|(pos, &id)| log_softmax_f64(row(pos))[id as usize] as f32)
                .collect();
            let lp = max_abs_diff(&logprobs, &f32s(&prompt["greedy_logprobs"]));
            println!(
                "{label}: sprout vs transformers on the f32 export: top-5 logits max |diff| \
                 {worst:.2e} over {} positions (argmax equal at {argmax_same}), greedy \
                 {}/{} equal, log-probs max |diff| {lp:.2e}",
                ids.len(),
                chosen.iter().zip(&want).filter(|(a, b)| a == b).count(),
                want.len()
            );
            assert_eq!(argmax_same, ids.len(), "{label}: argmax");
            assert!(
                worst <= LOGIT_TOLERANCE,
                "{label}: logits differ by {worst}"
            );
            assert_eq!(chosen, want, "{label}: greedy tokens");
            assert!(lp <= 1e-3, "{label}: log-probs differ by {lp}");
        }
    }
}

#[test]
fn quantizing_the_f32_export_gives_back_the_ggufs_blocks() {
    let (mut gguf, _, dir) = smollm2_and_export("requantize");
    let config = gguf.source.config().clone();
    let order = half_split_to_adjacent(config.head_dim);
    let mut q4_1 = open_quantized(Some(dir.path()), Some(WeightFormat::Q4_1)).unwrap();
    let (mut blocks, mut differing) = (0usize, 0usize);
    for name in TensorName::all(&config)
        .into_iter()
        .filter(|n| !n.is_vector())
    {
        let want = gguf.source.read(&name.to_string()).unwrap();
        let mut got = q4_1.source.read(&name.to_string()).unwrap();
        assert_eq!(got.format, WeightFormat::Q4_1, "{name}");
        if want.format != WeightFormat::Q4_1 {
            continue;
        }
        // The export holds q and k in Hugging Face's order; the GGUF in adjacent pairs.
        if matches!(name, TensorName::Layer(_, LayerTensor::Q | LayerTensor::K)) {
            permute_head_rows(&mut got, config.head_dim, &order);
        }
        for (a, b) in want.bytes.chunks(20).zip(got.bytes.chunks(20)) {
            blocks += 1;
            differing += usize::from(a != b);
        }
    }
    println!(
        "q4_1 on load of the f32 export: {differing} of {blocks} Q4_1 blocks differ from the GGUF's"
    );
    assert_eq!(differing, 0);
    // The GGUF stores its embedding (the tied output projection too) as Q8_0.
    let mut q8_0 = open_quantized(Some(dir.path()), Some(WeightFormat::Q8_0)).unwrap();
    let want = gguf.source.read("embed").unwrap();
    assert_eq!(want.format, WeightFormat::Q8_0);
    let got = q8_0.source.read("embed").unwrap();
    assert!(
        got.bytes == want.bytes,
        "q8_0 on load: the embedding's blocks differ"
    );
}
