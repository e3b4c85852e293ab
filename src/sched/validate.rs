//! The one set of rules for sampling parameters.
//!
//! The scheduler refuses a request whose parameters break a rule, and every front end (the
//! CLI's flags, a prompts file's lines, the web bindings' options) calls the same
//! [`SamplingParams::validate`] to say so early, in its own words: a [`SamplingError`]
//! names the parameter, its value and the rule, and the caller spells the parameter as its
//! users write it (`--top-p`, `"top_p"`).

use crate::sched::{LogitProcessing, MAX_TOP_LOGPROBS, SamplingParams};

/// A sampling parameter outside its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{param} must be {rule}, not {value}")]
pub struct SamplingError {
    /// The field's name in [`SamplingParams`] (`top_p`).
    pub param: &'static str,
    /// Its value, as given.
    pub value: String,
    /// What it must be (`in (0, 1]`).
    pub rule: String,
}

impl SamplingError {
    fn new(param: &'static str, value: impl ToString, rule: impl Into<String>) -> SamplingError {
        SamplingError {
            param,
            value: value.to_string(),
            rule: rule.into(),
        }
    }

    /// The message with the parameter spelled as a caller's users write it.
    pub fn message_for(&self, spelled: &str) -> String {
        format!("{spelled} must be {}, not {}", self.rule, self.value)
    }
}

impl SamplingParams {
    /// Checks every parameter against its rule; the first one broken is the error.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let p = self;
        if !(p.temperature.is_finite() && p.temperature >= 0.0) {
            return Err(SamplingError::new(
                "temperature",
                p.temperature,
                "a finite number >= 0",
            ));
        }
        // `!(a && b)` rather than `a || b` negated so that NaN fails too.
        if !(p.top_p > 0.0 && p.top_p <= 1.0) {
            return Err(SamplingError::new("top_p", p.top_p, "in (0, 1]"));
        }
        if !(p.min_p >= 0.0 && p.min_p < 1.0) {
            return Err(SamplingError::new("min_p", p.min_p, "in [0, 1)"));
        }
        if p.max_tokens == 0 {
            return Err(SamplingError::new("max_tokens", 0, "at least 1"));
        }
        if p.min_tokens > p.max_tokens {
            return Err(SamplingError::new(
                "min_tokens",
                p.min_tokens,
                format!("at most max_tokens ({})", p.max_tokens),
            ));
        }
        if p.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(SamplingError::new(
                "top_logprobs",
                p.top_logprobs,
                format!("at most {MAX_TOP_LOGPROBS}"),
            ));
        }
        if p.stop.iter().any(String::is_empty) {
            return Err(SamplingError::new("stop", "\"\"", "a non-empty string"));
        }
        p.processing.validate()
    }

    /// Checks that every token the parameters name (stop tokens, logit bias, allowed
    /// tokens, bad words) is in a vocabulary of `vocab` tokens.
    pub fn validate_tokens(&self, vocab: usize) -> Result<(), SamplingError> {
        let x = &self.processing;
        let named = [
            ("stop_token_ids", self.stop_ids.iter().copied().max()),
            ("logit_bias", x.logit_bias.iter().map(|&(t, _)| t).max()),
            (
                "allowed_token_ids",
                x.allowed_token_ids.iter().flatten().copied().max(),
            ),
            ("bad_words", x.bad_words.iter().flatten().copied().max()),
        ];
        for (param, largest) in named {
            if let Some(t) = largest.filter(|&t| t as usize >= vocab) {
                let rule = format!("token ids below the vocabulary's size ({vocab})");
                return Err(SamplingError::new(param, t, rule));
            }
        }
        Ok(())
    }
}

impl LogitProcessing {
    /// vLLM's rules: a repetition penalty above 0, presence and frequency penalties in
    /// [-2, 2], biases in [-100, 100] (OpenAI's range; refused past it rather than
    /// clamped) each on a token of its own, a non-empty list of allowed tokens, no empty
    /// bad word.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let r = self.repetition_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(SamplingError::new(
                "repetition_penalty",
                r,
                "a finite number > 0",
            ));
        }
        for (param, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(SamplingError::new(param, v, "in [-2, 2]"));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for &(token, bias) in &self.logit_bias {
            if !(-100.0..=100.0).contains(&bias) {
                let value = format!("{bias} (token {token})");
                return Err(SamplingError::new("logit_bias", value, "in [-100, 100]"));
            }
            if !seen.insert(token) {
                let rule = "given once per token";
                return Err(SamplingError::new(
                    "logit_bias",
                    format!("token {token} twice"),
                    rule,
                ));
            }
        }
        if self.allowed_token_ids.as_ref().is_some_and(Vec::is_empty) {
            return Err(SamplingError::new(
                "allowed_token_ids",
                "[]",
                "a non-empty list (leave it out to allow every token)",
            ));
        }
        if self.bad_words.iter().any(Vec::is_empty) {
            return Err(SamplingError::new(
                "bad_words",
                "a word of no tokens",
                "words of at least one token",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken(change: impl FnOnce(&mut SamplingParams)) -> SamplingError {
        let mut p = SamplingParams::default();
        change(&mut p);
        p.validate().unwrap_err()
    }

    #[test]
    fn the_defaults_are_valid() {
        SamplingParams::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_parameter_and_value() {
        let cases: Vec<(SamplingError, &str, &str)> = vec![
            (broken(|p| p.temperature = -1.0), "temperature", "-1"),
            (broken(|p| p.temperature = f32::NAN), "temperature", "NaN"),
            (
                broken(|p| p.temperature = f32::INFINITY),
                "temperature",
                "inf",
            ),
            (broken(|p| p.top_p = 0.0), "top_p", "0"),
            (broken(|p| p.top_p = 1.5), "top_p", "1.5"),
            (broken(|p| p.top_p = f32::NAN), "top_p", "NaN"),
            (broken(|p| p.min_p = 1.0), "min_p", "1"),
            (broken(|p| p.min_p = -0.1), "min_p", "-0.1"),
            (broken(|p| p.min_p = f32::NAN), "min_p", "NaN"),
            (broken(|p| p.max_tokens = 0), "max_tokens", "0"),
            (
                broken(|p| (p.max_tokens, p.min_tokens) = (4, 5)),
                "min_tokens",
                "5",
            ),
            (broken(|p| p.top_logprobs = 21), "top_logprobs", "21"),
            (broken(|p| p.stop = vec!["".into()]), "stop", "\"\""),
            (
                broken(|p| p.processing.repetition_penalty = 0.0),
                "repetition_penalty",
                "0",
            ),
            (
                broken(|p| p.processing.repetition_penalty = f32::NAN),
                "repetition_penalty",
                "NaN",
            ),
            (
                broken(|p| p.processing.presence_penalty = 2.5),
                "presence_penalty",
                "2.5",
            ),
            (
                broken(|p| p.processing.frequency_penalty = f32::NAN),
                "frequency_penalty",
                "NaN",
            ),
            (
                broken(|p| p.processing.logit_bias = vec![(3, 101.0)]),
                "logit_bias",
                "101 (token 3)",
            ),
            (
                broken(|p| p.processing.logit_bias = vec![(3, 1.0), (3, 2.0)]),
                "logit_bias",
                "token 3 twice",
            ),
            (
                broken(|p| p.processing.allowed_token_ids = Some(vec![])),
                "allowed_token_ids",
                "[]",
            ),
            (
                broken(|p| p.processing.bad_words = vec![vec![1], vec![]]),
                "bad_words",
                "a word of no tokens",
            ),
        ];
        for (e, param, value) in cases {
            assert_eq!((e.param, e.value.as_str()), (param, value), "{e}");
            assert!(e.to_string().starts_with(param), "{e}");
            assert!(e.message_for("--x").starts_with("--x must be"), "{e}");
        }
    }

    #[test]
    fn the_edges_of_each_range_are_valid() {
        let mut p = SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            max_tokens: 1,
            min_tokens: 1,
            top_logprobs: MAX_TOP_LOGPROBS,
            ..SamplingParams::default()
        };
        p.validate().unwrap();
        p.top_p = f32::MIN_POSITIVE;
        p.min_p = 0.999;
        p.validate().unwrap();
        let x = &mut p.processing;
        (x.presence_penalty, x.frequency_penalty) = (-2.0, 2.0);
        x.repetition_penalty = f32::MIN_POSITIVE;
        x.logit_bias = vec![(0, -100.0), (1, 100.0)];
        x.allowed_token_ids = Some(vec![0]);
        x.bad_words = vec![vec![0]];
        p.validate().unwrap();
    }

    #[test]
    fn every_token_named_must_be_in_the_vocabulary() {
        let mut p = SamplingParams::default();
        p.validate_tokens(10).unwrap();
        type Change = fn(&mut SamplingParams);
        let cases: [(Change, &str); 4] = [
            (|p| p.stop_ids = vec![3, 10], "stop_token_ids"),
            (|p| p.processing.logit_bias = vec![(12, 1.0)], "logit_bias"),
            (
                |p| p.processing.allowed_token_ids = Some(vec![0, 99]),
                "allowed_token_ids",
            ),
            (|p| p.processing.bad_words = vec![vec![1, 10]], "bad_words"),
        ];
        for (change, param) in cases {
            let mut q = SamplingParams::default();
            change(&mut q);
            let e = q.validate_tokens(10).unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert!(e.to_string().contains("(10)"), "{e}");
            q.validate_tokens(100).unwrap();
        }
        p.stop_ids = vec![9];
        p.validate_tokens(10).unwrap();
    }
}
