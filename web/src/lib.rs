//! sprout's engine in the browser: the wasm32 bindings the demo page (web/index.html)
//! calls through wasm-bindgen.
//!
//! A [`Session`] owns the browser's WebGPU device and, once one is loaded, a model (its
//! weights on the GPU, its tokenizer and its chat template). [`Session::rollout`] runs one
//! group of G samples of a prompt through sprout's own engine, scheduler and WGSL kernels,
//! the same code as native, and reports every step to a JavaScript callback: the tokens
//! drawn, each sample's text so far, tokens/s, and a picture of the KV block pool. Nothing
//! about the model, the chat template or sampling is computed in JavaScript.
//!
//! In chat mode the prompt is one user message, rendered by the model's own template with
//! the library's [`ChatTemplate`] (as native `sprout rollout` renders a prompts file's
//! `"messages"`), so the same message gives the same token ids and samples as native.
//!
//! The page runs a session inside a Web Worker (web/page/worker.js), so that the page
//! stays responsive while the engine works. [`Session::stop`] asks the running rollout to
//! stop: between two steps it aborts the request, which gives every KV block back, and its
//! last report shows the pool with them freed.
//!
//! Options and reports cross the boundary as JSON strings (see [`RolloutOptions`],
//! [`StepReport`] and [`RolloutResult`]), so the page needs no generated type bindings.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use web_time::Instant;

use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::gpu::Gpu;
use sprout::gpu::adapter::{AdapterSummary, BackendChoice};
use sprout::gpu::tuning::KernelChoices;
use sprout::model::config::Architecture;
use sprout::model::decoder::{Decoder, check_supported};
use sprout::model::gguf_model::GgufModel;
use sprout::model::source::WeightSource;
use sprout::sched::{BlockUse, FinishReason, Request, SamplingParams, block_map};
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::{ChatTemplate, Message};

/// The most samples one rollout may ask for (the page's columns).
pub const MAX_SAMPLES: usize = 64;

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// A loaded model: its weights on the device, its tokenizer and its chat template (when
/// the file has one).
struct Model {
    name: String,
    decoder: Decoder,
    tokenizer: Tokenizer,
    chat_template: Option<ChatTemplate>,
}

/// What the page shows about a loaded model.
#[derive(Serialize)]
struct ModelReport {
    name: String,
    architecture: Architecture,
    n_layers: usize,
    hidden_size: usize,
    vocab_size: usize,
    weight_format: String,
    bytes: usize,
    load_s: f64,
    /// Whether the model has a chat template (the page then starts in chat mode).
    chat_template: bool,
}

#[wasm_bindgen]
pub struct Session {
    gpu: Arc<Gpu>,
    model: Option<Rc<Model>>,
    /// Set by [`Session::stop`]; the running rollout reads it between steps.
    stop: Rc<Cell<bool>>,
}

#[wasm_bindgen]
impl Session {
    /// Opens the browser's WebGPU adapter and a device on it. Fails with a message that
    /// says what to do when the browser has no WebGPU.
    pub async fn open() -> Result<Session, JsError> {
        let gpu = Gpu::open(BackendChoice::Auto).await.map_err(|e| {
            js_error(format!(
                "{e}. This page needs WebGPU: use a browser that has it (Chrome or Edge 113 \
                 or newer, Safari 26, Firefox 141 on Windows), or start Chromium with \
                 --enable-unsafe-webgpu"
            ))
        })?;
        Ok(Session {
            gpu,
            model: None,
            stop: Rc::new(Cell::new(false)),
        })
    }

    /// The adapter in use, as JSON (`sprout devices`' fields: backend, name, device_type,
    /// driver, shader_f16, subgroups, ...).
    pub fn adapter(&self) -> String {
        summary_json(&self.gpu.adapter)
    }

    /// Loads a GGUF model from its bytes, replacing the one loaded before; returns what it
    /// is, as JSON. A file that is not a model sprout can run leaves the old model loaded.
    pub fn load_model(&mut self, name: String, bytes: Vec<u8>) -> Result<String, JsError> {
        let started = Instant::now();
        let size = bytes.len();
        let mut gguf = GgufModel::from_reader(std::io::Cursor::new(bytes))
            .map_err(|e| js_error(format!("{name}: {e}")))?;
        let tokenizer = gguf
            .tokenizer()
            .map_err(|e| js_error(format!("{name}: {e}")))?;
        check_supported(gguf.config()).map_err(|e| js_error(format!("{name}: {e}")))?;
        let template_source = gguf.chat_template().map(str::to_string);
        // The file reads as a model sprout runs: let the old model's buffers go before the
        // new one's are made, so that two models never share the browser's GPU memory.
        self.model = None;
        self.gpu.forget_bind_groups();
        let decoder = Decoder::load(self.gpu.clone(), &mut gguf, &mut |_, _| {})
            .map_err(|e| js_error(format!("{name}: {e}")))?;
        let c = &decoder.config;
        let report = ModelReport {
            name: name.clone(),
            architecture: c.architecture,
            n_layers: c.n_layers,
            hidden_size: c.hidden_size,
            vocab_size: c.vocab_size,
            weight_format: decoder.weight_format(),
            bytes: size,
            load_s: started.elapsed().as_secs_f64(),
            chat_template: template_source.is_some(),
        };
        // A template that does not compile is an error now, not at the first chat.
        let chat_template = template_source
            .map(|source| {
                let tokens = decoder.config.template_tokens();
                ChatTemplate::for_model(&source, &tokenizer, tokens)
            })
            .transpose()
            .map_err(|e| js_error(format!("{name}: {e}")))?;
        self.model = Some(Rc::new(Model {
            name,
            decoder,
            tokenizer,
            chat_template,
        }));
        serde_json::to_string(&report).map_err(js_error)
    }

    /// Asks the running rollout, if any, to stop after its current step: it aborts, its
    /// KV blocks go back to the pool, and it resolves with what its samples had.
    pub fn stop(&self) {
        self.stop.set(true);
    }

    /// The name of the model loaded now, if any.
    pub fn model_name(&self) -> Option<String> {
        self.model.as_ref().map(|m| m.name.clone())
    }

    /// Runs G samples of one prompt; `options` is a [`RolloutOptions`] as JSON. Calls
    /// `on_step` with a [`StepReport`] (JSON) after every step and resolves to a
    /// [`RolloutResult`] (JSON).
    pub fn rollout(&self, options: String, on_step: js_sys::Function) -> js_sys::Promise {
        let model = self.model.clone();
        let stop = self.stop.clone();
        stop.set(false);
        wasm_bindgen_futures::future_to_promise(async move {
            let model = model.ok_or_else(|| JsValue::from(js_error("load a model first")))?;
            let options: RolloutOptions = serde_json::from_str(&options)
                .map_err(|e| JsValue::from(js_error(format!("rollout options: {e}"))))?;
            let result = run_rollout(&model, &options, &on_step, &stop).await?;
            Ok(JsValue::from(
                serde_json::to_string(&result).map_err(|e| JsValue::from(js_error(e)))?,
            ))
        })
    }
}

fn summary_json(summary: &AdapterSummary) -> String {
    serde_json::to_string(summary).unwrap_or_else(|_| "{}".into())
}

/// What the page asks for: the same meaning as `sprout rollout`'s options of the same
/// names. The prompt is raw text, or with `chat` one user message rendered by the model's
/// chat template.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutOptions {
    prompt: String,
    /// The prompt is a user message, rendered with the model's chat template.
    #[serde(default)]
    chat: bool,
    n: usize,
    max_tokens: usize,
    temperature: f32,
    #[serde(default = "one")]
    top_p: f32,
    #[serde(default)]
    top_k: usize,
    seed: u64,
    /// KV pool budget in MiB (over all layers, K and V).
    #[serde(default = "default_kv_mib")]
    kv_mib: u64,
    /// Which kernels run: the adapter's own kind (`auto`), or the CPU-shaped or GPU-shaped
    /// ones forced. Every kind computes the same tokens.
    #[serde(default)]
    kernels: Kernels,
}

#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Kernels {
    #[default]
    Auto,
    Cpu,
    Gpu,
}

fn one() -> f32 {
    1.0
}

fn default_kv_mib() -> u64 {
    64
}

impl RolloutOptions {
    /// The prompt's token ids: its text as it is, or in chat mode the prompt of one user
    /// message as the model's template renders it (`ChatTemplate::prompt_ids`, the same
    /// code as a native prompts file's `"messages"`).
    fn prompt_ids(&self, model: &Model) -> Result<Vec<u32>, String> {
        if !self.chat {
            return model
                .tokenizer
                .encode(&self.prompt)
                .map_err(|e| e.to_string());
        }
        let template = model.chat_template.as_ref().ok_or_else(|| {
            format!(
                "{} has no chat template: turn chat mode off to send the prompt as it is",
                model.name
            )
        })?;
        let messages = [Message::new("user", &self.prompt)];
        template
            .prompt_ids(&model.tokenizer, &messages)
            .map_err(|e| e.to_string())
    }

    /// The sampling parameters the options ask for (no stop tokens).
    fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_tokens,
            ..SamplingParams::default()
        }
    }

    /// The first thing wrong with the options, as the page should say it.
    fn check(&self) -> Result<(), String> {
        if self.prompt.trim().is_empty() {
            return Err("the prompt is empty".into());
        }
        if !(1..=MAX_SAMPLES).contains(&self.n) {
            return Err(format!("G must be from 1 to {MAX_SAMPLES}, not {}", self.n));
        }
        self.params()
            .validate()
            .map_err(|e| e.message_for(&e.param.replace('_', "-")))?;
        if self.kv_mib == 0 {
            return Err("the KV memory must be at least 1 MiB".into());
        }
        Ok(())
    }
}

/// One step, as the page draws it.
#[derive(Serialize)]
pub struct StepReport {
    step: usize,
    /// Tokens computed this step (prefill and decode).
    tokens: usize,
    /// Each sample's text so far, by sample index.
    texts: Vec<String>,
    /// Generated tokens per sample so far.
    lengths: Vec<usize>,
    /// Which samples have finished.
    finished: Vec<bool>,
    generated_tokens: usize,
    elapsed_s: f64,
    tokens_per_s: f64,
    /// The use of every block of the KV pool, by block id.
    pool: Vec<BlockUse>,
    /// The rollout was stopped: this is its last report, after its blocks were freed.
    stopped: bool,
}

#[derive(Serialize)]
pub struct SampleResult {
    sample_index: u32,
    token_ids: Vec<u32>,
    logprobs: Vec<f32>,
    text: String,
    finish_reason: FinishReason,
}

#[derive(Serialize)]
pub struct RolloutResult {
    model: String,
    adapter: AdapterSummary,
    prompt_token_ids: Vec<u32>,
    samples: Vec<SampleResult>,
    generated_tokens: usize,
    prefill_tokens_computed: usize,
    peak_kv_blocks: usize,
    num_blocks: usize,
    steps: usize,
    wall_s: f64,
    tokens_per_s: f64,
    /// Stopped before every sample finished ([`Session::stop`]).
    stopped: bool,
    /// KV blocks still held by a sequence when the rollout ended (0 once it has).
    blocks_in_use: usize,
}

async fn run_rollout(
    model: &Model,
    options: &RolloutOptions,
    on_step: &js_sys::Function,
    stop: &Cell<bool>,
) -> Result<RolloutResult, JsValue> {
    let fail = |e: &dyn std::fmt::Display| JsValue::from(js_error(e));
    options.check().map_err(|e| fail(&e))?;
    let decoder = &model.decoder;
    let cpu_shaped = match options.kernels {
        Kernels::Auto => decoder.gpu.cpu_shaped_defaults(),
        Kernels::Cpu => true,
        Kernels::Gpu => false,
    };
    decoder.set_choices(KernelChoices::defaults(cpu_shaped));
    let tokenizer = &model.tokenizer;
    let prompt = options.prompt_ids(model).map_err(|e| fail(&e))?;
    let config = EngineConfig {
        kv: KvSize::Memory(options.kv_mib << 20),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(decoder, &config)
        .map_err(|e| fail(&e))?
        .with_tokenizer(tokenizer);
    let n = options.n;
    let id = engine
        .add_request(Request {
            index: 0,
            prompt: prompt.clone(),
            n,
            params: SamplingParams {
                stop_ids: decoder.config.eos_token_ids.clone(),
                ..options.params()
            },
            forced: Vec::new(),
            cache_salt: None,
            lora: false,
        })
        .map_err(|e| fail(&e))?;

    let started = Instant::now();
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut samples = Vec::new();
    let mut stopped = false;
    while engine.has_work() {
        if stop.get() && !stopped && engine.scheduler().has_request(id) {
            stopped = true;
            // Only the unfinished samples come back, with what they had.
            for mut s in engine.abort(id).map_err(|e| fail(&e))? {
                // With overlap, the step in flight may have left a placeholder for its draw:
                // the tokens reported so far are the sample's.
                s.token_ids = tokens[s.sample_index as usize].clone();
                s.logprobs.truncate(s.token_ids.len());
                samples.push(s);
            }
        }
        let out = engine.step().await.map_err(|e| fail(&e))?;
        if stopped {
            // The step in flight when it stopped: its draws belong to no sample now.
            continue;
        }
        for d in &out.drawn {
            tokens[d.sample_index as usize].push(d.token);
        }
        for s in &out.finished {
            // A stop string may have cut the sample: its final tokens are the ones to show.
            tokens[s.sample_index as usize] = s.token_ids.clone();
        }
        samples.extend(out.finished);
        let mut finished = vec![false; n];
        for s in &samples {
            finished[s.sample_index as usize] = true;
        }
        let generated: usize = tokens.iter().map(Vec::len).sum();
        let elapsed_s = started.elapsed().as_secs_f64();
        let texts = tokens
            .iter()
            .map(|ids| tokenizer.decode_with(ids, true))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(&e))?;
        let scheduler = engine.scheduler();
        let report = StepReport {
            step: engine.stats().steps,
            tokens: out.tokens,
            texts,
            lengths: tokens.iter().map(Vec::len).collect(),
            finished,
            generated_tokens: generated,
            elapsed_s,
            tokens_per_s: generated as f64 / elapsed_s.max(1e-9),
            pool: block_map(scheduler.pool(), &scheduler.block_tables()),
            stopped: false,
        };
        let json = serde_json::to_string(&report).map_err(|e| fail(&e))?;
        on_step.call1(&JsValue::NULL, &JsValue::from(json))?;
    }
    let scheduler = engine.scheduler();
    let pool = block_map(scheduler.pool(), &scheduler.block_tables());
    let blocks_in_use = pool
        .iter()
        .filter(|b| matches!(b, BlockUse::Shared { .. } | BlockUse::Private { .. }))
        .count();
    if stopped {
        // The last picture: the samples as they stopped, and the pool with their blocks
        // given back.
        let texts = tokens
            .iter()
            .map(|ids| tokenizer.decode_with(ids, true))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(&e))?;
        let generated: usize = tokens.iter().map(Vec::len).sum();
        let elapsed_s = started.elapsed().as_secs_f64();
        let report = StepReport {
            step: engine.stats().steps,
            tokens: 0,
            texts,
            lengths: tokens.iter().map(Vec::len).collect(),
            finished: vec![true; n],
            generated_tokens: generated,
            elapsed_s,
            tokens_per_s: generated as f64 / elapsed_s.max(1e-9),
            pool,
            stopped: true,
        };
        let json = serde_json::to_string(&report).map_err(|e| fail(&e))?;
        on_step.call1(&JsValue::NULL, &JsValue::from(json))?;
    }
    let wall_s = started.elapsed().as_secs_f64();
    samples.sort_by_key(|s| s.sample_index);
    let stats = engine.stats();
    let samples = samples
        .into_iter()
        .map(|s| {
            Ok(SampleResult {
                sample_index: s.sample_index,
                text: tokenizer
                    .decode_with(&s.token_ids, true)
                    .map_err(|e| fail(&e))?,
                token_ids: s.token_ids,
                logprobs: s.logprobs,
                finish_reason: s.finish_reason,
            })
        })
        .collect::<Result<Vec<_>, JsValue>>()?;
    let generated_tokens = stats.generated_tokens;
    Ok(RolloutResult {
        model: model.name.clone(),
        adapter: decoder.gpu.adapter.clone(),
        prompt_token_ids: prompt,
        samples,
        generated_tokens,
        prefill_tokens_computed: stats.prefill_tokens_computed,
        peak_kv_blocks: stats.peak_kv_blocks,
        num_blocks: engine.num_blocks(),
        steps: stats.steps,
        wall_s,
        tokens_per_s: generated_tokens as f64 / wall_s.max(1e-9),
        stopped,
        blocks_in_use,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(json: &str) -> RolloutOptions {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn options_take_defaults_and_name_what_is_wrong() {
        let base = r#""prompt": "Hi", "n": 4, "max_tokens": 8, "temperature": 0.7, "seed": 1"#;
        let ok = options(&format!("{{{base}}}"));
        assert_eq!((ok.top_p, ok.top_k, ok.kv_mib), (1.0, 0, 64));
        assert!(!ok.chat, "raw text unless chat mode is asked for");
        assert!(options(&format!("{{{base}, \"chat\": true}}")).chat);
        assert_eq!(ok.check(), Ok(()));
        let wrong = |extra: &str| {
            options(&format!("{{{base}, {extra}}}"))
                .check()
                .unwrap_err()
        };
        assert!(wrong(r#""top_p": 0"#).contains("top-p"));
        assert!(wrong(r#""kv_mib": 0"#).contains("KV memory"));
        let mut many = options(&format!("{{{base}}}"));
        many.n = MAX_SAMPLES + 1;
        assert!(many.check().unwrap_err().contains("G must be"));
        many.n = 4;
        many.prompt = "  ".into();
        assert_eq!(many.check().unwrap_err(), "the prompt is empty");
        let unknown = serde_json::from_str::<RolloutOptions>(&format!("{{{base}, \"tmp\": 1}}"));
        assert!(unknown.unwrap_err().to_string().contains("tmp"));
    }
}
