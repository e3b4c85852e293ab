//! Which log-probs the choices report: vLLM's `--logprobs-mode`, of which sprout has the
//! two log-prob modes (it returns no logits).

/// Which log-probs a choice's `logprobs` reports (vLLM's `--logprobs-mode`, of which sprout
/// has the two log-prob modes: it returns no logits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogprobsMode {
    /// The model's (temperature 1, nothing masked, biased, penalised or cut).
    Raw,
    /// The distribution each token was drawn from: after bias, penalties, temperature and
    /// truncation (the samples' `sampling_logprobs`).
    Processed,
}

/// Reads `--logprobs-mode`.
pub fn parse_logprobs_mode(text: &str) -> Result<LogprobsMode, String> {
    match text {
        "raw_logprobs" => Ok(LogprobsMode::Raw),
        "processed_logprobs" => Ok(LogprobsMode::Processed),
        "raw_logits" | "processed_logits" => Err(format!(
            "{text} is not supported: sprout reports log-probs, not logits \
             (raw_logprobs or processed_logprobs)"
        )),
        other => Err(format!(
            "{other} is not a log-probs mode (raw_logprobs or processed_logprobs)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_probs_modes_are_vllm_s_log_prob_ones() {
        assert_eq!(parse_logprobs_mode("raw_logprobs"), Ok(LogprobsMode::Raw));
        let processed = parse_logprobs_mode("processed_logprobs");
        assert_eq!(processed, Ok(LogprobsMode::Processed));
        for logits in ["raw_logits", "processed_logits"] {
            let e = parse_logprobs_mode(logits).unwrap_err();
            assert!(e.contains("not logits"), "{e}");
        }
        assert!(parse_logprobs_mode("raw").is_err());
    }
}
