//! One sample from a prompt (the engine with a single request), and teacher-forced
//! scoring and logits of one sequence (one forward pass with every row's logits). Each
//! runs with the decoder's LoRA adapter when it has one.
//!
//! `logprobs[i]` is the log-probability of `token_ids[i]` under the model's own
//! distribution (temperature 1, no truncation), whatever temperature drew it. A stop token
//! ends the sample and is kept in `token_ids`.

use serde::Serialize;

use crate::engine::paged_kv::PagedKv;
use crate::engine::{BatchInputs, Engine, EngineConfig, KvSize, PackedBatch};
use crate::error::SproutError;
use crate::gpu::kernels::softmax::{self, Extra, RowStats};
use crate::gpu::{Recorder, Tensor};
use crate::kv::DEFAULT_BLOCK_SIZE;
use crate::model::decoder::{Decoder, ForwardBuffers};
use crate::sched::{Request, SamplingParams};

pub use crate::sched::FinishReason;

#[derive(Clone, Debug)]
pub struct GenerateParams {
    pub max_tokens: usize,
    /// 0 is greedy.
    pub temperature: f32,
    pub seed: u64,
    /// Any of these ends the sample (and is kept as its last token).
    pub stop_ids: Vec<u32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Generation {
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub finish_reason: FinishReason,
}

/// Generates one sample after `prompt` (sample 0 of request 0: the same tokens as sample 0
/// of prompt 0 in a rollout with the same seed), calling `on_token(id, logprob)` as each
/// arrives.
pub async fn generate(
    decoder: &Decoder,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_token: impl FnMut(u32, f32),
) -> Result<Generation, SproutError> {
    // A pool just big enough for this one sample.
    let bs = DEFAULT_BLOCK_SIZE;
    let tokens = (prompt.len() + params.max_tokens).min(decoder.max_positions());
    let config = EngineConfig {
        kv: KvSize::Blocks(tokens.div_ceil(bs).max(1)),
        max_batch_tokens: prompt.len().clamp(1, 512),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(decoder, &config)?;
    engine.add_request(Request {
        index: 0,
        prompt: prompt.to_vec(),
        n: 1,
        params: SamplingParams {
            temperature: params.temperature,
            seed: params.seed,
            max_tokens: params.max_tokens,
            stop_ids: params.stop_ids.clone(),
            ..SamplingParams::default()
        },
        forced: Vec::new(),
        cache_salt: None,
        lora: decoder.has_adapter(),
    })?;
    let samples = engine
        .run_to_completion(|step| {
            for d in &step.drawn {
                on_token(d.token, d.logprob);
            }
        })
        .await?;
    let sample = samples.into_iter().next().expect("one request, one sample");
    Ok(Generation {
        token_ids: sample.token_ids,
        logprobs: sample.logprobs,
        finish_reason: sample.finish_reason,
    })
}

/// The forward pass of one sequence `ids` with logits for every position, in a pool of its
/// own: the buffers, whose `logits` are `[len, vocab]` on the GPU (in chunks).
fn forward_all(
    decoder: &Decoder,
    ids: &[u32],
    rec: &mut Recorder,
) -> Result<ForwardBuffers, SproutError> {
    let gpu = &*decoder.gpu;
    let t = ids.len();
    let vocab = decoder.config.vocab_size;
    if t == 0 || t > decoder.max_positions() {
        return Err(SproutError::Shape(format!(
            "{t} tokens: the model takes 1 to {}",
            decoder.max_positions()
        )));
    }
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(SproutError::Shape(format!(
            "token {bad} is outside the vocabulary of {vocab}"
        )));
    }
    // The engine's packer, for one sequence in a pool of its own.
    let bs = DEFAULT_BLOCK_SIZE;
    let packed = PackedBatch::whole_sequence(ids, bs, decoder.has_adapter());
    let kv = PagedKv::new(gpu, &decoder.config, t.div_ceil(bs), bs)?;
    let mut inputs = BatchInputs::new(gpu, t, t);
    inputs.write(gpu, &packed);
    let batch = inputs.view(&packed, None);
    let buffers = ForwardBuffers::new(decoder, t, t);
    decoder.encode_forward(rec, &batch, kv.pools(), &buffers)?;
    Ok(buffers)
}

/// The log-probability of each `ids[i + 1]` given `ids[..=i]` (teacher forcing), in one
/// forward pass: `ids.len() - 1` values.
pub async fn score(decoder: &Decoder, ids: &[u32]) -> Result<Vec<f32>, SproutError> {
    let gpu = &*decoder.gpu;
    let t = ids.len();
    if t < 2 {
        return Ok(Vec::new());
    }
    let targets = gpu.upload(&ids[1..]);
    let stats = RowStats::zeros(gpu, t - 1);
    let logprobs: Tensor = gpu.zeros(t - 1);
    let mut rec = gpu.recorder();
    let buffers = forward_all(decoder, ids, &mut rec)?;
    let extra = Extra::TargetLogprobs {
        targets: &targets,
        logprobs: &logprobs,
    };
    softmax::encode(gpu, &mut rec, &buffers.logits, t - 1, &stats, extra);
    rec.submit();
    gpu.read_f32(&logprobs).await
}

/// The logits of every position of `ids` (`[len, vocab]`), read back (tests, checks).
pub async fn logits(decoder: &Decoder, ids: &[u32]) -> Result<Vec<f32>, SproutError> {
    let gpu = &*decoder.gpu;
    let mut rec = gpu.recorder();
    let buffers = forward_all(decoder, ids, &mut rec)?;
    rec.submit();
    buffers.logits.read(gpu, ids.len()).await
}
