//! When speculation pays ([`super::SpecMode::Auto`]): a model of a step's cost and of how
//! often drafts are accepted, both measured as the engine runs.
//!
//! - [`StepCost`]: a step's GPU time as `c0 + c1 * rows`, by exponentially weighted least
//!   squares over the steps run, plus the CPU time a step exposes when the next one is
//!   not planned during it (a speculative step's results decide the next step).
//! - Acceptance: a drafted token is taken to be accepted with probability `a`, each
//!   independently, so a draft of k tokens gains `a + a^2 + ... + a^k` tokens. `a` is
//!   estimated from the verified drafts as accepted / (accepted + rejections), which holds
//!   for drafts of any length, one token included.
//!
//! A step speculates when `(B + gain) / (c0 + c1 (R + K) + cpu)` beats `B / (c0 + c1 R)`
//! by [`MARGIN`], with `B` decoding samples, `R` rows without drafts and `K` drafted
//! rows, each draft cut to the tokens whose expected gain `a^j` is worth a row's cost.
//!
//! Without measurements it assumes nothing pays (acceptance 0). To learn otherwise it
//! measures: a step not predicted to pay still drafts when the predicted cost of doing
//! so (the exposed CPU time plus a row per drafted token) keeps all such measuring within
//! [`EXPLORE_BUDGET`] of the time run so far. Measuring drafts for one decoding sample in
//! [`EXPLORE_SHARE`], each as long as the budget left allows (one token at least). So
//! measuring is cheap where rows cost little (a GPU: it starts within a few steps) and
//! rare where they cost much (a CPU adapter), and it never costs more than the budget
//! when drafts never pay.

use super::MAX_DRAFT;

/// Speculate only when predicted to be at least this much faster.
pub const MARGIN: f64 = 1.05;
/// The share of the time run that drafting not predicted to pay may cost, to keep
/// measuring acceptance.
pub const EXPLORE_BUDGET: f64 = 0.02;
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
    /// Seconds of steps run (GPU and exposed CPU time).
    run_s: f64,
    /// Predicted seconds spent drafting in steps not predicted to pay.
    explored_s: f64,
    /// The step being planned drafts to measure, not because it is predicted to pay:
    /// this many tokens per draft at most.
    probe_len: Option<usize>,
}

impl AutoPolicy {
    /// A step of `rows` rows ran: its GPU part took `gpu_s`, and it exposed `cpu_s` of CPU
    /// time when it was not overlapped with planning the next.
    pub fn record_step(&mut self, rows: usize, gpu_s: f64, cpu_s: Option<f64>) {
        self.cost.record(rows, gpu_s);
        if let Some(cpu) = cpu_s {
            self.cost.record_cpu(cpu);
        }
        self.run_s += gpu_s + cpu_s.unwrap_or(0.0);
    }

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
    /// `rows` rows in all without drafts: when predicted to pay, or to measure while the
    /// measuring budget allows.
    pub fn should_speculate(&mut self, decoding: usize, rows: usize) -> bool {
        self.probe_len = None;
        if decoding == 0 {
            return false;
        }
        let Some((c0, c1)) = self.cost.fit() else {
            return false;
        };
        if self.predicts_gain(c0, c1, decoding, rows) {
            return true;
        }
        // What measuring may still cost, and what a draft token costs on the samples
        // that measure.
        let left = EXPLORE_BUDGET * self.run_s - self.explored_s - self.cost.cpu();
        let per_token = c1 * decoding.div_ceil(EXPLORE_SHARE) as f64;
        let tokens = match per_token > 0.0 {
            true => (left / per_token).floor().min(MAX_DRAFT as f64),
            false => MAX_DRAFT as f64,
        };
        if tokens < 1.0 {
            return false;
        }
        let len = tokens as usize;
        self.explored_s += self.cost.cpu() + per_token * len as f64;
        self.probe_len = Some(len);
        true
    }

    fn predicts_gain(&self, c0: f64, c1: f64, decoding: usize, rows: usize) -> bool {
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
        match self.probe_len {
            Some(_) => decoding.div_ceil(EXPLORE_SHARE),
            None => decoding,
        }
    }

    /// How many of a draft's `max` tokens are worth a row each in a step of `rows` rows
    /// with `decoding` drawing samples: token j (1-based) is kept while its chance `a^j`
    /// of being accepted beats the tokens a row's time would give at the step's rate.
    /// When the step only measures, as many as its budget allows.
    pub fn keep(&self, decoding: usize, rows: usize, max: usize) -> usize {
        if let Some(len) = self.probe_len {
            return len.min(max);
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
        while k < max.min(MAX_DRAFT) && a.powi(k as i32 + 1) > row_worth {
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
        assert!(p.should_speculate(1, 1));
        assert_eq!(p.probe_len, None, "predicted to pay, not measuring");
        assert_eq!(p.keep(1, 1, 8), 8);
        // A CPU-like adapter: all cost per row. Nothing is worth a row, and with no time
        // run there is no budget to measure with.
        let mut q = AutoPolicy::default();
        for rows in [1, 2, 4, 8, 64] {
            q.cost.record(rows, 0.001 * rows as f64);
        }
        q.accepted = p.accepted;
        q.rejected = p.rejected;
        assert!(!q.should_speculate(1, 1));
        assert_eq!(q.keep(1, 1, 8), 0);
    }

    /// Runs `steps` steps of `decoding` samples at `c0 + c1 * rows` seconds each (a
    /// measuring step: its drafted rows too, all rejected); returns the measuring steps
    /// and the share of the time run they added.
    fn run_rejecting_everything(c0: f64, c1: f64, decoding: usize, steps: usize) -> (usize, f64) {
        let mut p = AutoPolicy::default();
        let prefill = c0 + c1 * 64.0;
        p.record_step(64, prefill, None);
        let (mut measuring, mut extra, mut total) = (0, 0.0, prefill);
        for _ in 0..steps {
            let drafted = match p.should_speculate(decoding, decoding) {
                true => {
                    measuring += 1;
                    let samples = p.drafting_samples(decoding);
                    let len = p.keep(decoding, decoding, MAX_DRAFT);
                    for _ in 0..samples {
                        p.record_verify(len, 0);
                    }
                    samples * len
                }
                false => 0,
            };
            let s = c0 + c1 * (decoding + drafted) as f64;
            p.record_step(decoding + drafted, s, None);
            extra += c1 * drafted as f64;
            total += s;
        }
        assert_eq!(p.acceptance(), 0.0);
        (measuring, extra / total)
    }

    #[test]
    fn measuring_stays_within_its_budget_and_starts_soon_where_rows_are_cheap() {
        // A CPU-like adapter (all cost per row) and a GPU-like one (mostly fixed cost).
        for (c0, c1, decoding) in [(0.0, 0.05, 1), (0.0, 0.05, 64), (0.010, 0.000_01, 8)] {
            let (measuring, share) = run_rejecting_everything(c0, c1, decoding, 2000);
            assert!(measuring > 0, "{c0} {c1} {decoding}: never measured");
            assert!(share <= EXPLORE_BUDGET, "{c0} {c1} {decoding}: {share}");
        }
        // Where rows cost little, measuring starts at once and goes on often.
        let (measuring, _) = run_rejecting_everything(0.010, 0.000_01, 8, 20);
        assert!(measuring >= 10, "{measuring}");
        // While measuring, few samples draft; otherwise every sample may.
        let mut p = AutoPolicy::default();
        for _ in 0..10 {
            p.record_step(64, 0.020, None);
        }
        assert!(p.should_speculate(64, 64));
        assert_eq!(p.drafting_samples(64), 64 / EXPLORE_SHARE);
        assert_eq!(p.drafting_samples(1), 1);
        assert!(!p.should_speculate(0, 4), "nothing decodes");
        assert_eq!(p.drafting_samples(64), 64);
    }

    #[test]
    fn a_measured_draft_that_is_accepted_turns_speculation_on() {
        // Rows cost 20% of a step: a draft pays when accepted, not when rejected.
        let mut p = AutoPolicy::default();
        for rows in [64, 1, 1, 1] {
            p.record_step(rows, 0.2 + 0.05 * rows as f64, None);
        }
        assert!(p.should_speculate(1, 1));
        assert!(p.probe_len.is_some(), "measuring, not predicted to pay");
        let len = p.keep(1, 1, MAX_DRAFT);
        p.record_verify(len, len);
        assert!(p.should_speculate(1, 1));
        assert_eq!(p.probe_len, None, "now predicted to pay");
        assert_eq!(p.keep(1, 1, MAX_DRAFT), MAX_DRAFT);
    }
}
