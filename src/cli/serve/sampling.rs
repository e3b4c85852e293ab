//! From a request's fields to the engine's [`SamplingParams`], with vLLM's semantics:
//! stop tokens, logit processing (bias, allowed tokens, bad words tokenized as vLLM does,
//! penalties), all checked by the one set of rules (`SamplingParams::validate` and
//! `validate_tokens`) and their errors spelled with the API's field names; the server's
//! limits on what one request may ask.

use sprout::sched::{LogitProcessing, SamplingParams};
use sprout::tokenizer::Tokenizer;

use crate::cli::serve::error::ApiError;
use crate::cli::serve::logprobs_mode::LogprobsMode;
use crate::cli::serve::request::SamplingFields;
use crate::cli::serve::response::Api;
use crate::cli::serve::state::AppState;

/// The request's sampling parameters, checked by the one set of rules.
pub fn params(
    state: &AppState,
    api: Api,
    f: &SamplingFields,
    max_tokens: usize,
) -> Result<SamplingParams, ApiError> {
    let alternatives = match api {
        Api::Completions | Api::Generate => "logprobs",
        Api::Chat => "top_logprobs",
    };
    if state.logprobs_mode == LogprobsMode::Processed && f.logprobs.is_some_and(|k| k > 0) {
        return Err(ApiError::bad(
            alternatives,
            format!(
                "{alternatives} > 0 is not supported with --logprobs-mode processed_logprobs: \
                 sprout has the sampled token's processed log-prob only"
            ),
        ));
    }
    let mut stop_ids = match f.ignore_eos {
        true => Vec::new(),
        false => state.facts.eos_token_ids.clone(),
    };
    for &id in &f.stop_token_ids {
        if !stop_ids.contains(&id) {
            stop_ids.push(id);
        }
    }
    let params = SamplingParams {
        temperature: f.temperature,
        top_k: f.top_k,
        top_p: f.top_p,
        min_p: f.min_p,
        seed: f.seed.unwrap_or(state.base_seed),
        own_seed: f.seed.is_some(),
        max_tokens,
        stop_ids,
        min_tokens: f.min_tokens,
        stop: f.stop.clone(),
        top_logprobs: f.logprobs.unwrap_or(0),
        processing: LogitProcessing {
            allowed_token_ids: f.allowed_token_ids.clone(),
            bad_words: bad_word_ids(&state.facts.tokenizer, &f.bad_words)?,
            logit_bias: f.logit_bias.clone(),
            repetition_penalty: f.repetition_penalty,
            presence_penalty: f.presence_penalty,
            frequency_penalty: f.frequency_penalty,
        },
    };
    params
        .validate()
        .and_then(|()| params.validate_tokens(state.facts.vocab_size))
        .map_err(|e| {
            // The field's name in the API, where it differs from the parameter's.
            let param = match e.param {
                "top_logprobs" => alternatives,
                other => other,
            };
            ApiError::bad(param, e.message_for(param))
        })?;
    Ok(params)
}

/// `bad_words` as token sequences ([`Tokenizer::bad_word_ids`], vLLM's tokenization: each
/// word as written and, where that is another spelling, with a space before it).
pub fn bad_word_ids(tokenizer: &Tokenizer, words: &[String]) -> Result<Vec<Vec<u32>>, ApiError> {
    let mut out = Vec::new();
    for word in words {
        let ids = tokenizer
            .bad_word_ids(word)
            .map_err(|e| ApiError::bad("bad_words", format!("bad_words: {word:?}: {e}")))?;
        out.extend(ids);
    }
    Ok(out)
}

/// Refuses a request that no wait would let the server take: more than `--max-n` samples
/// per prompt, or more than `--max-samples-per-request` in all. Returns its samples.
pub fn check_limits(state: &AppState, prompts: usize, n: usize) -> Result<usize, ApiError> {
    if n > state.max_n {
        return Err(ApiError::bad(
            "n",
            format!("n must be at most {} (--max-n), not {n}", state.max_n),
        ));
    }
    let total = prompts.saturating_mul(n);
    if total > state.max_samples {
        return Err(ApiError::bad(
            "n",
            format!(
                "this request asks for {total} samples ({prompts} prompts, n = {n}), more than \
                 the {} one request may have (--max-samples-per-request)",
                state.max_samples
            ),
        ));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids vLLM gives the tiny Llama fixture's bad words (its rule run with
    /// transformers' tokenizer on the same tokenizer.json): the spaced form is kept only
    /// when it starts with another token and has as many.
    #[test]
    fn bad_words_tokenize_as_vllm_s_do() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tiny-llama/tokenizer.json"
        );
        let tokenizer = Tokenizer::from_file(path).unwrap();
        let ids = |word: &str| bad_word_ids(&tokenizer, &[word.to_string()]).unwrap();
        assert_eq!(ids("fox"), vec![vec![72, 81, 90], vec![275, 81, 90]]);
        assert_eq!(
            ids(" brown"),
            vec![vec![68, 84, 288, 80], vec![272, 84, 288, 80]]
        );
        assert_eq!(ids("quick fox"), vec![vec![83, 87, 75, 350, 275, 81, 90]]);
        assert_eq!(ids("zq"), vec![vec![92, 83]]);
        for blank in ["", "  "] {
            let e = bad_word_ids(&tokenizer, &[blank.to_string()]).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("bad_words"));
        }
    }
}
