//! New weights while the engine runs, on every adapter: a sample that spans the update
//! says which weights drew each of its tokens; a request after it is bitwise what a model
//! loaded from the new weights gives; and an update that does not fit (a tensor missing
//! or extra, another shape of model, a value that is not finite) is refused, naming the
//! problem, while the old weights keep serving unchanged.
//!
//! The new weights are the tiny Llama fixture's with the final norm scaled by 1.5, which
//! changes every logit. Every test fails, never skips, when no adapter is found.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::gpus;
use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::error::SproutError;
use sprout::formats::{TensorData, WeightFormat};
use sprout::gpu::Gpu;
use sprout::model::config::ModelConfig;
use sprout::model::decoder::Decoder;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;
use sprout::sched::{FinishedSample, Request, SamplingParams};

fn fixture() -> SafetensorsDir {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
    SafetensorsDir::open(dir).unwrap()
}

/// The fixture, changed as a trainer's checkpoint (or a broken one) might be.
struct Changed {
    inner: SafetensorsDir,
    /// Multiplies the final norm's weights.
    scale: f32,
    /// Reports this tensor missing.
    missing: Option<&'static str>,
    /// Reports a stored tensor the model does not use.
    extra: Option<&'static str>,
    /// Puts a NaN into this tensor.
    nan_in: Option<&'static str>,
    config: ModelConfig,
}

impl Changed {
    fn new(scale: f32) -> Changed {
        let inner = fixture();
        let config = inner.config().clone();
        Changed {
            inner,
            scale,
            missing: None,
            extra: None,
            nan_in: None,
            config,
        }
    }
}

fn f32_tensor(rows: usize, cols: usize, values: &[f32]) -> TensorData {
    TensorData {
        format: WeightFormat::F32,
        rows,
        cols,
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

impl WeightSource for Changed {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn read(&mut self, name: &str) -> Result<TensorData, SproutError> {
        let t = self.inner.read(name)?;
        let mut values = t.to_f32()?;
        if name == "final_norm" {
            values.iter_mut().for_each(|v| *v *= self.scale);
        }
        if self.nan_in == Some(name) {
            let middle = values.len() / 2;
            values[middle] = f32::NAN;
        }
        Ok(f32_tensor(t.rows, t.cols, &values))
    }

    fn has(&self, name: &str) -> bool {
        self.missing != Some(name) && self.inner.has(name)
    }

    fn format(&self, _name: &str) -> Result<WeightFormat, SproutError> {
        Ok(WeightFormat::F32)
    }

    fn unused_tensor(&self, used: &[String]) -> Option<String> {
        self.extra
            .map(str::to_string)
            .or_else(|| self.inner.unused_tensor(used))
    }
}

fn config() -> EngineConfig {
    EngineConfig {
        kv: KvSize::Blocks(256),
        ..EngineConfig::default()
    }
}

fn request(index: u32, seed: u64, max_tokens: usize) -> Request {
    Request {
        index,
        prompt: vec![5, 17, 42, 99, 3, 250],
        n: 2,
        params: SamplingParams {
            temperature: 1.0,
            seed,
            own_seed: true,
            max_tokens,
            stop_ids: vec![],
            ..SamplingParams::default()
        },
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }
}

fn run_alone(decoder: &Decoder, version: u64, r: Request) -> Vec<FinishedSample> {
    let config = EngineConfig {
        weights_version: version,
        ..config()
    };
    let mut engine = Engine::new(decoder, &config).unwrap();
    engine.add_request(r).unwrap();
    pollster::block_on(engine.run_to_completion(|_| {})).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn load(gpu: &Arc<Gpu>, source: &mut dyn WeightSource) -> Decoder {
    Decoder::load(gpu.clone(), source, &mut |_, _| {}).unwrap()
}

#[test]
fn an_update_mid_run_labels_each_token_and_matches_a_fresh_load() {
    for gpu in gpus() {
        let old = load(&gpu, &mut fixture());
        let new = load(&gpu, &mut Changed::new(1.5));
        let served = load(&gpu, &mut fixture());
        let mut engine = Engine::new(&served, &config()).unwrap();
        engine.add_request(request(0, 1, 24)).unwrap();
        for _ in 0..6 {
            pollster::block_on(engine.step()).unwrap();
        }
        let update = served
            .load_update(&mut Changed::new(1.5), &mut |_, _| {})
            .unwrap();
        engine.update_weights(update, 7);
        assert_eq!(engine.weights_version(), 7);
        let mut spanning = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();

        // The spanning samples: old weights' tokens first, then the new ones'.
        let alone_old = run_alone(&old, 0, request(0, 1, 24));
        for (s, o) in spanning.iter().zip(&alone_old) {
            assert_eq!(s.weights_versions.len(), s.token_ids.len());
            let switch = s.weights_versions.iter().position(|&v| v == 7).unwrap();
            assert!(switch > 0, "{:?}", s.weights_versions);
            assert!(s.weights_versions[switch..].iter().all(|&v| v == 7));
            assert!(s.weights_versions[..switch].iter().all(|&v| v == 0));
            // Before the switch the sample is the old model's, token for token.
            assert_eq!(
                s.token_ids[..switch],
                o.token_ids[..switch],
                "{}",
                gpu.adapter.name
            );
            assert_eq!(bits(&s.logprobs[..switch]), bits(&o.logprobs[..switch]));
        }

        // A request after the update is what a model loaded from the new weights gives.
        engine.add_request(request(1, 2, 12)).unwrap();
        spanning = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
        let fresh = run_alone(&new, 7, request(1, 2, 12));
        let stale = run_alone(&old, 0, request(1, 2, 12));
        for ((s, f), o) in spanning.iter().zip(&fresh).zip(&stale) {
            assert!(s.weights_versions.iter().all(|&v| v == 7));
            assert_eq!(s.token_ids, f.token_ids, "{}", gpu.adapter.name);
            assert_eq!(bits(&s.logprobs), bits(&f.logprobs), "{}", gpu.adapter.name);
            assert_ne!(
                bits(&s.logprobs),
                bits(&o.logprobs),
                "the weights did not change"
            );
        }
    }
}

#[test]
fn an_update_that_does_not_fit_is_refused_and_the_old_weights_serve_on() {
    for gpu in gpus() {
        let served = load(&gpu, &mut fixture());
        let before = run_alone(&served, 0, request(0, 3, 8));
        let mut wider = Changed::new(1.0);
        wider.config.intermediate_size += 32;
        let mut missing = Changed::new(1.0);
        missing.missing = Some("layers.1.up");
        let mut extra = Changed::new(1.0);
        extra.extra = Some("model.layers.9.mlp.up_proj.weight");
        let mut nan = Changed::new(1.0);
        nan.nan_in = Some("layers.0.o");
        let cases: [(Changed, &str); 4] = [
            (wider, "intermediate_size"),
            (missing, "layers.1.up"),
            (extra, "model.layers.9.mlp.up_proj.weight"),
            (nan, "not finite"),
        ];
        for (mut source, says) in cases {
            let err = served
                .load_update(&mut source, &mut |_, _| {})
                .err()
                .unwrap_or_else(|| panic!("an update that should say {says:?} was taken"))
                .to_string();
            assert!(err.contains(says), "{err:?} does not say {says:?}");
        }
        let after = run_alone(&served, 0, request(0, 3, 8));
        for (a, b) in after.iter().zip(&before) {
            assert_eq!(a.token_ids, b.token_ids);
            assert_eq!(bits(&a.logprobs), bits(&b.logprobs));
        }
    }
}
