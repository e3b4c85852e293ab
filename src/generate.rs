//! Generating one sample from a prompt: prefill, then one token per step, each step one
//! submit that reads back only the drawn token and its log-probability.
//!
//! `logprobs[i]` is the log-probability of `token_ids[i]` under the model's own
//! distribution (temperature 1, no truncation), whatever temperature drew it. A stop token
//! ends the sample and is kept in `token_ids`.

use serde::Serialize;

use crate::error::SproutError;
use crate::gpu::kernels::sample::{self, SampleKey};
use crate::gpu::kernels::softmax::{self, Extra, RowStats};
use crate::model::decoder::{Decoder, ForwardBuffers, KvCache, Logits};

#[derive(Clone, Debug)]
pub struct GenerateParams {
    pub max_tokens: usize,
    /// 0 is greedy.
    pub temperature: f32,
    pub seed: u64,
    /// Any of these ends the sample (and is kept as its last token).
    pub stop_ids: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    Stop,
    Length,
}

#[derive(Clone, Debug, Serialize)]
pub struct Generation {
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub finish_reason: FinishReason,
}

/// Generates one sample after `prompt`, calling `on_token(id, logprob)` as each arrives.
pub async fn generate(
    decoder: &Decoder,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_token: impl FnMut(u32, f32),
) -> Result<Generation, SproutError> {
    if prompt.is_empty() {
        return Err(SproutError::Shape("the prompt has no tokens".into()));
    }
    let vocab = decoder.config.vocab_size;
    if let Some(bad) = prompt.iter().find(|&&id| id as usize >= vocab) {
        return Err(SproutError::Shape(format!(
            "prompt token {bad} is outside the vocabulary of {vocab}"
        )));
    }
    let gpu = &*decoder.gpu;
    let capacity = prompt.len() + params.max_tokens;
    let cache = KvCache::new(decoder, capacity);
    let mut out = Generation {
        token_ids: Vec::new(),
        logprobs: Vec::new(),
        finish_reason: FinishReason::Length,
    };
    // Everything the loop touches is allocated here; a step only writes its position and
    // sampling key. The drawn token stays on the GPU as the next step's input.
    let prefill = ForwardBuffers::new(decoder, prompt.len(), Logits::Last);
    let decode = ForwardBuffers::new(decoder, 1, Logits::Last);
    let prompt_ids = gpu.upload(prompt);
    let prompt_positions: Vec<u32> = (0..prompt.len() as u32).collect();
    let prompt_positions = gpu.upload(&prompt_positions);
    let position = gpu.zeros(1);
    let keys = gpu.upload(&[SampleKey::new(0, 0, 0, 0.0)]);
    let token = gpu.zeros(1);
    let stats = RowStats::zeros(gpu, 1);
    let logprob = gpu.zeros(1);
    let result = gpu.zeros(2);
    let mut len = 0;
    while out.token_ids.len() < params.max_tokens {
        // After the prompt, the input is the token the previous step drew (the embedding
        // reads it before this step's draw overwrites it: passes run in order).
        let (buffers, ids, positions) = if len == 0 {
            (&prefill, &prompt_ids, &prompt_positions)
        } else {
            gpu.queue
                .write_buffer(&position.buffer, 0, bytemuck::bytes_of(&(len as u32)));
            (&decode, &token, &position)
        };
        let drawn_at = (len + buffers.t) as u32;
        let key = SampleKey::new(params.seed, 0, drawn_at, params.temperature);
        gpu.queue
            .write_buffer(&keys.buffer, 0, bytemuck::bytes_of(&key));
        let mut enc = gpu.encoder();
        decoder.encode_forward(&mut enc, ids, positions, len, &cache, buffers)?;
        let logits = &buffers.logits;
        sample::encode(gpu, &mut enc, logits, 1, vocab, &keys, &token);
        let extra = Extra::TargetLogprobs {
            targets: &token,
            logprobs: &logprob,
        };
        softmax::encode(gpu, &mut enc, logits, 1, vocab, &stats, extra);
        enc.copy_buffer_to_buffer(&token.buffer, 0, &result.buffer, 0, 4);
        enc.copy_buffer_to_buffer(&logprob.buffer, 0, &result.buffer, 4, 4);
        gpu.submit(enc);
        let words = gpu.read_u32(&result).await?;
        let (id, lp) = (words[0], f32::from_bits(words[1]));
        out.token_ids.push(id);
        out.logprobs.push(lp);
        on_token(id, lp);
        if params.stop_ids.contains(&id) {
            out.finish_reason = FinishReason::Stop;
            break;
        }
        len += buffers.t;
    }
    Ok(out)
}

/// The log-probability of each `ids[i + 1]` given `ids[..=i]` (teacher forcing), in one
/// forward pass: `ids.len() - 1` values.
pub async fn score(decoder: &Decoder, ids: &[u32]) -> Result<Vec<f32>, SproutError> {
    let gpu = &*decoder.gpu;
    let t = ids.len();
    if t < 2 {
        return Ok(Vec::new());
    }
    let vocab = decoder.config.vocab_size;
    let cache = KvCache::new(decoder, t);
    let input = gpu.upload(ids);
    let positions: Vec<u32> = (0..t as u32).collect();
    let positions = gpu.upload(&positions);
    let targets = gpu.upload(&ids[1..]);
    let stats = RowStats::zeros(gpu, t - 1);
    let logprobs = gpu.zeros(t - 1);
    let mut enc = gpu.encoder();
    let buffers = ForwardBuffers::new(decoder, t, Logits::All);
    decoder.encode_forward(&mut enc, &input, &positions, 0, &cache, &buffers)?;
    let logits = &buffers.logits;
    let extra = Extra::TargetLogprobs {
        targets: &targets,
        logprobs: &logprobs,
    };
    softmax::encode(gpu, &mut enc, logits, t - 1, vocab, &stats, extra);
    gpu.submit(enc);
    gpu.read_f32(&logprobs).await
}

/// The logits of every position of `ids` (`[len, vocab]`), read back (tests, checks).
pub async fn logits(decoder: &Decoder, ids: &[u32]) -> Result<Vec<f32>, SproutError> {
    let gpu = &*decoder.gpu;
    let t = ids.len();
    let cache = KvCache::new(decoder, t.max(1));
    let input = gpu.upload(ids);
    let positions: Vec<u32> = (0..t as u32).collect();
    let positions = gpu.upload(&positions);
    let mut enc = gpu.encoder();
    let buffers = ForwardBuffers::new(decoder, t, Logits::All);
    decoder.encode_forward(&mut enc, &input, &positions, 0, &cache, &buffers)?;
    gpu.submit(enc);
    gpu.read_f32(&buffers.logits).await
}
