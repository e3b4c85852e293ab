//! What `sprout check` reports: one row per (adapter, what it is compared against, case),
//! printed as a table or as JSON, and the list of regressions that makes it exit 1.
//!
//! Invariant: a row passes only when it was compared and everything compared is within
//! its tolerance; a row that could not run carries its error and fails.

use serde::Serialize;

use super::compare::{CaseComparison, Divergence};
use super::kernels::{KERNEL_TOLERANCE, KernelCheck};

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The adapter's label (`vulkan/llvmpipe`).
    pub adapter: String,
    /// `goldens`, another adapter's label, or `cpu reference` (kernel checks).
    pub against: String,
    pub case: String,
    /// Tokens equal before the first divergence, over the tokens expected.
    pub tokens_equal: Option<(usize, usize)>,
    /// Largest |Δ| compared (log-probs; kernel outputs for the kernel checks).
    pub max_abs_delta: Option<f64>,
    pub tolerance: f64,
    pub divergence: Option<Divergence>,
    /// Why the row could not be compared, if it could not.
    pub error: Option<String>,
    pub passed: bool,
}

impl Row {
    /// A suite case of `adapter` compared against `against`.
    pub fn case(adapter: &str, against: &str, case: &str, c: CaseComparison, tol: f64) -> Row {
        Row {
            adapter: adapter.into(),
            against: against.into(),
            case: case.into(),
            passed: c.passes(tol),
            tokens_equal: Some(c.tokens_equal),
            max_abs_delta: Some(c.max_abs_delta),
            tolerance: tol,
            divergence: c.divergence,
            error: None,
        }
    }

    /// A kernel check of `adapter`.
    pub fn kernel(adapter: &str, k: &KernelCheck) -> Row {
        Row {
            adapter: adapter.into(),
            against: "cpu reference".into(),
            case: format!("kernel {}", k.name),
            passed: k.passes(),
            tokens_equal: k.tokens_equal,
            max_abs_delta: Some(k.max_abs_delta),
            tolerance: KERNEL_TOLERANCE,
            divergence: None,
            error: k.error.clone(),
        }
    }

    /// Something of `adapter` that failed before it could be compared.
    pub fn error(adapter: &str, against: &str, case: &str, error: String) -> Row {
        Row {
            adapter: adapter.into(),
            against: against.into(),
            case: case.into(),
            tokens_equal: None,
            max_abs_delta: None,
            tolerance: 0.0,
            divergence: None,
            error: Some(error),
            passed: false,
        }
    }

    /// One line saying what regressed (for a failed row).
    pub fn regression(&self) -> String {
        let what = match (&self.error, &self.divergence) {
            (Some(e), _) => e.clone(),
            (None, Some(d)) => format!("tokens diverge at {}", divergence(d)),
            (None, None) => format!(
                "max |Δ| {} exceeds {:.0e}",
                delta(self.max_abs_delta),
                self.tolerance
            ),
        };
        format!(
            "{} against {}, {}: {what}",
            self.adapter, self.against, self.case
        )
    }
}

fn delta(d: Option<f64>) -> String {
    match d {
        Some(0.0) => "0".into(),
        Some(d) => format!("{d:.2e}"),
        None => "-".into(),
    }
}

fn token(t: Option<u32>) -> String {
    t.map_or("(none)".into(), |t| t.to_string())
}

fn divergence(d: &Divergence) -> String {
    format!(
        "prompt {} sample {} position {}: expected {}, got {}",
        d.prompt,
        d.sample,
        d.position,
        token(d.expected),
        token(d.got)
    )
}

/// The table: one line per row, then the regressions (if any).
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<4} {:<22} {:<22} {:<18} {:>11} {:>10}  first divergence\n",
        "", "adapter", "against", "case", "tokens", "max |Δ|"
    );
    for r in rows {
        let tokens = r
            .tokens_equal
            .map_or("-".into(), |(a, b)| format!("{a}/{b}"));
        let note = match (&r.error, &r.divergence) {
            (Some(e), _) => format!("error: {e}"),
            (None, Some(d)) => divergence(d),
            (None, None) => "-".into(),
        };
        out += &format!(
            "{:<4} {:<22} {:<22} {:<18} {:>11} {:>10}  {note}\n",
            if r.passed { "ok" } else { "FAIL" },
            r.adapter,
            r.against,
            r.case,
            tokens,
            delta(r.max_abs_delta),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_row_says_where_it_diverged() {
        let c = CaseComparison {
            tokens_equal: (7, 16),
            max_abs_delta: 0.0,
            divergence: Some(Divergence {
                prompt: 1,
                sample: 0,
                position: 7,
                expected: Some(42),
                got: Some(43),
            }),
        };
        let row = Row::case("vulkan/llvmpipe", "goldens", "greedy", c, 1e-3);
        assert!(!row.passed);
        let text = table(std::slice::from_ref(&row));
        assert!(text.contains("FAIL") && text.contains("7/16"), "{text}");
        assert!(
            row.regression()
                .contains("prompt 1 sample 0 position 7: expected 42, got 43"),
            "{}",
            row.regression()
        );
    }
}
