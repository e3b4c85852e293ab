//! Timing a kernel: how long one recorded call takes on the GPU, for `sprout tune` and the
//! kernel benchmarks (native only: it waits for the device).
//!
//! A call is whatever `record` records (one dispatch, or an attention and its fold). A
//! submit of `calls` recordings is timed from `queue.submit` until the device is idle and
//! divided by `calls`, so a figure is the kernels' own time plus their share of one submit,
//! not the submit's latency; recording is not timed. [`calibrate`] finds how many calls
//! make a submit long enough to time, growing from one; its first submit, which builds the
//! pipelines, is not timed.

use std::time::{Duration, Instant};

use super::{Gpu, Recorder};

/// How many calls make a submit long enough, and what a call took in the last submit.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    pub calls: u32,
    pub per_call: Duration,
}

/// The time per call of one submit of `calls` recordings of `record`.
pub fn per_call(gpu: &Gpu, calls: u32, record: &dyn Fn(&mut Recorder)) -> Duration {
    let mut rec = gpu.recorder();
    for _ in 0..calls {
        record(&mut rec);
    }
    let started = Instant::now();
    rec.submit();
    // A failed wait leaves the time as measured: a benchmark has nothing better to report.
    let _ = gpu.wait_idle();
    started.elapsed() / calls.max(1)
}

/// Calls per submit for `record`: from one, multiplied by 2 to 16 each time, until a submit
/// takes `target` or holds `max_calls`, or until `enough(per_call)` says that the time so
/// far already settles what the caller wants to know (a variant far slower than the best).
pub fn calibrate(
    gpu: &Gpu,
    record: &dyn Fn(&mut Recorder),
    (target, max_calls): (Duration, u32),
    enough: &dyn Fn(Duration) -> bool,
) -> Calibration {
    per_call(gpu, 1, record);
    let mut calls = 1;
    loop {
        let time = per_call(gpu, calls, record);
        let submit = time * calls;
        if submit >= target || calls >= max_calls || enough(time) {
            return Calibration {
                calls,
                per_call: time,
            };
        }
        let factor = target.as_secs_f64() / submit.as_secs_f64().max(1e-9);
        calls = ((f64::from(calls) * factor.clamp(2.0, 16.0)) as u32).min(max_calls);
    }
}
