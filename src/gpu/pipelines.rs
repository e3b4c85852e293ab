//! Compiled compute pipelines, created once per (kernel, variant) and cached.
//!
//! A `KernelSpec` names a WGSL source, its entry point and its bindings. Binding 0 is
//! always a uniform parameter block; bindings 1.. are storage buffers, read-only or
//! read-write. Layouts are explicit so that several entry points may share one module.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How a kernel uses one storage binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// Everything needed to build a pipeline. `key` must identify `source` + `entry` uniquely.
///
/// Kernels ask for their pipeline on every dispatch, so the source is a function that runs
/// only when the cache misses: building a generated module takes several KB of formatting.
pub struct KernelSpec {
    pub key: String,
    pub source: Box<dyn Fn() -> String>,
    pub entry: &'static str,
    pub storage: &'static [Access],
}

/// A built pipeline and its bind-group layout.
pub struct Kernel {
    /// Unique among the kernels of one cache: identifies the kernel in bind-group keys.
    pub id: usize,
    pub name: String,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    pub storage_bindings: usize,
}

#[derive(Default)]
pub struct PipelineCache {
    built: Mutex<HashMap<String, Arc<Kernel>>>,
    next_id: AtomicUsize,
}

impl PipelineCache {
    pub fn get(&self, device: &wgpu::Device, spec: &KernelSpec) -> Arc<Kernel> {
        if let Some(k) = self.built.lock().unwrap().get(&spec.key) {
            return k.clone();
        }
        // Built outside the lock: compiling a shader can take a while on software adapters.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let kernel = Arc::new(build(device, spec, id));
        self.built
            .lock()
            .unwrap()
            .entry(spec.key.clone())
            .or_insert(kernel)
            .clone()
    }

    pub fn len(&self) -> usize {
        self.built.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn build(device: &wgpu::Device, spec: &KernelSpec, id: usize) -> Kernel {
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            // Parameters live in slots of one shared buffer (gpu::bindings).
            has_dynamic_offset: true,
            min_binding_size: None,
        },
        count: None,
    }];
    entries.extend(
        spec.storage
            .iter()
            .enumerate()
            .map(|(i, access)| wgpu::BindGroupLayoutEntry {
                binding: i as u32 + 1,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: *access == Access::Read,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }),
    );
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(&spec.key),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(&spec.key),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(&spec.key),
        source: wgpu::ShaderSource::Wgsl((spec.source)().into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&spec.key),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(spec.entry),
        // Every kernel writes its workgroup memory before reading it, so the zeroing WebGPU
        // does by default is pure cost: a barrier and a store loop at the start of every
        // workgroup, and on GL a constant array of the workgroup memory's size in the
        // translated shader, which took llvmpipe's GL compiler about 20 s per kernel.
        compilation_options: wgpu::PipelineCompilationOptions {
            zero_initialize_workgroup_memory: false,
            ..Default::default()
        },
        cache: None,
    });
    Kernel {
        id,
        name: spec.key.clone(),
        pipeline,
        layout,
        storage_bindings: spec.storage.len(),
    }
}
