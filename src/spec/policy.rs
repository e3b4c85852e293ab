//! When speculation pays ([`super::SpecMode::Auto`]): a model of a step's cost and of how
//! often drafts are accepted, both measured as the engine runs.
//!
//! - [`StepCost`]: a step's GPU time as `c0 + c1 * rows`, by exponentially weighted least
//!   squares over the steps run, plus the CPU time a step exposes when the next one is
//!   not planned during it (a speculative step's results decide the next step).
//! - Acceptance: a drafted token is taken to be accepted with probability `a`, each
//!   independently, so a draft of k tokens gains `a + a^2 + ... + a^k` tokens. `a` is
//!   estimated from the verified drafts as accepted / (accepted + rejections).
//!
//! A step speculates when `(B + gain) / (c0 + c1 (R + K) + cpu)` beats `B / (c0 + c1 R)`
//! by [`MARGIN`], with `B` decoding samples, `R` rows without drafts and `K` drafted
//! rows, each draft cut to the tokens whose expected gain `a^j` is worth a row's cost.
//! Without measurements it assumes nothing pays (acceptance 0), and it speculates one step
//! in [`EXPLORE_EVERY`] anyway (the first after that many steps, so that a short run never
//! pays for measuring), with one decoding sample in [`EXPLORE_SHARE`], so that the
//! estimates follow the workload at little cost.

/// Speculate only when predicted to be at least this much faster.
pub const MARGIN: f64 = 1.05;
/// One step in this many speculates whatever the prediction, to keep measuring.
pub const EXPLORE_EVERY: u64 = 64;
/// A step that only measures drafts for one in this many decoding samples.
pub const EXPLORE_SHARE: usize = 8;
/// Weight kept by the old estimates at each new measurement.
const DECAY: f64 = 0.97;

/// A step's cost: `c0 + c1 * rows` seconds of GPU time, plus `cpu` seconds exposed when a
/// step is not overlapped with the planning of the next.
#[derive(Clone, Debug, Default)]
pub struct StepCost {
    // Exponentially weighted sums of 1, x, y, x^2, x*y over (rows, seconds).
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
    cpu: Option<f64>,
}

impl StepCost {
    /// A step of `rows` rows whose GPU part took `seconds`.
    pub fn record(&mut self, rows: usize, seconds: f64) {
        let x = rows as f64;
        self.w = DECAY * self.w + 1.0;
        self.x = DECAY * self.x + x;
        self.y = DECAY * self.y + seconds;
        self.xx = DECAY * self.xx + x * x;
        self.xy = DECAY * self.xy + x * seconds;
    }

    /// The CPU time (planning, encoding, applying) of a step run without overlap.
    pub fn record_cpu(&mut self, seconds: f64) {
        self.cpu = Some(match self.cpu {
            Some(c) => DECAY * c + (1.0 - DECAY) * seconds,
            None => seconds,
        });
    }

    /// `(c0, c1)`; `None` before any step. With too little spread in the rows seen to tell
    /// the fixed cost from the per-row one, all of it is taken as per-row (`c0 = 0`), the
    /// assumption under which speculation never pays.
    pub fn fit(&self) -> Option<(f64, f64)> {
        if self.w <= 0.0 || self.x <= 0.0 {
            return None;
        }
        let (mx, my) = (self.x / self.w, self.y / self.w);
        let var = self.xx / self.w - mx * mx;
        let cov = self.xy / self.w - mx * my;
        if var > 0.25 {
            let c1 = (cov / var).max(0.0);
            let c0 = (my - c1 * mx).max(0.0);
            if c1 > 0.0 {
                return Some((c0, c1));
            }
        }
        Some((0.0, my / mx))
    }

    pub fn cpu(&self) -> f64 {
        self.cpu.unwrap_or(0.0)
    }
}

/// The measurements and the decisions of [`super::SpecMode::Auto`].
#[derive(Clone, Debug, Default)]
pub struct AutoPolicy {
    pub cost: StepCost,
    accepted: f64,
    rejected: f64,
    steps: u64,
    /// The step being planned speculates to measure, not because it is predicted to pay.
    exploring: bool,
}

impl AutoPolicy {
    /// A verified draft: `accepted` of its `drafted` tokens were taken.
    pub fn record_verify(&mut self, drafted: usize, accepted: usize) {
        self.accepted = DECAY * self.accepted + accepted as f64;
        self.rejected = DECAY * self.rejected + f64::from(u8::from(accepted < drafted));
    }

    /// The estimated chance that a drafted token is accepted (0 before any draft).
    pub fn acceptance(&self) -> f64 {
        let n = self.accepted + self.rejected;
        if n > 0.0 { self.accepted / n } else { 0.0 }
    }

    /// Whether the next step should speculate, for `decoding` samples that draw and
    /// `rows` rows in all without drafts. Counts the step.
    pub fn should_speculate(&mut self, decoding: usize, rows: usize) -> bool {
        self.steps += 1;
        self.exploring = false;
        if decoding == 0 {
            return false;
        }
        if self.steps.is_multiple_of(EXPLORE_EVERY) {
            self.exploring = true;
            return true;
        }
        let Some((c0, c1)) = self.cost.fit() else {
            return false;
        };
        let a = self.acceptance();
        let k = self.draft_len(c0, c1, decoding, rows, usize::MAX);
        if k == 0 {
            return false;
        }
        let gain: f64 = (1..=k).map(|j| a.powi(j as i32)).sum();
        let (b, r) = (decoding as f64, rows as f64);
        let off = b / (c0 + c1 * r);
        let spec = (b + b * gain) / (c0 + c1 * (r + b * k as f64) + self.cost.cpu());
        spec > MARGIN * off
    }

    /// How many of `decoding` samples may carry a draft in the step being planned: all of
    /// them when it is predicted to pay; when it only measures, one in [`EXPLORE_SHARE`]
    /// (at least one), so that measuring costs little even where drafts never pay.
    pub fn drafting_samples(&self, decoding: usize) -> usize {
        match self.exploring {
            true => decoding.div_ceil(EXPLORE_SHARE),
            false => decoding,
        }
    }

    /// How many of a draft's `max` tokens are worth a row each in a step of `rows` rows
    /// with `decoding` drawing samples: token j (1-based) is kept while its chance `a^j`
    /// of being accepted beats the tokens a row's time would give at the step's rate.
    pub fn keep(&self, decoding: usize, rows: usize, max: usize) -> usize {
        if self.exploring {
            return max;
        }
        match self.cost.fit() {
            Some((c0, c1)) => self.draft_len(c0, c1, decoding, rows, max),
            None => max,
        }
    }

    fn draft_len(&self, c0: f64, c1: f64, decoding: usize, rows: usize, max: usize) -> usize {
        let rate = decoding as f64 / (c0 + c1 * rows as f64);
        let row_worth = c1 * rate;
        let a = self.acceptance();
        let mut k = 0;
        while k < max.min(super::MAX_DRAFT) && a.powi(k as i32 + 1) > row_worth {
            k += 1;
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_fixed_and_a_per_row_cost() {
        let mut c = StepCost::default();
        for rows in [1, 4, 8, 16, 2, 32] {
            c.record(rows, 0.010 + 0.001 * rows as f64);
        }
        let (c0, c1) = c.fit().unwrap();
        assert!((c0 - 0.010).abs() < 1e-9, "{c0}");
        assert!((c1 - 0.001).abs() < 1e-9, "{c1}");
    }

    #[test]
    fn without_spread_all_cost_is_per_row() {
        let mut c = StepCost::default();
        for _ in 0..10 {
            c.record(8, 0.016);
        }
        assert_eq!(c.fit(), Some((0.0, 0.002)));
    }

    #[test]
    fn speculates_when_rows_are_cheap_and_drafts_accepted_but_not_when_rows_cost() {
        // A GPU-like adapter: 10 ms a step, 0.01 ms a row; 80% of drafted tokens taken.
        let mut p = AutoPolicy::default();
        for rows in [1, 2, 4, 8, 64] {
            p.cost.record(rows, 0.010 + 0.000_01 * rows as f64);
        }
        for _ in 0..20 {
            p.record_verify(5, 4);
        }
        assert!((p.acceptance() - 0.8).abs() < 1e-9);
        p.steps = 1; // past the exploring step
        assert!(p.should_speculate(1, 1));
        assert_eq!(p.keep(1, 1, 8), 8);
        // A CPU-like adapter: all cost per row. Nothing is worth a row.
        let mut q = AutoPolicy::default();
        for rows in [1, 2, 4, 8, 64] {
            q.cost.record(rows, 0.001 * rows as f64);
        }
        q.accepted = p.accepted;
        q.rejected = p.rejected;
        q.steps = 1;
        assert!(!q.should_speculate(1, 1));
        assert_eq!(q.keep(1, 1, 8), 0);
    }

    #[test]
    fn explores_once_in_a_while_and_not_without_decoding_samples() {
        let mut p = AutoPolicy::default();
        for rows in [1, 2, 4] {
            p.cost.record(rows, 0.001 * rows as f64);
        }
        let decisions: Vec<bool> = (0..2 * EXPLORE_EVERY)
            .map(|_| p.should_speculate(4, 4))
            .collect();
        assert_eq!(decisions.iter().filter(|&&d| d).count(), 2);
        assert!(!p.should_speculate(0, 4));
        // While exploring, few samples draft, each all it can.
        p.steps = EXPLORE_EVERY * 3 - 1;
        assert!(p.should_speculate(64, 64));
        assert_eq!(p.drafting_samples(64), 64 / EXPLORE_SHARE);
        assert_eq!(p.drafting_samples(1), 1);
        assert_eq!(p.keep(64, 64, 5), 5);
        // Otherwise every sample may, and nothing is worth a row here.
        assert!(!p.should_speculate(64, 64));
        assert_eq!(p.drafting_samples(64), 64);
        assert_eq!(p.keep(64, 64, 5), 0);
    }
}
