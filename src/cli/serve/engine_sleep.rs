//! The engine loop's sleep and wake (`/sleep`, `/wake_up`), in vLLM's semantics.
//!
//! Three things sleep: stepping (every level), the KV cache and the weights (levels 1
//! and 2). A level-1 sleep keeps the weights in host memory; a level-2 sleep discards
//! them, so after waking them an update must bring new ones (`weights` is then
//! `discarded` and requests are refused until it comes). Waking restores what its tags
//! name, the weights first; stepping resumes once neither the weights nor the KV cache
//! sleep (a wake naming only `scheduling` wakes a level-0 sleep).
//!
//! Invariants:
//! - sleeping is idempotent and may deepen (level 2 after level 1 discards the weights
//!   kept); waking what is awake does nothing;
//! - a request arriving while the server sleeps is refused with 503 (or, with
//!   `--queue-while-asleep`, held until it wakes); requests held for a pause or a drain
//!   when the sleep comes are refused then too;
//! - the engine is settled before memory is freed: the step in flight is applied and
//!   routed, and sequences kept (`mode=keep`) are preempted, to recompute on wake;
//! - an update cannot come in while the weights sleep (the update route refuses it, and
//!   the loop refuses a swap of weights that went to sleep while they loaded).

use sprout::engine::SleepLevel;
use sprout::gpu::memory::DeviceMemory;
use sprout::model::weight_residency::Residency;
use tokio::sync::oneshot;

use crate::cli::serve::engine_loop::EngineLoop;
use crate::cli::serve::heap;
use crate::cli::serve::messages::{Refusal, SleepReport, WakeReport, WakeTag};
use crate::cli::serve::sleep_state::EngineStatus;

impl EngineLoop<'_> {
    /// Sleeps at `level` now (the requests in flight already aborted, finished or to be
    /// kept), and answers `reply`.
    pub(super) fn sleep_now(
        &mut self,
        level: u8,
        reply: oneshot::Sender<Result<SleepReport, String>>,
    ) {
        let before = self.engine.device_memory().bytes;
        let held = (self.weights_bytes(), self.engine.kv_cache_bytes());
        let preemptions = self.engine.stats().preemptions;
        self.sleep.scheduling = true;
        self.sleep.level = self.sleep.level.max(Some(level));
        let depth = match level {
            0 => None,
            1 => Some(SleepLevel::Offload),
            _ => Some(SleepLevel::Discard),
        };
        let slept = match depth {
            None => Ok(()),
            Some(depth) => match pollster::block_on(self.engine.sleep(depth)) {
                Ok(settled) => {
                    self.route(settled);
                    Ok(())
                }
                Err(e) => Err(format!("sleeping failed: {e}")),
            },
        };
        // What is off the device sleeps, whether or not all of it got there.
        self.sleep.kv_cache |= !self.engine.kv_cache_resident();
        self.sleep.weights |= depth.is_some() && slept.is_ok();
        if !self.queue_while_asleep {
            for held in std::mem::take(&mut self.held) {
                let _ = held.reply.send(Err(asleep()));
            }
        }
        self.refresh_memory();
        let report = SleepReport {
            level,
            preempted: self.engine.stats().preemptions - preemptions,
            gpu_memory_bytes_before: before,
            gpu_memory_bytes: self.engine.device_memory().bytes,
            freed_weights_bytes: held.0 - self.weights_bytes(),
            freed_kv_cache_bytes: held.1 - self.engine.kv_cache_bytes(),
        };
        // The state the HTTP side reads is the sleep's before the caller hears of it.
        self.publish();
        if let Ok(()) = &slept {
            tracing::info!(
                "asleep at level {level}: {} bytes of device memory held, {before} before",
                report.gpu_memory_bytes
            );
        }
        let _ = reply.send(slept.map(|()| report));
    }

    /// Wakes what `tags` name (all with `None`), the weights first, and answers `reply`.
    /// A sleep still waiting for its requests to finish is called off.
    pub(super) fn wake(
        &mut self,
        tags: Option<Vec<WakeTag>>,
        reply: oneshot::Sender<Result<WakeReport, String>>,
    ) {
        self.call_off_sleeps();
        let named = |tag| {
            tags.as_ref()
                .is_none_or(|t: &Vec<WakeTag>| t.contains(&tag))
        };
        let mut woken = Vec::new();
        let mut failed = None;
        if named(WakeTag::Weights) && self.sleep.weights {
            // Discarded weights stay so: the update that follows brings new ones.
            match pollster::block_on(self.engine.restore_weights()) {
                Ok(()) => {}
                Err(_) if self.engine.decoder().residency() == Residency::Discarded => {}
                Err(e) => failed = Some(format!("waking the weights failed: {e}")),
            }
            if failed.is_none() {
                self.sleep.weights = false;
                woken.push(WakeTag::Weights.name());
            }
        }
        if failed.is_none() && named(WakeTag::KvCache) && self.sleep.kv_cache {
            match pollster::block_on(self.engine.restore_kv_cache()) {
                Ok(()) => {
                    self.sleep.kv_cache = false;
                    woken.push(WakeTag::KvCache.name());
                }
                Err(e) => failed = Some(format!("waking the KV cache failed: {e}")),
            }
        }
        if !self.sleep.weights && !self.sleep.kv_cache && self.sleep.scheduling {
            self.sleep.scheduling = false;
            woken.push(WakeTag::Scheduling.name());
        }
        if !self.sleep.is_sleeping() {
            self.sleep.level = None;
            if !self.paused && self.draining.is_empty() {
                self.start_held();
            }
        }
        // The host copies of what woke are freed.
        heap::release_free_pages();
        self.refresh_memory();
        self.publish();
        let _ = reply.send(match failed {
            Some(e) => Err(e),
            None => Ok(WakeReport {
                woken,
                is_sleeping: self.sleep.is_sleeping(),
                weights: self.engine.decoder().residency(),
                gpu_memory_bytes: self.engine.device_memory().bytes,
            }),
        });
    }

    /// Why a request cannot be queued now, if it cannot: the server sleeps, or its
    /// weights were discarded and no update has come since.
    pub(super) fn unavailable(&self) -> Option<Refusal> {
        if self.sleep.is_sleeping() && !self.queue_while_asleep {
            return Some(asleep());
        }
        let discarded = self.engine.decoder().residency() == Residency::Discarded;
        (discarded && !self.sleep.weights).then(|| {
            Refusal::Unavailable(
                "the weights were discarded by /sleep?level=2 and no update has come since: \
                 POST /update_weights to load new ones"
                    .into(),
            )
        })
    }

    /// Bytes of the weights on the device (0 while they sleep).
    fn weights_bytes(&self) -> u64 {
        let weights = self.engine.decoder().weights();
        weights.map_or(0, |w| w.device_bytes())
    }

    /// Whether the engine may step as far as sleep goes.
    pub(super) fn awake(&self) -> bool {
        !self.sleep.is_sleeping() && self.engine.decoder().residency() == Residency::Device
    }

    /// The state the HTTP side reads.
    pub(super) fn status(&self, memory: DeviceMemory) -> EngineStatus {
        EngineStatus {
            sleep: self.sleep,
            weights: self.engine.decoder().residency(),
            memory,
        }
    }
}

fn asleep() -> Refusal {
    Refusal::Unavailable(
        "the server is asleep (POST /wake_up wakes it); retry once it is awake".into(),
    )
}
