//! The one set of rules for sampling parameters.
//!
//! The scheduler refuses a request whose parameters break a rule, and every front end (the
//! CLI's flags, a prompts file's lines, the web bindings' options) calls the same
//! [`SamplingParams::validate`] to say so early, in its own words: a [`SamplingError`]
//! names the parameter, its value and the rule, and the caller spells the parameter as its
//! users write it (`--top-p`, `"top_p"`).

use crate::sched::{MAX_TOP_LOGPROBS, SamplingParams};

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
    }
}
