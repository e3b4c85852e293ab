//! `Gpu`: one opened device with its queue, what it can do, its pipeline cache, the
//! parameter slots and bind groups of its dispatches (`gpu::bindings`), and the kernel
//! profile when one is being taken (`gpu::profile`).
//!
//! The device is requested with the adapter's own limits (not WebGPU's defaults) and with
//! shader-f16 and subgroups when the adapter has them. [`LimitCaps`] can make sprout keep
//! within smaller limits than those (`Gpu::from_adapter_capped`): tests run the paths for
//! weights and logits larger than one binding (split weights, logits in chunks) on
//! adapters whose own limits are large. Kernels that can use those features
//! ask `Capabilities`; every kernel also has a path that needs neither.

use std::sync::{Arc, Mutex};

use super::adapter::{AdapterSummary, BackendChoice, select_adapter};
use super::bindings::Bindings;
use super::pipelines::{Kernel, KernelSpec, PipelineCache};
use super::profile::{KernelProfile, ProfileMethod};
use crate::error::SproutError;

/// What the opened device supports, as sprout's kernels need to know it.
#[derive(Clone, Debug)]
pub struct Capabilities {
    pub subgroups: bool,
    /// The fewest invocations a subgroup may have (0 without subgroups).
    pub subgroup_min_size: u32,
    pub timestamps: bool,
    /// Timestamps may be written between the dispatches of one compute pass.
    pub timestamps_inside_passes: bool,
    /// Largest storage-buffer binding; a larger weight is split into parts.
    pub max_binding: u64,
    pub max_buffer: u64,
    pub max_workgroups_per_dim: u32,
    pub max_workgroup_invocations: u32,
    /// The most storage buffers one shader stage binds (the device gets the adapter's).
    pub max_storage_buffers_per_stage: u32,
}

/// Limits below the adapter's for sprout to keep within (`None`: the adapter's own).
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitCaps {
    /// The largest storage binding, in bytes.
    pub max_binding: Option<u64>,
    /// The largest buffer, in bytes.
    pub max_buffer: Option<u64>,
}

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterSummary,
    pub caps: Capabilities,
    pipelines: PipelineCache,
    pub(crate) bindings: Bindings,
    /// Set while profiling: every dispatch is timed.
    profile: Mutex<Option<KernelProfile>>,
    /// Whether the untuned kernel choices are the CPU-shaped kernels (`gpu::tuning`).
    cpu_shaped: bool,
    /// The first error the device reported on its own (a shader the driver rejected, an
    /// invalid command), until a read-back hands it to its caller.
    device_error: Arc<Mutex<Option<String>>>,
}

impl Gpu {
    /// Opens the best adapter for `choice`.
    pub async fn open(choice: BackendChoice) -> Result<Arc<Gpu>, SproutError> {
        let adapter = select_adapter(choice).await?;
        Gpu::from_adapter(&adapter).await
    }

    /// Opens a device on `adapter` with the adapter's own limits.
    // On the web wgpu's handles are neither Send nor Sync (one thread); the Arc is there to
    // share the Gpu between its owners, which it does the same.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub async fn from_adapter(adapter: &wgpu::Adapter) -> Result<Arc<Gpu>, SproutError> {
        Self::from_adapter_capped(adapter, LimitCaps::default()).await
    }

    /// As [`Gpu::from_adapter`], with sprout keeping within `caps` where they are below the
    /// adapter's limits (the device itself gets the adapter's).
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub async fn from_adapter_capped(
        adapter: &wgpu::Adapter,
        caps: LimitCaps,
    ) -> Result<Arc<Gpu>, SproutError> {
        let cap = |limit: u64, cap: Option<u64>| cap.map_or(limit, |c| c.min(limit));
        let available = adapter.features();
        // Only what a kernel or the profiler uses: no shader is written in f16, so
        // SHADER_F16 is not asked for (the adapter's summary still says if it has it).
        let wanted = wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let features = available & wanted;
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("sprout"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                // Small sub-allocation blocks: sprout's large buffers (weights, the KV
                // pool) get blocks of their own either way, and the allocator keeps one
                // empty block per memory type when everything is freed, which is what a
                // sleeping engine still holds (at most 64 MiB here, 256 MiB otherwise).
                memory_hints: wgpu::MemoryHints::MemoryUsage,
                trace: wgpu::Trace::Off,
            })
            .await?;
        let caps = Capabilities {
            max_binding: cap(limits.max_storage_buffer_binding_size, caps.max_binding),
            max_buffer: cap(limits.max_buffer_size, caps.max_buffer),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            subgroup_min_size: if features.contains(wgpu::Features::SUBGROUP) {
                adapter.get_info().subgroup_min_size
            } else {
                0
            },
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            timestamps_inside_passes: features.contains(
                wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
            ),
            max_workgroups_per_dim: limits.max_compute_workgroups_per_dimension,
            max_workgroup_invocations: limits.max_compute_invocations_per_workgroup,
            max_storage_buffers_per_stage: limits.max_storage_buffers_per_shader_stage,
        };
        // wgpu's default handler panics, and on the web a panic in its callback would leave
        // the page waiting forever: keep the first error for the next read-back instead.
        let device_error = Arc::new(Mutex::new(None));
        let first = device_error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = first.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| e.to_string());
        }));
        let bindings = Bindings::new(&device, limits.min_uniform_buffer_offset_alignment);
        let summary = AdapterSummary::of(adapter);
        let cpu_shaped = cpu_shaped_kernels(&summary);
        Ok(Arc::new(Gpu {
            device,
            queue,
            adapter: summary,
            cpu_shaped,
            caps,
            pipelines: PipelineCache::default(),
            bindings,
            profile: Mutex::new(None),
            device_error,
        }))
    }

    /// Whether the untuned defaults are the CPU-shaped kernels (CPU adapters, or
    /// `SPROUT_KERNELS=cpu`).
    pub fn cpu_shaped_defaults(&self) -> bool {
        self.cpu_shaped
    }

    /// The first error the device has reported since the last call, if any.
    pub fn take_device_error(&self) -> Option<String> {
        let mut slot = self.device_error.lock().unwrap_or_else(|p| p.into_inner());
        slot.take()
    }

    /// The compute pipeline for `spec`, built on first use and cached.
    pub fn pipeline<S: KernelSpec>(&self, spec: &S) -> Arc<Kernel> {
        self.pipelines.get(&self.device, spec)
    }

    /// Starts timing every dispatch (see `gpu::profile` for how); with no timestamp
    /// queries inside passes every dispatch then runs alone, which slows work down.
    /// Native only: reading the times needs a blocking wait.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn start_profiling(&self) {
        let method = if self.caps.timestamps_inside_passes {
            ProfileMethod::Timestamps
        } else {
            ProfileMethod::SubmitLatency
        };
        *self.profile.lock().expect("profile lock") = Some(KernelProfile::new(method));
    }

    /// Stops profiling and returns what was measured since `start_profiling`.
    pub fn finish_profiling(&self) -> Option<KernelProfile> {
        self.profile.lock().expect("profile lock").take()
    }

    /// Whether a profile is being taken.
    pub fn profiling(&self) -> bool {
        self.profile_method().is_some()
    }

    /// How dispatches are being timed, when profiling.
    pub(crate) fn profile_method(&self) -> Option<ProfileMethod> {
        self.profile
            .lock()
            .expect("profile lock")
            .as_ref()
            .map(|p| p.method)
    }

    /// Adds one dispatch's time to the profile being taken (if any).
    pub(crate) fn record_profile(&self, kernel: &str, seconds: f64) {
        if let Some(p) = self.profile.lock().expect("profile lock").as_mut() {
            p.record(kernel, seconds);
        }
    }

    /// The bind group of `kernel` over the uniform `params` (binding 0, bound with a
    /// dynamic offset) and `storage` (bindings 1..): the cached one when these buffers
    /// were bound to this kernel before (`gpu::bindings`), else a new one, cached.
    pub fn bind_group(
        &self,
        kernel: &Kernel,
        params: &wgpu::Buffer,
        storage: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        self.bindings
            .bind_group(&self.device, kernel, params, storage)
    }

    /// Drops the cached bind groups (see `gpu::bindings`), so that buffers no longer in
    /// use are freed; the engine calls it when it is dropped.
    pub fn forget_bind_groups(&self) {
        self.bindings.forget_groups();
    }

    pub fn encoder(&self) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
    }

    pub fn submit(&self, encoder: wgpu::CommandEncoder) -> wgpu::SubmissionIndex {
        self.queue.submit([encoder.finish()])
    }
}

/// Whether an adapter's default kernels are the CPU-shaped ones: on CPU adapters, unless
/// `SPROUT_KERNELS=gpu` asks for the GPU shapes (or `cpu` for the CPU shapes elsewhere),
/// which tests and comparisons use. Either way the results are bitwise the same.
fn cpu_shaped_kernels(adapter: &AdapterSummary) -> bool {
    match std::env::var("SPROUT_KERNELS").as_deref() {
        Ok("gpu") => false,
        Ok("cpu") => true,
        _ => adapter.is_cpu(),
    }
}
