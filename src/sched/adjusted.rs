//! Values a run uses other than those asked for.
//!
//! Some values are not errors, yet cannot be used as given: a `max_tokens` past the
//! model's context (a sample ends where the context does), a `top_k` above the vocabulary
//! (it keeps every token), more sequences per step than a step has tokens. The run goes on
//! with the value it can use; an [`Adjusted`] says which value, what is used instead and
//! why, so that each front end can say so in its own words (the CLI warns, naming its flag
//! or a prompts file's field), as [`crate::sched::SamplingError`] does for errors.
//!
//! Invariant: an [`Adjusted`] is made only when `used != asked`.

use super::SamplingParams;

/// A value used other than asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adjusted {
    /// The field's name in [`SamplingParams`] or `EngineConfig` (`max_tokens`).
    pub param: &'static str,
    pub asked: u64,
    pub used: u64,
    /// Where the value used comes from (`the model's context of 8192 tokens minus the
    /// prompt's 12`).
    pub why: String,
}

impl Adjusted {
    /// The message with the parameter spelled as a caller's users write it.
    pub fn message_for(&self, spelled: &str) -> String {
        format!(
            "{spelled} {} cannot be used as asked: using {}, {}",
            self.asked, self.used, self.why
        )
    }
}

/// What a request of `prompt_len` tokens with `params` uses other than asked, on a model
/// with a context of `max_model_len` positions and `vocab_size` tokens. The scheduler ends
/// a sample when its tokens fill the context, so at most `max_model_len - prompt_len` are
/// generated; a `top_k` of the vocabulary or more keeps every token (as 0 does).
pub fn request_adjustments(
    prompt_len: usize,
    params: &SamplingParams,
    max_model_len: usize,
    vocab_size: usize,
) -> Vec<Adjusted> {
    let mut out = Vec::new();
    let room = max_model_len.saturating_sub(prompt_len);
    // A prompt that fills the context is refused by the scheduler (an error, not this).
    if room > 0 && params.max_tokens > room {
        out.push(Adjusted {
            param: "max_tokens",
            asked: params.max_tokens as u64,
            used: room as u64,
            why: format!(
                "the model's context of {max_model_len} tokens minus the prompt's {prompt_len}"
            ),
        });
    }
    if params.top_k > vocab_size {
        out.push(Adjusted {
            param: "top_k",
            asked: params.top_k as u64,
            used: vocab_size as u64,
            why: "the size of the vocabulary (every token is kept)".into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(max_tokens: usize, top_k: usize) -> SamplingParams {
        SamplingParams {
            max_tokens,
            top_k,
            ..SamplingParams::default()
        }
    }

    #[test]
    fn max_tokens_past_the_context_is_capped_at_the_context_minus_the_prompt() {
        let a = request_adjustments(12, &params(100_000_000, 0), 8192, 100);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].param, a[0].asked, a[0].used),
            ("max_tokens", 100_000_000, 8180)
        );
        let m = a[0].message_for("--max-tokens");
        assert!(
            m.contains("--max-tokens 100000000") && m.contains("8180"),
            "{m}"
        );
        assert!(m.contains("8192") && m.contains("12"), "{m}");
    }

    #[test]
    fn values_that_fit_are_not_adjusted() {
        assert!(request_adjustments(12, &params(8180, 100), 8192, 100).is_empty());
        assert!(request_adjustments(12, &params(16, 0), 8192, 100).is_empty());
        // A prompt that fills the context is the scheduler's error, not an adjustment.
        assert!(request_adjustments(8192, &params(16, 0), 8192, 100).is_empty());
    }

    #[test]
    fn top_k_above_the_vocabulary_keeps_every_token() {
        let a = request_adjustments(1, &params(4, 101), 8192, 100);
        assert_eq!((a[0].param, a[0].asked, a[0].used), ("top_k", 101, 100));
    }
}
