//! Finding adapters and describing them.
//!
//! `list_adapters` reports every adapter wgpu can see; `select_adapter` picks one for a
//! [`BackendChoice`]. `auto` prefers a real GPU (discrete, then integrated, then virtual)
//! over a CPU/software adapter, and Vulkan over GL among equals.

use serde::Serialize;

use crate::error::SproutError;

/// Which graphics backend to run on (`--backend`, env `SPROUT_BACKEND`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    #[default]
    Auto,
    Vulkan,
    Metal,
    Dx12,
    Gl,
}

impl BackendChoice {
    pub fn backends(self) -> wgpu::Backends {
        match self {
            BackendChoice::Auto => wgpu::Backends::all(),
            BackendChoice::Vulkan => wgpu::Backends::VULKAN,
            BackendChoice::Metal => wgpu::Backends::METAL,
            BackendChoice::Dx12 => wgpu::Backends::DX12,
            BackendChoice::Gl => wgpu::Backends::GL,
        }
    }

    /// Reads `SPROUT_BACKEND`; unset or empty means `auto`.
    pub fn from_env() -> Result<Self, SproutError> {
        match std::env::var("SPROUT_BACKEND") {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(BackendChoice::Auto),
        }
    }
}

impl std::fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Vulkan => "vulkan",
            BackendChoice::Metal => "metal",
            BackendChoice::Dx12 => "dx12",
            BackendChoice::Gl => "gl",
        })
    }
}

impl std::str::FromStr for BackendChoice {
    type Err = SproutError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendChoice::Auto),
            "vulkan" | "vk" => Ok(BackendChoice::Vulkan),
            "metal" => Ok(BackendChoice::Metal),
            "dx12" | "d3d12" => Ok(BackendChoice::Dx12),
            "gl" | "gles" | "opengl" => Ok(BackendChoice::Gl),
            other => Err(SproutError::BadBackend(other.to_string())),
        }
    }
}

/// What `sprout devices` prints about one adapter.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterSummary {
    pub backend: String,
    pub name: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub shader_f16: bool,
    pub subgroups: bool,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
}

impl AdapterSummary {
    /// Whether the adapter runs on the CPU (llvmpipe, SwiftShader, WARP).
    pub fn is_cpu(&self) -> bool {
        self.device_type == device_type_name(wgpu::DeviceType::Cpu)
    }

    pub fn of(adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        let features = adapter.features();
        let limits = adapter.limits();
        AdapterSummary {
            backend: backend_name(info.backend).to_string(),
            name: info.name,
            device_type: device_type_name(info.device_type).to_string(),
            driver: info.driver,
            driver_info: info.driver_info,
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
        }
    }

    /// A short label such as `vulkan/llvmpipe`, used to name tests and reports.
    pub fn label(&self) -> String {
        let short = self
            .name
            .split(['(', ','])
            .next()
            .unwrap_or(&self.name)
            .trim()
            .replace(' ', "-");
        format!("{}/{}", self.backend, short)
    }
}

pub fn backend_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "vulkan",
        wgpu::Backend::Metal => "metal",
        wgpu::Backend::Dx12 => "dx12",
        wgpu::Backend::Gl => "gl",
        wgpu::Backend::BrowserWebGpu => "webgpu",
        wgpu::Backend::Noop => "noop",
    }
}

fn device_type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete-gpu",
        wgpu::DeviceType::IntegratedGpu => "integrated-gpu",
        wgpu::DeviceType::VirtualGpu => "virtual-gpu",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    }
}

/// A new wgpu instance for `choice` (no display: sprout only computes).
pub fn instance(choice: BackendChoice) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = choice.backends();
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds for `choice`, best first.
pub async fn list_adapters(choice: BackendChoice) -> Vec<wgpu::Adapter> {
    let instance = instance(choice);
    let mut adapters = instance.enumerate_adapters(choice.backends()).await;
    adapters.retain(|a| a.get_info().backend != wgpu::Backend::Noop);
    adapters.sort_by_key(preference);
    adapters
}

/// Lower is better: real GPUs first, then Vulkan/Metal/DX12 before GL.
fn preference(adapter: &wgpu::Adapter) -> (u8, u8) {
    let info = adapter.get_info();
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let api = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::BrowserWebGpu => 1,
        _ => 2,
    };
    (kind, api)
}

/// The best adapter for `choice`, or an error that says how to get one.
pub async fn select_adapter(choice: BackendChoice) -> Result<wgpu::Adapter, SproutError> {
    list_adapters(choice)
        .await
        .into_iter()
        .next()
        .ok_or(SproutError::NoAdapter(choice))
}
