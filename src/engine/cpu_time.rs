//! The CPU time the calling thread has used, where the platform has a clock for it (Unix):
//! what recording a step costs the host, without the time its thread waited for a core
//! (on a CPU adapter the "GPU" runs on the same cores, and an overlapped step records while
//! the one before it computes).

/// Seconds of CPU time this thread has used so far, or `None` where the platform gives no
/// per-thread clock.
pub fn thread_seconds() -> Option<f64> {
    #[cfg(all(unix, not(target_arch = "wasm32")))]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through the pointer, which points at
        // `ts`, alive and writable for the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(all(unix, not(target_arch = "wasm32"))))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(unix)]
    fn the_thread_clock_counts_work_and_not_sleep() {
        use std::time::{Duration, Instant};
        let start = thread_seconds().expect("a per-thread clock on Unix");
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_seconds().unwrap() - start;
        assert!(slept < 0.02, "sleeping 50 ms used {slept} s of CPU");
        // Work until the clock shows 20 ms of it (a loaded machine gives the thread only
        // a share of the wall time), within a generous bound.
        let (from, wall) = (thread_seconds().unwrap(), Instant::now());
        let mut x = 0u64;
        while thread_seconds().unwrap() - from < 0.02 {
            assert!(
                wall.elapsed() < Duration::from_secs(20),
                "20 s of work counted {} s",
                thread_seconds().unwrap() - from
            );
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        // The work took about the CPU time it counted, at least. (The thread clock and the
        // monotonic clock have different sources; in a virtual machine they may differ by a
        // few milliseconds over 20, so only half is asked for.)
        assert!(wall.elapsed().as_secs_f64() >= 0.01);
    }
}
