//! The prompts file's format: one JSON object per line, each a prompt in one of three forms
//! (`"prompt"` text, `"prompt_token_ids"`, or chat `"messages"`), optionally with its own
//! sampling parameters ([`LineParams`]). This module parses lines; reading the file is the
//! caller's (the CLI's `sprout rollout --prompts` and `sprout mismatch --prompts`).
//!
//! Invariants: a line gives exactly one of the three forms and no field outside the format
//! (a misspelt parameter is an error, not ignored); `"n"` is at least 1. A line that cannot
//! be used is a [`LineError`] with its 1-based number and reason, never a panic, so a caller
//! can report it, skip it and run the others. [`parse_lines`] numbers a file's lines from 1
//! and leaves blank ones out. The parameters' values are not checked here: the caller
//! builds a [`SamplingParams`] from them, which validates them once.
//!
//! [`SamplingParams`]: crate::sched::SamplingParams

use serde::Deserialize;

use crate::tokenizer::chat_template::Message;

/// What a line asks to be completed.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptInput {
    Text(String),
    TokenIds(Vec<u32>),
    /// Rendered with the model's chat template.
    Messages(Vec<Message>),
}

/// Per-line overrides of the command's sampling parameters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineParams {
    pub n: Option<usize>,
    pub max_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub seed: Option<u64>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<usize>,
    pub stop: Option<Vec<String>>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub top_logprobs: Option<usize>,
    /// (token, bias) pairs, from a JSON object of token ids to biases.
    pub logit_bias: Option<Vec<(u32, f32)>>,
    pub allowed_token_ids: Option<Vec<u32>>,
    /// Words, tokenized by the command (`Tokenizer::bad_word_ids`).
    pub bad_words: Option<Vec<String>>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
}

impl LineParams {
    /// Whether the line gives the parameter named `param` (a [`SamplingParams`] field), so
    /// that a note about its value names the line rather than the command's flag.
    ///
    /// [`SamplingParams`]: crate::sched::SamplingParams
    pub fn sets(&self, param: &str) -> bool {
        match param {
            "max_tokens" => self.max_tokens.is_some(),
            "top_k" => self.top_k.is_some(),
            "n" => self.n.is_some(),
            "temperature" => self.temperature.is_some(),
            "seed" => self.seed.is_some(),
            "top_p" => self.top_p.is_some(),
            "min_p" => self.min_p.is_some(),
            "min_tokens" => self.min_tokens.is_some(),
            "stop" => self.stop.is_some(),
            "stop_token_ids" => self.stop_token_ids.is_some(),
            "top_logprobs" => self.top_logprobs.is_some(),
            "ignore_eos" => self.ignore_eos.is_some(),
            "logit_bias" => self.logit_bias.is_some(),
            "allowed_token_ids" => self.allowed_token_ids.is_some(),
            "bad_words" => self.bad_words.is_some(),
            "repetition_penalty" => self.repetition_penalty.is_some(),
            "presence_penalty" => self.presence_penalty.is_some(),
            "frequency_penalty" => self.frequency_penalty.is_some(),
            _ => false,
        }
    }
}

/// `"stop"`: one string or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct PromptLine {
    /// 1-based line number in the file.
    pub line: usize,
    pub input: PromptInput,
    pub params: LineParams,
}

/// A line that could not be used.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LineError {
    pub line: usize,
    pub error: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine {
    prompt: Option<String>,
    prompt_token_ids: Option<Vec<u32>>,
    messages: Option<Vec<Message>>,
    // The fields of LineParams (serde cannot deny unknown fields through a flatten).
    n: Option<usize>,
    max_tokens: Option<usize>,
    temperature: Option<f32>,
    seed: Option<u64>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    ignore_eos: Option<bool>,
    min_tokens: Option<usize>,
    stop: Option<OneOrMany>,
    stop_token_ids: Option<Vec<u32>>,
    top_logprobs: Option<usize>,
    logit_bias: Option<std::collections::BTreeMap<String, f32>>,
    allowed_token_ids: Option<Vec<u32>>,
    bad_words: Option<Vec<String>>,
    repetition_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
}

/// Parses one line's JSON.
pub fn parse_line(line: usize, text: &str) -> Result<PromptLine, LineError> {
    let fail = |error: String| LineError { line, error };
    let raw: RawLine = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
    let input = match (raw.prompt, raw.prompt_token_ids, raw.messages) {
        (Some(p), None, None) => PromptInput::Text(p),
        (None, Some(ids), None) => PromptInput::TokenIds(ids),
        (None, None, Some(m)) => PromptInput::Messages(m),
        _ => {
            return Err(fail(
                "give exactly one of \"prompt\", \"prompt_token_ids\" or \"messages\"".into(),
            ));
        }
    };
    let params = LineParams {
        n: raw.n,
        max_tokens: raw.max_tokens,
        temperature: raw.temperature,
        seed: raw.seed,
        top_k: raw.top_k,
        top_p: raw.top_p,
        min_p: raw.min_p,
        ignore_eos: raw.ignore_eos,
        min_tokens: raw.min_tokens,
        stop: raw.stop.map(|s| match s {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }),
        stop_token_ids: raw.stop_token_ids,
        top_logprobs: raw.top_logprobs,
        logit_bias: match raw.logit_bias {
            None => None,
            Some(map) => Some(bias_pairs(map).map_err(fail)?),
        },
        allowed_token_ids: raw.allowed_token_ids,
        bad_words: raw.bad_words,
        repetition_penalty: raw.repetition_penalty,
        presence_penalty: raw.presence_penalty,
        frequency_penalty: raw.frequency_penalty,
    };
    if params.n == Some(0) {
        return Err(fail("\"n\" must be at least 1".into()));
    }
    Ok(PromptLine {
        line,
        input,
        params,
    })
}

/// `"logit_bias"`'s object of token ids (JSON keys are strings) to biases, as pairs.
fn bias_pairs(map: std::collections::BTreeMap<String, f32>) -> Result<Vec<(u32, f32)>, String> {
    let mut pairs = Vec::with_capacity(map.len());
    for (key, bias) in map {
        let Ok(id) = key.trim().parse::<u32>() else {
            return Err(format!(
                "\"logit_bias\" keys must be token ids, not {key:?}"
            ));
        };
        pairs.push((id, bias));
    }
    pairs.sort_by_key(|&(id, _)| id);
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("\"logit_bias\" names token {} twice", w[0].0));
    }
    Ok(pairs)
}

/// Every non-blank line of `lines` (a file's lines in order, numbered from 1), parsed or
/// with its error; the first error reading a line stops it and is returned.
pub fn parse_lines<E>(
    lines: impl IntoIterator<Item = Result<String, E>>,
) -> Result<Vec<Result<PromptLine, LineError>>, E> {
    let mut out = Vec::new();
    for (i, line) in lines.into_iter().enumerate() {
        let line = line?;
        if !line.trim().is_empty() {
            out.push(parse_line(i + 1, &line));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse_with_their_own_parameters() {
        let l = parse_line(
            1,
            r#"{"prompt": "hi", "n": 3, "temperature": 0.5, "top_k": 5, "ignore_eos": true}"#,
        )
        .unwrap();
        assert_eq!(l.params.top_k, Some(5));
        assert_eq!(l.params.ignore_eos, Some(true));
        assert_eq!(l.input, PromptInput::Text("hi".into()));
        assert_eq!(l.params.n, Some(3));
        assert_eq!(l.params.temperature, Some(0.5));
        let l = parse_line(
            2,
            r#"{"prompt": "x", "stop": "\n", "min_tokens": 4, "top_logprobs": 3, "stop_token_ids": [7]}"#,
        )
        .unwrap();
        assert_eq!(l.params.stop, Some(vec!["\n".to_string()]));
        assert_eq!(l.params.min_tokens, Some(4));
        assert_eq!(l.params.top_logprobs, Some(3));
        assert_eq!(l.params.stop_token_ids, Some(vec![7]));
        let l = parse_line(
            2,
            r#"{"prompt": "x", "logit_bias": {"7": -2.5, "03": 1}, "allowed_token_ids": [3, 7],
                "bad_words": ["no"], "repetition_penalty": 1.2, "presence_penalty": -0.5,
                "frequency_penalty": 0.5}"#,
        )
        .unwrap();
        let p = &l.params;
        assert_eq!(p.logit_bias, Some(vec![(3, 1.0), (7, -2.5)]));
        assert_eq!(p.allowed_token_ids, Some(vec![3, 7]));
        assert_eq!(p.bad_words, Some(vec!["no".to_string()]));
        assert_eq!(p.repetition_penalty, Some(1.2));
        assert_eq!(
            (p.presence_penalty, p.frequency_penalty),
            (Some(-0.5), Some(0.5))
        );
        for param in ["logit_bias", "bad_words", "frequency_penalty"] {
            assert!(p.sets(param), "{param}");
        }
        for (line, error) in [
            (
                r#"{"prompt": "x", "logit_bias": {"a": 1}}"#,
                "keys must be token ids",
            ),
            (
                r#"{"prompt": "x", "logit_bias": {"3": 1, " 3": 2}}"#,
                "token 3 twice",
            ),
        ] {
            let e = parse_line(4, line).unwrap_err();
            assert!(e.error.contains(error), "{}", e.error);
        }
        let l = parse_line(2, r#"{"prompt": "x", "stop": ["a", "b"]}"#).unwrap();
        assert_eq!(l.params.stop.map(|s| s.len()), Some(2));
        let l = parse_line(2, r#"{"prompt_token_ids": [1, 2, 3]}"#).unwrap();
        assert_eq!(l.input, PromptInput::TokenIds(vec![1, 2, 3]));
        let l = parse_line(3, r#"{"messages": [{"role": "user", "content": "x"}]}"#).unwrap();
        assert!(matches!(l.input, PromptInput::Messages(m) if m.len() == 1));
    }

    #[test]
    fn bad_lines_name_their_line_and_reason() {
        let e = parse_line(4, r#"{"prompt": "a", "messages": []}"#).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.error.contains("exactly one"), "{}", e.error);
        let e = parse_line(5, "{not json").unwrap_err();
        assert_eq!(e.line, 5);
        let e = parse_line(6, r#"{"prompt": "a", "temprature": 1}"#).unwrap_err();
        assert!(e.error.contains("temprature"), "{}", e.error);
        let e = parse_line(7, r#"{"prompt": "a", "n": 0}"#).unwrap_err();
        assert!(e.error.contains("\"n\""), "{}", e.error);
    }

    #[test]
    fn lines_are_numbered_from_one_and_blank_ones_left_out() {
        let text = "{\"prompt\": \"a\"}\n\n  \n{\"n\": 2}\n{\"prompt_token_ids\": [1]}";
        let lines = parse_lines(text.lines().map(|l| Ok::<_, ()>(l.to_string()))).unwrap();
        let numbers: Vec<usize> = lines
            .iter()
            .map(|l| match l {
                Ok(l) => l.line,
                Err(e) => e.line,
            })
            .collect();
        assert_eq!(numbers, [1, 4, 5]);
        assert!(lines[0].is_ok() && lines[1].is_err() && lines[2].is_ok());
        let failed = parse_lines([Ok("{\"prompt\": \"a\"}".to_string()), Err("unreadable")]);
        assert_eq!(failed, Err("unreadable"));
    }
}
