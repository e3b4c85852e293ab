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
//! Before any draft is verified it takes a drafted token to be accepted half the time
//! (a prior of one accepted token and one rejection, which fades as drafts are verified),
//! so it starts drafting at once where rows are cheap and a step's fixed cost dominates
//! (a GPU decoding few sequences), and not where they are dear. A sample that finds
//! nothing to draft counts as a rejection.
//!
//! To learn that drafts pay where it predicted they would not, it measures: a step not
//! predicted to pay still drafts, for one decoding sample in [`EXPLORE_SHARE`], when the
//! predicted cost keeps all such measuring within [`EXPLORE_BUDGET`] of the time run so
//! far. That cost is a row per drafted token, and what the step that drafts and the one
//! before it lose by not planning the next step while the GPU works: taken as half a step
//! each until measured, then charged as measured (each of those steps' time over what the
//! fit gives for its rows), since on some adapters that loss is many times the CPU time
//! itself. So measuring is frequent where it costs little and rare where it costs much,
//! and when drafts never pay it costs about the budget (over it by at most what one
//! measuring step cost beyond its prediction).

use super::MAX_DRAFT;

/// Speculate only when predicted to be at least this much faster.
pub const MARGIN: f64 = 1.05;
/// The share of the time run that drafting not predicted to pay may cost, to keep
/// measuring acceptance.
pub const EXPLORE_BUDGET: f64 = 0.01;
/// A step that only measures drafts for one in this many decoding samples.
pub const EXPLORE_SHARE: usize = 8;
/// Weight kept by the old estimates at each new measurement.
const DECAY: f64 = 0.97;
/// The acceptance assumed before any draft: one accepted token and one rejection.
const PRIOR: f64 = 1.0;

/// A step's cost: `c0 + c1 * rows` seconds of GPU time, plus `cpu` seconds (planning,
/// encoding, applying) exposed when a step is not overlapped with the planning of the
/// next.
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

    /// The CPU time (planning, encoding, applying) of a step, exposed when it runs
    /// without overlap.
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
#[derive(Clone, Debug)]
pub struct AutoPolicy {
    pub cost: StepCost,
    accepted: f64,
    rejected: f64,
    /// Seconds of steps run (GPU and exposed CPU time).
    run_s: f64,
    /// Seconds spent drafting in steps not predicted to pay (rows predicted, lost overlap
    /// measured).
    explored_s: f64,
    /// How many of the next steps recorded lose their overlap to measuring drafts.
    charge_steps: u8,
    /// What one such step lost, measured (seconds; `None` before any).
    exposure: Option<f64>,
    /// The step being planned drafts to measure, not because it is predicted to pay:
    /// this many tokens per draft at most.
    probe_len: Option<usize>,
}

impl Default for AutoPolicy {
    fn default() -> AutoPolicy {
        AutoPolicy {
            cost: StepCost::default(),
            accepted: PRIOR,
            rejected: PRIOR,
            run_s: 0.0,
            explored_s: 0.0,
            charge_steps: 0,
            exposure: None,
            probe_len: None,
        }
    }
}

impl AutoPolicy {
    /// A step of `rows` rows took `step_s`, of which `cpu_s` was CPU work (planning,
    /// encoding, applying; given for steps that only decode, the steps that draft);
    /// `overlapped` when the next step was planned while the GPU worked, which hid that
    /// CPU time.
    pub fn record_step(&mut self, rows: usize, step_s: f64, cpu_s: Option<f64>, overlapped: bool) {
        if self.charge_steps > 0 {
            self.charge_steps -= 1;
            let expected = self
                .cost
                .fit()
                .map_or(step_s, |(c0, c1)| c0 + c1 * rows as f64);
            let lost = (step_s - expected).max(0.0);
            self.explored_s += lost;
            self.exposure = Some(match self.exposure {
                Some(e) => DECAY * e + (1.0 - DECAY) * lost,
                None => lost,
            });
        }
        let gpu_s = match (overlapped, cpu_s) {
            (false, Some(cpu)) => (step_s - cpu).max(0.0),
            _ => step_s,
        };
        self.cost.record(rows, gpu_s);
        if let Some(cpu) = cpu_s {
            self.cost.record_cpu(cpu);
        }
        self.run_s += step_s;
    }

    /// A verified draft: `accepted` of its `drafted` tokens were taken.
    pub fn record_verify(&mut self, drafted: usize, accepted: usize) {
        self.accepted = DECAY * self.accepted + accepted as f64;
        self.rejected = DECAY * self.rejected + f64::from(u8::from(accepted < drafted));
    }

    /// A sample that could draft found nothing to draft from: as a draft rejected at its
    /// first token, since it gains nothing (so a workload without drafts stops looking).
    pub fn record_no_draft(&mut self) {
        self.record_verify(1, 0);
    }

    /// The estimated chance that a drafted token is accepted (1/2 before any draft).
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
        // that measure. Until a measuring step has been timed, each of its two steps is
        // taken to lose half a step: on some adapters the overlap hides far more than
        // the CPU time.
        let step = c0 + c1 * rows as f64;
        let lost = self.exposure.unwrap_or(step / 2.0).max(self.cost.cpu());
        let exposed = 2.0 * lost;
        let left = EXPLORE_BUDGET * self.run_s - self.explored_s - exposed;
        let per_token = c1 * decoding.div_ceil(EXPLORE_SHARE) as f64;
        let tokens = match per_token > 0.0 {
            true => (left / per_token).floor().min(MAX_DRAFT as f64),
            false => MAX_DRAFT as f64,
        };
        if tokens < 1.0 {
            return false;
        }
        let len = tokens as usize;
        self.explored_s += per_token * len as f64;
        self.charge_steps = 2;
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
        for _ in 0..200 {
            p.record_verify(5, 4);
        }
        assert!((p.acceptance() - 0.8).abs() < 1e-3, "{}", p.acceptance());
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

    /// Runs `steps` steps of `decoding` samples at `c0 + c1 * rows` seconds each on the
    /// GPU and `cpu` seconds on the CPU, as the engine does: the decision for a step is
    /// taken while the step before runs, a step with drafts (all rejected here) and the
    /// step before it are not overlapped, and so expose their CPU time. Returns the
    /// measuring steps and the share of the time run they added.
    fn run_rejecting_everything(
        (c0, c1, cpu): (f64, f64, f64),
        decoding: usize,
        steps: usize,
    ) -> (usize, f64) {
        let mut p = AutoPolicy::default();
        let prefill = c0 + c1 * 64.0 + cpu;
        p.record_step(64, prefill, Some(cpu), false);
        let (mut measuring, mut extra, mut total) = (0, 0.0, prefill);
        let mut next_drafts = None;
        for _ in 0..steps {
            let drafted: usize = next_drafts.take().unwrap_or(0);
            let speculate_next = p.should_speculate(decoding, decoding);
            if speculate_next {
                measuring += 1;
                next_drafts =
                    Some(p.drafting_samples(decoding) * p.keep(decoding, decoding, MAX_DRAFT));
            }
            let overlapped = drafted == 0 && !speculate_next;
            let exposed = if overlapped { 0.0 } else { cpu };
            let s = c0 + c1 * (decoding + drafted) as f64 + exposed;
            if drafted > 0 {
                p.record_verify(drafted, 0);
            }
            p.record_step(decoding + drafted, s, Some(cpu), overlapped);
            extra += c1 * drafted as f64 + exposed;
            total += s;
        }
        (measuring, extra / total)
    }

    #[test]
    fn measuring_stays_within_its_budget_and_goes_on_where_it_costs_little() {
        // A CPU-like adapter (all cost per row), a GPU-like one (mostly fixed cost), and
        // one whose CPU work per step is as long as its GPU work.
        let costs = [
            (0.0, 0.05, 0.0),
            (0.0, 0.05, 0.01),
            (0.010, 0.000_01, 0.001),
        ];
        for cost in costs.into_iter().chain([(0.010, 0.000_01, 0.010)]) {
            for decoding in [1, 8, 64] {
                let (measuring, share) = run_rejecting_everything(cost, decoding, 2000);
                assert!(measuring > 0, "{cost:?} {decoding}: never measured");
                // A step's charge is known only after it ran: at most one step over.
                assert!(
                    share <= 1.2 * EXPLORE_BUDGET,
                    "{cost:?} {decoding}: {share}"
                );
            }
        }
        // Where rows and the CPU cost little, measuring goes on often once its cost is
        // measured (its first time is taken to cost a step).
        let (measuring, _) = run_rejecting_everything((0.010, 0.000_01, 0.0), 8, 400);
        assert!(measuring >= 100, "{measuring}");
        // While measuring, few samples draft; otherwise every sample may.
        let mut p = AutoPolicy::default();
        for _ in 0..200 {
            p.record_step(64, 0.020, Some(0.0), true);
        }
        assert!(p.should_speculate(64, 64));
        assert_eq!(p.drafting_samples(64), 64 / EXPLORE_SHARE);
        assert_eq!(p.drafting_samples(1), 1);
        assert!(!p.should_speculate(0, 4), "nothing decodes");
        assert_eq!(p.drafting_samples(64), 64);
    }

    #[test]
    fn drafts_while_they_are_accepted_and_stops_when_they_are_not() {
        // Rows cost 20% of a step at one sample: drafts pay when mostly accepted.
        let mut p = AutoPolicy::default();
        for rows in [64, 1, 1, 1, 1, 1, 1, 1] {
            p.record_step(rows, 0.2 + 0.05 * rows as f64, Some(0.0), true);
        }
        assert!(p.should_speculate(1, 1), "the prior (1/2) predicts a gain");
        assert_eq!(p.probe_len, None, "predicted to pay, not measuring");
        assert_eq!(
            p.keep(1, 1, MAX_DRAFT),
            2,
            "1/2 and 1/4 beat a row's 0.2 tokens"
        );
        for _ in 0..5 {
            p.record_verify(2, 0);
        }
        let drafts = p.should_speculate(1, 1);
        assert!(
            !drafts || p.probe_len.is_some(),
            "only to measure: {}",
            p.acceptance()
        );
        // The budget lets a later step measure: its one-token draft is accepted...
        for _ in 0..100 {
            p.record_step(1, 0.25, Some(0.0), true);
        }
        assert!(p.should_speculate(1, 1));
        let len = p.probe_len.expect("measuring");
        for _ in 0..40 {
            p.record_verify(len, len);
        }
        // ...and drafting pays again, whole drafts.
        assert!(p.should_speculate(1, 1));
        assert_eq!(p.probe_len, None);
        assert_eq!(p.keep(1, 1, MAX_DRAFT), MAX_DRAFT);
    }
}
