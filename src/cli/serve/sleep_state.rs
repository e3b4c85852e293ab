//! What sleeps, as plain data: the engine loop's [`SleepState`] (`engine_sleep` moves it),
//! and the [`EngineStatus`] the HTTP side reads (`/health`, `/is_sleeping`, the update
//! route's check), which the loop writes after each turn.

use serde::Serialize;
use sprout::gpu::memory::DeviceMemory;
use sprout::model::weight_residency::Residency;

/// What sleeps (`true`: asleep), and the deepest level slept at since last fully awake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SleepState {
    pub level: Option<u8>,
    pub weights: bool,
    pub kv_cache: bool,
    pub scheduling: bool,
}

impl SleepState {
    pub fn is_sleeping(&self) -> bool {
        self.weights || self.kv_cache || self.scheduling
    }
}

/// What the HTTP side may read of the engine thread's state (`/health`, `/is_sleeping`,
/// the update route's check), written by the loop after each turn.
#[derive(Clone, Debug, Serialize)]
pub struct EngineStatus {
    pub sleep: SleepState,
    pub weights: Residency,
    pub memory: DeviceMemory,
}
