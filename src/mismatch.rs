//! The mismatch metrics: how far a rollout engine's log-probabilities are from a trainer's
//! on the same sampled tokens. Pure arithmetic on two lists of log-probs per sample; no
//! GPU, no I/O. A leaf: it imports nothing of sprout. `sprout mismatch` reports them and
//! `sprout score` writes the TIS weights ([`tis_weight`]).
//!
//! Definitions (per token t of a sample, both log-probs of the token that was sampled):
//! - `r = logp_rollout - logp_train` (natural log). Positive: the rollout engine was more
//!   confident in the token than the trainer is.
//! - `ratio = p_train / p_rollout = e^{-r}`: the importance weight that turns an
//!   expectation under the rollout's distribution (where the tokens came from) into one
//!   under the trainer's.
//! - `kl = mean(r)`: the plain (k1) estimate of KL(rollout ‖ train), since the tokens were
//!   drawn from the rollout.
//! - `k3_kl = mean(ratio - 1 - ln ratio) = mean(e^{-r} + r - 1)`: Schulman's k3 estimate of
//!   the same KL, never negative. (Written with verl's `log_ratio = logp_train -
//!   logp_rollout = -r` it is `mean(e^{log_ratio} - log_ratio - 1)`.)
//! - `chi2_token = mean(ratio^2) - 1`: the chi-square divergence of the trainer from the
//!   rollout at one token, estimated from the rollout's own samples.
//! - `|r|` mean, p50, p99 (nearest rank: the `ceil(q n)`-th smallest) and max; `max |Δp|`
//!   is the largest `|p_rollout - p_train|` of any token.
//! - TIS (truncated importance sampling) weights `min(ratio, C)`: their mean, and the
//!   fraction clipped (`ratio > C`); `outside_fraction` is the fraction of ratios outside
//!   `[1/C, C]` (what a two-sided mask such as MIS or IcePop would drop). C is 2 unless
//!   said otherwise.
//! - Per sample i: `S_i = Σ_t ln ratio = -Σ_t r`, the log of the sequence-level weight
//!   `w_i = e^{S_i}`; reported as its mean, min and max; `chi2_seq = mean(w_i^2) - 1`; the
//!   effective sample size `ess = (Σ w_i)^2 / (n Σ w_i^2)`, a fraction in (0, 1] (1 when all
//!   weights are equal), computed with the largest `S_i` factored out so nothing overflows.
//! - `ppl_ratio`: per sample, training perplexity over rollout perplexity, `e^{mean_t r}`,
//!   averaged over samples.
//!
//! These follow verl's rollout-correction diagnostics (`compute_offpolicy_metrics` and
//! `compute_is_metrics` in `verl/trainer/ppo/rollout_corr_helper.py`): the same `kl`,
//! `k3_kl`, `ppl_ratio`, `chi2_token` and `chi2_seq`, with verl's clamp of each log-ratio
//! (and each sequence's sum) to ±20 before exponentiating, so one wild token cannot make a
//! figure infinite; verl's health thresholds (|kl| > 0.1, ess < 0.3, chi2_token > 1 are
//! unhealthy) are [`Health`]. Where verl's ESS is over token weights, the ESS here is over
//! sequence weights, as sequence-level IS sees them.
//!
//! Invariants: a sample whose two lists are equal contributes r = 0 exactly, so a format
//! scored against itself gives exactly 0 for kl, k3_kl, chi2_token, chi2_seq and every
//! |r| and |Δp| figure, and exactly 1 for ess, ppl_ratio and the TIS mean. All arithmetic is
//! in f64. Samples with no tokens are left out.

use serde::Serialize;

/// verl's bound on a log-ratio before it is exponentiated.
const SAFETY_BOUND: f64 = 20.0;

/// The default TIS cap C (FlashRL's and verl's).
pub const DEFAULT_CAP: f64 = 2.0;

/// Tokens the rollout gave less than this probability are the "low-probability" set.
pub const LOW_PROBABILITY: f64 = 0.1;

/// One sample's log-probabilities of its tokens: the rollout's and the trainer's.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub rollout: Vec<f32>,
    pub train: Vec<f32>,
}

/// Token-level figures over a set of tokens.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenStats {
    pub tokens: usize,
    pub kl: f64,
    pub k3_kl: f64,
    pub chi2_token: f64,
    pub abs_r_mean: f64,
    pub abs_r_p50: f64,
    pub abs_r_p99: f64,
    pub abs_r_max: f64,
    pub max_abs_dp: f64,
    pub tis_mean: f64,
    pub tis_clipped_fraction: f64,
    pub outside_fraction: f64,
}

/// Sequence-level figures over a set of samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SequenceStats {
    pub sequences: usize,
    pub ppl_ratio: f64,
    pub seq_log_ratio_mean: f64,
    pub seq_log_ratio_min: f64,
    pub seq_log_ratio_max: f64,
    pub chi2_seq: f64,
    pub ess: f64,
}

/// The token figures of one range of positions in the completions, `[start, end)`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PositionBucket {
    pub start: usize,
    pub end: usize,
    #[serde(flatten)]
    pub stats: TokenStats,
}

/// Everything measured for one rollout format against the trainer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    pub cap: f64,
    #[serde(flatten)]
    pub tokens: TokenStats,
    #[serde(flatten)]
    pub sequences: SequenceStats,
    /// The tokens with `p_rollout <` [`LOW_PROBABILITY`]; `None` when there are none.
    pub low_probability: Option<TokenStats>,
    /// By position in the completion (see [`bucket_of`]), the buckets that hold tokens.
    pub by_position: Vec<PositionBucket>,
    /// Every token's |r|, sorted: the CDF a plot draws (not written as JSON).
    #[serde(skip)]
    pub abs_r_sorted: Vec<f64>,
}

/// The health thresholds of the rule of thumb (verl's): a row is unhealthy when
/// `|kl| > 0.1`, `ess < 0.3` or `chi2_token > 1`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Health {
    pub healthy: bool,
    /// The thresholds crossed, by name (`"kl"`, `"ess"`, `"chi2_token"`).
    pub crossed: Vec<&'static str>,
}

impl Mismatch {
    /// The figures of `samples` with TIS cap `cap` (> 1); `None` when no sample has a
    /// token. Each sample's two lists must be equally long (the caller scored exactly the
    /// rollout's tokens).
    pub fn of(samples: &[Sample], cap: f64) -> Option<Mismatch> {
        let samples: Vec<&Sample> = samples.iter().filter(|s| !s.rollout.is_empty()).collect();
        for s in &samples {
            assert_eq!(s.rollout.len(), s.train.len(), "one log-prob per token");
        }
        let all: Vec<Token> = samples
            .iter()
            .flat_map(|s| tokens(s).enumerate())
            .map(|(position, (rollout, train))| Token {
                position,
                rollout,
                train,
            })
            .collect();
        let token_stats = TokenStats::of(&all, cap)?;
        let low: Vec<Token> = all
            .iter()
            .copied()
            .filter(|t| t.rollout.exp() < LOW_PROBABILITY)
            .collect();
        let mut by_position = Vec::new();
        let last = all.iter().map(|t| t.position).max().unwrap_or(0);
        for bucket in 0..=bucket_of(last) {
            let (start, end) = bucket_bounds(bucket);
            let inside: Vec<Token> = all
                .iter()
                .copied()
                .filter(|t| (start..end).contains(&t.position))
                .collect();
            if let Some(stats) = TokenStats::of(&inside, cap) {
                by_position.push(PositionBucket { start, end, stats });
            }
        }
        let mut abs_r_sorted: Vec<f64> = all.iter().map(|t| t.r().abs()).collect();
        abs_r_sorted.sort_by(f64::total_cmp);
        Some(Mismatch {
            cap,
            tokens: token_stats,
            sequences: SequenceStats::of(&samples),
            low_probability: TokenStats::of(&low, cap),
            by_position,
            abs_r_sorted,
        })
    }

    /// Whether the rule of thumb calls this healthy.
    pub fn health(&self) -> Health {
        let mut crossed = Vec::new();
        if self.tokens.kl.abs() > 0.1 {
            crossed.push("kl");
        }
        if self.sequences.ess < 0.3 {
            crossed.push("ess");
        }
        if self.tokens.chi2_token > 1.0 {
            crossed.push("chi2_token");
        }
        Health {
            healthy: crossed.is_empty(),
            crossed,
        }
    }
}

/// The TIS weight of one token, `min(p_train / p_rollout, cap)`, from its two log-probs.
pub fn tis_weight(rollout: f32, train: f32, cap: f64) -> f64 {
    ratio(f64::from(train) - f64::from(rollout)).min(cap)
}

/// `e^{log_ratio}`, with the log-ratio clamped to ±[`SAFETY_BOUND`] as verl does.
fn ratio(log_ratio: f64) -> f64 {
    log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
}

/// The position bucket of a token at `position` (0-based) in its completion: positions
/// 0-7 are bucket 0, then 8-15, 16-31, 32-63, ... (each bucket after the first two twice
/// as wide as the one before), since mismatch is known to grow along long outputs.
pub fn bucket_of(position: usize) -> usize {
    match position {
        0..8 => 0,
        p => (p.ilog2() - 2) as usize,
    }
}

/// The positions `[start, end)` of bucket `bucket`.
pub fn bucket_bounds(bucket: usize) -> (usize, usize) {
    match bucket {
        0 => (0, 8),
        b => (4 << b, 8 << b),
    }
}

/// One token's position and two log-probs, widened to f64.
#[derive(Clone, Copy)]
struct Token {
    position: usize,
    rollout: f64,
    train: f64,
}

impl Token {
    fn r(&self) -> f64 {
        self.rollout - self.train
    }
}

fn tokens(s: &Sample) -> impl Iterator<Item = (f64, f64)> + '_ {
    s.rollout
        .iter()
        .zip(&s.train)
        .map(|(&a, &b)| (f64::from(a), f64::from(b)))
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    sum / n as f64
}

/// The nearest-rank `q`-quantile of sorted values: the `ceil(q n)`-th smallest.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl TokenStats {
    fn of(tokens: &[Token], cap: f64) -> Option<TokenStats> {
        if tokens.is_empty() {
            return None;
        }
        let n = tokens.len() as f64;
        let ratios: Vec<f64> = tokens.iter().map(|t| ratio(-t.r())).collect();
        let mut abs_r: Vec<f64> = tokens.iter().map(|t| t.r().abs()).collect();
        abs_r.sort_by(f64::total_cmp);
        let count = |f: &dyn Fn(f64) -> bool| ratios.iter().filter(|&&w| f(w)).count() as f64 / n;
        Some(TokenStats {
            tokens: tokens.len(),
            kl: mean(tokens.iter().map(Token::r)),
            // ratio - 1 - ln(ratio), with ln(ratio) = -r clamped as the ratio was.
            k3_kl: mean(
                tokens
                    .iter()
                    .zip(&ratios)
                    .map(|(t, w)| w - 1.0 + t.r().clamp(-SAFETY_BOUND, SAFETY_BOUND)),
            ),
            chi2_token: mean(ratios.iter().map(|w| w * w)) - 1.0,
            abs_r_mean: mean(abs_r.iter().copied()),
            abs_r_p50: quantile(&abs_r, 0.5),
            abs_r_p99: quantile(&abs_r, 0.99),
            abs_r_max: abs_r[abs_r.len() - 1],
            max_abs_dp: tokens
                .iter()
                .map(|t| (t.rollout.exp() - t.train.exp()).abs())
                .fold(0.0, f64::max),
            tis_mean: mean(ratios.iter().map(|w| w.min(cap))),
            tis_clipped_fraction: count(&|w| w > cap),
            outside_fraction: count(&|w| w > cap || w < 1.0 / cap),
        })
    }
}

impl SequenceStats {
    /// `samples` all have at least one token.
    fn of(samples: &[&Sample]) -> SequenceStats {
        let n = samples.len() as f64;
        // S_i = Σ ln ratio = Σ (logp_train - logp_rollout).
        let sums: Vec<f64> = samples
            .iter()
            .map(|s| tokens(s).map(|(a, b)| b - a).sum())
            .collect();
        let top = sums.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // With w'_i = e^{S_i - top}: (Σ w)^2 / (n Σ w^2) is the same fraction.
        let scaled: Vec<f64> = sums.iter().map(|s| (s - top).exp()).collect();
        let (sum, sum_sq) = scaled
            .iter()
            .fold((0.0, 0.0), |(a, b), w| (a + w, b + w * w));
        SequenceStats {
            sequences: samples.len(),
            ppl_ratio: mean(
                samples
                    .iter()
                    .map(|s| mean(tokens(s).map(|(a, b)| a - b)).exp()),
            ),
            seq_log_ratio_mean: mean(sums.iter().copied()),
            seq_log_ratio_min: sums.iter().copied().fold(f64::INFINITY, f64::min),
            seq_log_ratio_max: top,
            chi2_seq: mean(sums.iter().map(|&s| ratio(s).powi(2))) - 1.0,
            ess: sum * sum / (n * sum_sq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: f64 = std::f64::consts::LN_2;

    /// ln 2.5 and ln 1.5.
    fn la() -> f64 {
        2.5f64.ln()
    }
    fn lb() -> f64 {
        1.5f64.ln()
    }

    fn close(got: f64, want: f64, what: &str) {
        // The inputs are f32 log-probs: about 1e-7 relative.
        assert!(
            (got - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{what}: {got}, want {want}"
        );
    }

    fn sample(rollout: &[f64], train: &[f64]) -> Sample {
        let ln = |p: &[f64]| p.iter().map(|p| p.ln() as f32).collect();
        Sample {
            rollout: ln(rollout),
            train: ln(train),
        }
    }

    /// Two samples, worked by hand (L = ln 2, La = ln 2.5, Lb = ln 1.5); no ratio sits on
    /// a boundary (1/C, C), where f32 rounding would decide the side:
    /// A: p_rollout [0.5, 0.05], p_train [0.2, 0.075] -> ratio [0.4, 1.5], r [La, -Lb]
    /// B: p_rollout [0.2, 0.04], p_train [0.8, 0.04]  -> ratio [4, 1],     r [-2L, 0]
    fn worked() -> Vec<Sample> {
        vec![
            sample(&[0.5, 0.05], &[0.2, 0.075]),
            sample(&[0.2, 0.04], &[0.8, 0.04]),
            // No tokens: left out of every figure.
            sample(&[], &[]),
        ]
    }

    #[test]
    fn token_figures_match_the_hand_worked_example() {
        let (la, lb) = (la(), lb());
        let m = Mismatch::of(&worked(), 2.0).unwrap();
        let t = &m.tokens;
        assert_eq!(t.tokens, 4);
        // mean(r) = (La - Lb - 2L + 0) / 4 = -0.2188
        close(t.kl, (la - lb - 2.0 * L) / 4.0, "kl");
        // ratio - 1 + r: (0.4 - 1 + La) + (1.5 - 1 - Lb) + (4 - 1 - 2L) + 0, over 4
        close(t.k3_kl, (2.9 + la - lb - 2.0 * L) / 4.0, "k3_kl");
        // mean(ratio^2) - 1 = (0.16 + 2.25 + 16 + 1) / 4 - 1 = 3.8525
        close(t.chi2_token, 3.8525, "chi2_token");
        // |r| = [La, Lb, 2L, 0]; sorted [0, Lb, La, 2L]: p50 the 2nd, p99 the 4th
        close(t.abs_r_mean, (la + lb + 2.0 * L) / 4.0, "abs_r_mean");
        close(t.abs_r_p50, lb, "abs_r_p50");
        close(t.abs_r_p99, 2.0 * L, "abs_r_p99");
        close(t.abs_r_max, 2.0 * L, "abs_r_max");
        // |Δp| = [0.3, 0.025, 0.6, 0]
        close(t.max_abs_dp, 0.6, "max_abs_dp");
        // min(ratio, 2) = [0.4, 1.5, 2, 1]: mean 1.225; only 4 > 2; 0.4 and 4 outside
        // [0.5, 2]
        close(t.tis_mean, 1.225, "tis_mean");
        close(t.tis_clipped_fraction, 0.25, "tis_clipped_fraction");
        close(t.outside_fraction, 0.5, "outside_fraction");
    }

    #[test]
    fn sequence_figures_match_the_hand_worked_example() {
        let (la, lb) = (la(), lb());
        let m = Mismatch::of(&worked(), 2.0).unwrap();
        let s = &m.sequences;
        assert_eq!(s.sequences, 2);
        // S = -Σr: A Lb - La = ln 0.6, B 2L; w = [0.6, 4]
        close(
            s.seq_log_ratio_mean,
            (lb - la + 2.0 * L) / 2.0,
            "seq_log_ratio_mean",
        );
        close(s.seq_log_ratio_min, 0.6f64.ln(), "seq_log_ratio_min");
        close(s.seq_log_ratio_max, 2.0 * L, "seq_log_ratio_max");
        // mean(w^2) - 1 = (0.36 + 16) / 2 - 1 = 7.18
        close(s.chi2_seq, 7.18, "chi2_seq");
        // (0.6 + 4)^2 / (2 (0.36 + 16)) = 21.16 / 32.72
        close(s.ess, 21.16 / 32.72, "ess");
        // e^{mean r}: A e^{(La - Lb)/2} = sqrt(5/3), B e^{-L} = 0.5; their mean
        close(
            s.ppl_ratio,
            ((5.0f64 / 3.0).sqrt() + 0.5) / 2.0,
            "ppl_ratio",
        );
    }

    #[test]
    fn low_probability_tokens_and_positions_are_apart() {
        let lb = lb();
        let m = Mismatch::of(&worked(), 2.0).unwrap();
        // p_rollout < 0.1: A's 0.05 (ratio 1.5, r -Lb) and B's 0.04 (ratio 1, r 0)
        let low = m.low_probability.as_ref().unwrap();
        assert_eq!(low.tokens, 2);
        close(low.kl, -lb / 2.0, "low kl");
        // (1.5 - 1 - Lb) + 0, over 2
        close(low.k3_kl, (0.5 - lb) / 2.0, "low k3_kl");
        // (2.25 + 1) / 2 - 1
        close(low.chi2_token, 0.625, "low chi2_token");
        close(low.tis_mean, 1.25, "low tis_mean");
        close(low.max_abs_dp, 0.025, "low max_abs_dp");
        // Both samples are shorter than 8 tokens: one bucket, every token.
        assert_eq!(m.by_position.len(), 1);
        assert_eq!(m.by_position[0].stats, m.tokens);
        // A ninth token lands in bucket [8, 16).
        let mut long = sample(&[0.5; 9], &[0.5; 9]);
        long.train[8] = (0.25f64).ln() as f32;
        let m = Mismatch::of(&[long], 2.0).unwrap();
        let buckets: Vec<(usize, usize, usize)> = m
            .by_position
            .iter()
            .map(|b| (b.start, b.end, b.stats.tokens))
            .collect();
        assert_eq!(buckets, [(0, 8, 8), (8, 16, 1)]);
        assert_eq!(m.by_position[0].stats.kl, 0.0);
        close(m.by_position[1].stats.kl, L, "bucket kl");
        assert_eq!(m.low_probability, None);
    }

    #[test]
    fn buckets_double_after_the_first_two() {
        let got: Vec<usize> = [0, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128]
            .into_iter()
            .map(bucket_of)
            .collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]);
        for b in 0..8 {
            let (start, end) = bucket_bounds(b);
            assert_eq!((bucket_of(start), bucket_of(end - 1)), (b, b));
            if b > 0 {
                assert_eq!(start, bucket_bounds(b - 1).1);
            }
        }
    }

    #[test]
    fn a_format_against_itself_gives_exactly_zero() {
        let same: Vec<Sample> = worked()
            .into_iter()
            .map(|s| Sample {
                rollout: s.rollout.clone(),
                train: s.rollout,
            })
            .collect();
        let m = Mismatch::of(&same, 2.0).unwrap();
        for (name, value) in [
            ("kl", m.tokens.kl),
            ("k3_kl", m.tokens.k3_kl),
            ("chi2_token", m.tokens.chi2_token),
            ("abs_r_max", m.tokens.abs_r_max),
            ("max_abs_dp", m.tokens.max_abs_dp),
            ("tis_clipped_fraction", m.tokens.tis_clipped_fraction),
            ("outside_fraction", m.tokens.outside_fraction),
            ("seq_log_ratio_max", m.sequences.seq_log_ratio_max),
            ("chi2_seq", m.sequences.chi2_seq),
        ] {
            assert_eq!(value, 0.0, "{name}");
        }
        for (name, value) in [
            ("tis_mean", m.tokens.tis_mean),
            ("ess", m.sequences.ess),
            ("ppl_ratio", m.sequences.ppl_ratio),
        ] {
            assert_eq!(value, 1.0, "{name}");
        }
        assert!(m.health().healthy);
    }

    #[test]
    fn health_names_each_threshold_crossed() {
        let m = Mismatch::of(&worked(), 2.0).unwrap();
        // |kl| = 0.219 > 0.1, chi2_token 3.85 > 1, ess 0.647 >= 0.3
        assert_eq!(m.health().crossed, ["kl", "chi2_token"]);
        assert!(!m.health().healthy);
    }

    #[test]
    fn wild_ratios_stay_finite_and_weights_are_capped() {
        // A token the trainer gives e^-60 of the rollout's probability, and the reverse.
        let m = Mismatch::of(
            &[Sample {
                rollout: vec![0.0, -60.0],
                train: vec![-60.0, 0.0],
            }],
            2.0,
        )
        .unwrap();
        assert!(m.tokens.chi2_token.is_finite() && m.sequences.chi2_seq.is_finite());
        assert!(m.tokens.k3_kl.is_finite());
        close(
            m.tokens.tis_mean,
            (20f64.exp().min(2.0) + (-20f64).exp()) / 2.0,
            "tis",
        );
        assert_eq!(tis_weight(-1.0, 0.0, 2.0), 2.0);
        close(tis_weight(0.0, -1.0, 2.0), (-1f64).exp(), "tis_weight");
        assert!(Mismatch::of(&[sample(&[], &[])], 2.0).is_none());
    }
}
