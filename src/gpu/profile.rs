//! Per-kernel GPU time: while profiling is on, `Gpu::dispatch` runs every dispatch on its
//! own (earlier work is submitted and finished first) and times it from submission to the
//! device going idle.
//!
//! Serialising dispatches slows a step down, and each timing includes one submission and
//! wait, so the absolute figures are upper bounds; the shares between kernels are what the
//! profile is for. It works on every adapter (no timestamp queries needed) but needs a
//! blocking wait, so it is native only.

use std::collections::BTreeMap;

use serde::Serialize;

/// One kernel's calls and their summed time.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct KernelTime {
    pub calls: u64,
    pub seconds: f64,
}

/// Time per kernel, keyed by the kernel's name (its pipeline key, such as
/// `matmul/4x4/q4_1/Vec4`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelProfile {
    pub kernels: BTreeMap<String, KernelTime>,
}

impl KernelProfile {
    pub fn record(&mut self, kernel: &str, seconds: f64) {
        let entry = self.kernels.entry(kernel.to_string()).or_default();
        entry.calls += 1;
        entry.seconds += seconds;
    }

    pub fn total_seconds(&self) -> f64 {
        self.kernels.values().map(|k| k.seconds).sum()
    }

    /// The kernels by descending time.
    pub fn by_time(&self) -> Vec<(&str, KernelTime)> {
        let mut rows: Vec<(&str, KernelTime)> =
            self.kernels.iter().map(|(k, t)| (k.as_str(), *t)).collect();
        rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds).then(a.0.cmp(b.0)));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_sum_per_kernel_and_sort_by_time() {
        let mut p = KernelProfile::default();
        p.record("a", 1.0);
        p.record("b", 3.0);
        p.record("a", 1.5);
        assert_eq!(p.kernels["a"].calls, 2);
        assert_eq!(p.total_seconds(), 5.5);
        let order: Vec<&str> = p.by_time().iter().map(|(k, _)| *k).collect();
        assert_eq!(order, ["b", "a"]);
    }
}
