//! Comparing one run of a suite case with another (the goldens, or the reference adapter's
//! run): token ids must be equal, log-probs within a tolerance.
//!
//! Invariant: a log-prob is compared only where both runs drew the same tokens up to and
//! including it (before the first divergence, or everywhere when scoring forced tokens);
//! past a divergence the two runs condition on different text and their log-probs mean
//! different things.

use serde::Serialize;

use super::goldens::CaseResult;

/// Largest accepted |Δ log-prob| between two runs of the suite, absolute. Measured: lavapipe
/// Vulkan and llvmpipe GL, each with the CPU-shaped and the GPU-shaped kernels, give
/// bitwise the same log-probs (a spread of 0 over the suite's ~300); other drivers may
/// fuse multiply-adds or compute `exp` differently, which moves an f32 log-sum-exp over a
/// 49k vocabulary by ~1e-5. 1e-3 leaves a wide margin for that and still catches a kernel
/// that reads a wrong weight, key or mask, which moves log-probs far more. Stated in
/// `sprout check --help` and the README: change them together.
pub const LOGPROB_TOLERANCE: f64 = 1e-3;

/// Where two runs first disagree on a token.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Divergence {
    pub prompt: u32,
    pub sample: u32,
    pub position: usize,
    /// `None` where that run has no token there (it ended, or lacks the sample).
    pub expected: Option<u32>,
    pub got: Option<u32>,
}

/// What comparing one case found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaseComparison {
    /// Tokens equal before each sample's first divergence, over the expected tokens.
    pub tokens_equal: (usize, usize),
    /// Largest |Δ log-prob| over the comparable positions; infinite for a non-finite
    /// log-prob.
    pub max_abs_delta: f64,
    /// The first divergence, in (prompt, sample, position) order.
    pub divergence: Option<Divergence>,
}

impl CaseComparison {
    pub fn passes(&self, tolerance: f64) -> bool {
        self.divergence.is_none() && self.max_abs_delta <= tolerance
    }
}

/// Compares `got` with `expected` sample by sample, matched by (prompt, sample).
pub fn compare(expected: &CaseResult, got: &CaseResult) -> CaseComparison {
    let mut out = CaseComparison {
        tokens_equal: (0, 0),
        max_abs_delta: 0.0,
        divergence: None,
    };
    for e in &expected.samples {
        out.tokens_equal.1 += e.token_ids.len();
        let g = got
            .samples
            .iter()
            .find(|g| (g.prompt, g.sample) == (e.prompt, e.sample));
        let g_tokens = g.map_or(&[][..], |g| &g.token_ids[..]);
        let same = e
            .token_ids
            .iter()
            .zip(g_tokens)
            .take_while(|(a, b)| a == b)
            .count();
        out.tokens_equal.0 += same;
        if (same < e.token_ids.len() || same < g_tokens.len() || g.is_none())
            && out.divergence.is_none()
        {
            out.divergence = Some(Divergence {
                prompt: e.prompt,
                sample: e.sample,
                position: same,
                expected: e.token_ids.get(same).copied(),
                got: g_tokens.get(same).copied(),
            });
        }
        if let Some(g) = g {
            for (a, b) in e.logprobs.iter().zip(&g.logprobs).take(same) {
                let d = (*a as f64 - *b as f64).abs();
                // NaN compares false with everything: count it as infinitely far.
                out.max_abs_delta =
                    out.max_abs_delta
                        .max(if d.is_nan() { f64::INFINITY } else { d });
            }
            if g.logprobs.len().min(same) < e.logprobs.len().min(same) {
                out.max_abs_delta = f64::INFINITY; // log-probs missing where tokens agree
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::check::goldens::{self, SampleResult};

    fn case(samples: &[(u32, u32, &[u32], &[f32])]) -> CaseResult {
        CaseResult {
            case: "greedy".into(),
            samples: samples
                .iter()
                .map(|&(prompt, sample, t, l)| SampleResult {
                    prompt,
                    sample,
                    token_ids: t.to_vec(),
                    logprobs: l.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn equal_runs_pass_and_small_log_prob_moves_are_measured() {
        let a = case(&[(0, 0, &[5, 6, 7], &[-0.5, -1.0, -2.0])]);
        let b = case(&[(0, 0, &[5, 6, 7], &[-0.5, -1.0004, -2.0])]);
        assert!(compare(&a, &a).passes(LOGPROB_TOLERANCE));
        let c = compare(&a, &b);
        assert_eq!(c.tokens_equal, (3, 3));
        assert!((c.max_abs_delta - 4e-4).abs() < 1e-6, "{c:?}");
        assert!(c.passes(LOGPROB_TOLERANCE));
        assert!(!c.passes(1e-4));
    }

    #[test]
    fn the_first_divergence_is_reported_and_later_log_probs_are_not_compared() {
        let a = case(&[
            (0, 0, &[5, 6, 7], &[-0.5, -1.0, -2.0]),
            (0, 1, &[8, 9], &[-0.1, -0.2]),
        ]);
        let b = case(&[
            (0, 0, &[5, 6, 7], &[-0.5, -1.0, -2.0]),
            (0, 1, &[8, 4], &[-0.1, -9.0]),
        ]);
        let c = compare(&a, &b);
        assert_eq!(c.tokens_equal, (4, 5));
        assert_eq!(c.max_abs_delta, 0.0);
        let d = c.divergence.clone().unwrap();
        assert_eq!((d.prompt, d.sample, d.position), (0, 1, 1));
        assert_eq!((d.expected, d.got), (Some(9), Some(4)));
        assert!(!c.passes(LOGPROB_TOLERANCE));
    }

    #[test]
    fn missing_samples_shorter_runs_and_nan_fail() {
        let a = case(&[(0, 0, &[5, 6], &[-0.5, -1.0]), (1, 0, &[3], &[-0.3])]);
        let missing = compare(&a, &case(&[(0, 0, &[5, 6], &[-0.5, -1.0])]));
        let d = missing.divergence.unwrap();
        assert_eq!(
            (d.prompt, d.position, d.expected, d.got),
            (1, 0, Some(3), None)
        );
        let short = compare(&a, &case(&[(0, 0, &[5], &[-0.5]), (1, 0, &[3], &[-0.3])]));
        assert_eq!(short.divergence.unwrap().got, None);
        let longer = compare(
            &a,
            &case(&[
                (0, 0, &[5, 6, 2], &[-0.5, -1.0, -1.0]),
                (1, 0, &[3], &[-0.3]),
            ]),
        );
        assert_eq!(longer.divergence.unwrap().expected, None);
        let nan = compare(
            &a,
            &case(&[(0, 0, &[5, 6], &[-0.5, f32::NAN]), (1, 0, &[3], &[-0.3])]),
        );
        assert_eq!(nan.max_abs_delta, f64::INFINITY);
        assert!(!nan.passes(LOGPROB_TOLERANCE));
    }

    /// The built-in goldens with one token edited: comparing the goldens' own run (the
    /// goldens themselves) with them fails at that token, naming it.
    #[test]
    fn a_corrupted_golden_token_is_a_regression() {
        let goldens = goldens::parse(goldens::BUILT_IN).unwrap();
        let run = goldens.cases.clone();
        for (i, case) in goldens.cases.iter().enumerate() {
            assert!(
                compare(case, &run[i]).passes(LOGPROB_TOLERANCE),
                "{}",
                case.case
            );
        }
        let greedy = goldens
            .cases
            .iter()
            .position(|c| c.case == "greedy")
            .unwrap();
        let mut corrupted = goldens.cases[greedy].clone();
        let sample = &mut corrupted.samples[1];
        let original = sample.token_ids[3];
        sample.token_ids[3] = original + 1;
        let c = compare(&corrupted, &run[greedy]);
        assert!(!c.passes(LOGPROB_TOLERANCE));
        let d = c.divergence.unwrap();
        assert_eq!((d.prompt, d.sample, d.position), (1, 0, 3));
        assert_eq!((d.expected, d.got), (Some(original + 1), Some(original)));
    }
}
