//! Running requests through an engine to the end, as most end-to-end tests do.

use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::model::decoder::Decoder;
use sprout::sched::{FinishedSample, Request, SamplingParams, SchedulerStats};

/// Runs `requests` to completion on one engine: the samples, and the scheduler's stats.
pub fn run(
    decoder: &Decoder,
    config: &EngineConfig,
    requests: &[Request],
) -> (Vec<FinishedSample>, SchedulerStats) {
    let mut engine = Engine::new(decoder, config).unwrap();
    for r in requests {
        engine.add_request(r.clone()).unwrap();
    }
    let out = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
    (out, engine.stats().clone())
}

/// The default engine with a pool of `blocks` KV blocks and steps of at most
/// `max_batch_tokens` tokens.
pub fn config(blocks: usize, max_batch_tokens: usize) -> EngineConfig {
    EngineConfig {
        kv: KvSize::Blocks(blocks),
        max_batch_tokens,
        ..EngineConfig::default()
    }
}

/// Request `index`: `n` samples of `prompt` under `params`, drawn (no completions forced)
/// and unsalted.
pub fn request(index: u32, prompt: Vec<u32>, n: usize, params: SamplingParams) -> Request {
    Request {
        index,
        prompt,
        n,
        params,
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }
}
