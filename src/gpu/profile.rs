//! Per-kernel GPU time, taken while profiling is on (`Gpu::start_profiling`).
//!
//! Where the device has timestamp queries inside compute passes, the step's recorder
//! writes a timestamp before and after every dispatch of its one compute pass, and the
//! figures are the GPU's own time per kernel (`ProfileMethod::Timestamps`). Elsewhere each
//! dispatch runs alone (earlier work is submitted and finished first) and is timed from
//! submission to the device going idle (`ProfileMethod::SubmitLatency`): those figures
//! include a submission and a wait each, so they are upper bounds and only the shares
//! between kernels mean much. Either way profiling needs a blocking wait, so it is native
//! only.

use std::collections::BTreeMap;

use serde::Serialize;

/// How a profile's times were taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileMethod {
    /// GPU timestamps around each dispatch inside the step's compute pass.
    Timestamps,
    /// Each dispatch submitted alone and waited for: includes submit latency.
    #[default]
    SubmitLatency,
}

impl ProfileMethod {
    /// A line for readers of the profile.
    pub fn describe(self) -> &'static str {
        match self {
            ProfileMethod::Timestamps => "GPU timestamps around each dispatch in the step's pass",
            ProfileMethod::SubmitLatency => {
                "no timestamp queries inside passes on this adapter: each dispatch ran alone, \
                 and its time includes one submit and wait"
            }
        }
    }
}

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
    pub method: ProfileMethod,
    pub kernels: BTreeMap<String, KernelTime>,
}

impl KernelProfile {
    pub fn new(method: ProfileMethod) -> KernelProfile {
        KernelProfile {
            method,
            kernels: BTreeMap::new(),
        }
    }

    pub fn record(&mut self, kernel: &str, seconds: f64) {
        if let Some(entry) = self.kernels.get_mut(kernel) {
            entry.calls += 1;
            entry.seconds += seconds;
            return;
        }
        self.kernels
            .insert(kernel.to_string(), KernelTime { calls: 1, seconds });
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
