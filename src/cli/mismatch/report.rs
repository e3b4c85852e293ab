//! What `sprout mismatch` prints: a row per rollout format (and the floor), as Markdown
//! tables on stdout or, with `--json`, everything as one JSON object.
//!
//! The Markdown has three tables: the main one (speed, the KL figures, the spread of |r|,
//! the TIS weights, the sequence-level ESS and the health verdict), the low-probability
//! tokens apart, and `k3_kl` by position. The JSON holds every figure of
//! [`Mismatch`] per row, the per-position buckets included.

use serde::Serialize;

use sprout::mismatch::{Health, LOW_PROBABILITY, Mismatch};
use sprout::trajectory::LoraProvenance;

/// A row's rollout speed.
#[derive(Clone, Debug, Serialize)]
pub struct Speed {
    pub generated_tokens: usize,
    pub wall_s: f64,
    pub tokens_per_s: f64,
    /// Against the f32 row's, when there is one.
    pub speedup_vs_f32: Option<f64>,
}

/// One row: a format (or the floor) against the trainer.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `f32`, `q8_0`, ... or `floor`.
    pub format: String,
    /// What rolled out against what.
    pub rollout: String,
    pub trainer: String,
    pub health: Health,
    /// `None` for the floor (nothing was rolled out: the fixture's tokens were scored).
    pub speed: Option<Speed>,
    #[serde(flatten)]
    pub mismatch: Mismatch,
}

/// The whole report.
#[derive(Serialize)]
pub struct Report {
    pub model: String,
    pub trainer_model: String,
    pub trainer_weight_format: String,
    /// The LoRA adapter every rollout copy and the trainer ran with (`--lora`); `null`
    /// when none did.
    pub lora: Option<LoraProvenance>,
    pub adapter: Adapter,
    pub workload: Workload,
    pub rows: Vec<Row>,
    /// Why there is no floor row, when there is none.
    pub floor_left_out: Option<String>,
}

#[derive(Serialize)]
pub struct Adapter {
    pub backend: String,
    pub name: String,
    pub driver: String,
}

#[derive(Serialize)]
pub struct Workload {
    pub prompts: usize,
    pub g: usize,
    pub max_tokens: usize,
    pub temperature: f32,
    pub seed: u64,
    pub tis_cap: f64,
}

/// Fills in each row's speed-up against the f32 row.
pub fn set_speedups(rows: &mut [Row]) {
    let f32_rate = rows
        .iter()
        .find(|r| r.format == "f32")
        .and_then(|r| r.speed.as_ref())
        .map(|s| s.tokens_per_s);
    for row in rows {
        if let (Some(speed), Some(base)) = (&mut row.speed, f32_rate) {
            speed.speedup_vs_f32 = Some(speed.tokens_per_s / base);
        }
    }
}

/// A figure with 3 significant digits (exactly 0 stays `0`), as the tables print it.
fn sig(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let magnitude = x.abs().log10().floor() as i32;
    if !(-3..=4).contains(&magnitude) {
        return format!("{x:.2e}");
    }
    let decimals = (2 - magnitude).max(0) as usize;
    format!("{x:.decimals$}")
}

fn fraction(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The Markdown tables.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let w = &report.workload;
    out.push_str(&format!(
        "Rollouts of {} prompts x {} samples, at most {} new tokens, temperature {}, seed {}, \
         on {} ({}); trainer: {} ({}), TIS cap C = {}.\n\n",
        w.prompts,
        w.g,
        w.max_tokens,
        w.temperature,
        w.seed,
        report.adapter.name,
        report.adapter.backend,
        report.trainer_model,
        report.trainer_weight_format,
        w.tis_cap
    ));
    if let Some(l) = &report.lora {
        out.push_str(&format!(
            "Every rollout and the trainer ran with the LoRA adapter {} (sha256 {}).\n\n",
            l.name, l.sha256
        ));
    }
    out.push_str(
        "| format | tokens/s | vs f32 | kl | k3_kl | chi2_token | \\|r\\| mean | \\|r\\| p50 | \
         \\|r\\| p99 | \\|r\\| max | max \\|Δp\\| | ppl ratio | TIS mean | TIS clipped | outside \
         [1/C, C] | seq log-ratio mean | seq ESS | tokens | healthy |\n",
    );
    out.push_str(&format!("|{}\n", "---|".repeat(19)));
    for r in &report.rows {
        let (t, s) = (&r.mismatch.tokens, &r.mismatch.sequences);
        let (rate, speedup) = match &r.speed {
            Some(sp) => (
                format!("{:.1}", sp.tokens_per_s),
                sp.speedup_vs_f32.map_or("-".into(), |x| format!("{x:.2}x")),
            ),
            None => ("-".into(), "-".into()),
        };
        let healthy = match r.health.healthy {
            true => "yes".to_string(),
            false => format!("no ({})", r.health.crossed.join(", ")),
        };
        let cells = [
            r.format.clone(),
            rate,
            speedup,
            sig(t.kl),
            sig(t.k3_kl),
            sig(t.chi2_token),
            sig(t.abs_r_mean),
            sig(t.abs_r_p50),
            sig(t.abs_r_p99),
            sig(t.abs_r_max),
            sig(t.max_abs_dp),
            sig(s.ppl_ratio),
            sig(t.tis_mean),
            fraction(t.tis_clipped_fraction),
            fraction(t.outside_fraction),
            sig(s.seq_log_ratio_mean),
            sig(s.ess),
            t.tokens.to_string(),
            healthy,
        ];
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }

    out.push_str(&format!(
        "\nLow-probability tokens (p_rollout < {LOW_PROBABILITY}):\n\n| format | tokens | share | \
         kl | k3_kl | chi2_token | \\|r\\| p99 | TIS clipped |\n|---|---|---|---|---|---|---|---|\n"
    ));
    for r in &report.rows {
        let all = r.mismatch.tokens.tokens as f64;
        match &r.mismatch.low_probability {
            Some(l) => out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.format,
                l.tokens,
                fraction(l.tokens as f64 / all),
                sig(l.kl),
                sig(l.k3_kl),
                sig(l.chi2_token),
                sig(l.abs_r_p99),
                fraction(l.tis_clipped_fraction)
            )),
            None => out.push_str(&format!("| {} | 0 | 0% | - | - | - | - | - |\n", r.format)),
        }
    }

    // k3_kl by position: one column per bucket any row has.
    let mut buckets: Vec<(usize, usize)> = report
        .rows
        .iter()
        .flat_map(|r| r.mismatch.by_position.iter().map(|b| (b.start, b.end)))
        .collect();
    buckets.sort_unstable();
    buckets.dedup();
    out.push_str("\nk3_kl by position in the completion:\n\n| format |");
    for (start, end) in &buckets {
        out.push_str(&format!(" {start}-{} |", end - 1));
    }
    out.push_str(&format!("\n|---|{}\n", "---|".repeat(buckets.len())));
    for r in &report.rows {
        out.push_str(&format!("| {} |", r.format));
        for &(start, _) in &buckets {
            let cell = r
                .mismatch
                .by_position
                .iter()
                .find(|b| b.start == start)
                .map_or("-".into(), |b| sig(b.stats.k3_kl));
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    if let Some(why) = &report.floor_left_out {
        out.push_str(&format!("\nNo floor row: {why}.\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_keep_three_significant_digits_and_exact_zeros() {
        assert_eq!(sig(0.0), "0");
        assert_eq!(sig(0.123456), "0.123");
        assert_eq!(sig(-0.00123456), "-0.00123");
        assert_eq!(sig(12.3456), "12.3");
        assert_eq!(sig(1234.5), "1234");
        assert_eq!(sig(3.2e-7), "3.20e-7");
        assert_eq!(fraction(0.25), "25.0%");
    }
}
