//! Compiled compute pipelines, created once per kernel and cached by its typed description.
//!
//! Each kernel family describes its kernels with a small `Copy` value (a weight format, a
//! shape, a variant...) that implements [`KernelSpec`]: that value is the cache key, and it
//! knows how to write its WGSL module, its entry point and its bindings. Binding 0 is always
//! a uniform parameter block; bindings 1.. are storage buffers, read-only or read-write.
//! Layouts are explicit so that several entry points may share one module.
//!
//! Invariant: finding a built pipeline allocates nothing (kernels ask for theirs on every
//! dispatch): the lookup hashes and compares the description in place. Its name and WGSL
//! source, which take formatting, are made only when the cache misses.

use std::any::{Any, TypeId};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How a kernel uses one storage binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// A kernel's typed description: equal descriptions are the same pipeline.
pub trait KernelSpec: Copy + Eq + Hash + Debug + Send + Sync + 'static {
    /// The kernel's name in labels and profiles.
    fn name(&self) -> String;
    /// The WGSL module.
    fn source(&self) -> String;
    fn entry(&self) -> &'static str;
    /// The storage bindings (1..), in order.
    fn storage(&self) -> &'static [Access];
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
    built: Mutex<HashMap<StoredKey, Arc<Kernel>>>,
    next_id: AtomicUsize,
}

impl PipelineCache {
    /// The pipeline of `spec`, built on first use.
    pub fn get<S: KernelSpec>(&self, device: &wgpu::Device, spec: &S) -> Arc<Kernel> {
        let key: &dyn AnyKey = spec;
        if let Some(k) = self.built.lock().unwrap().get(key) {
            return k.clone();
        }
        // Built outside the lock: compiling a shader can take a while on software adapters.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let kernel = Arc::new(build(device, spec, id));
        self.built
            .lock()
            .unwrap()
            .entry(StoredKey(Box::new(*spec)))
            .or_insert(kernel)
            .clone()
    }

    /// Pipelines built so far.
    pub fn len(&self) -> usize {
        self.built.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A description of any family, compared and hashed through `dyn`: the cache holds the
/// descriptions of every family in one map, and looks one up by reference.
trait AnyKey: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn eq_key(&self, other: &dyn AnyKey) -> bool;
    fn hash_key(&self, state: &mut dyn Hasher);
}

impl<S: KernelSpec> AnyKey for S {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn eq_key(&self, other: &dyn AnyKey) -> bool {
        other.as_any().downcast_ref::<S>() == Some(self)
    }

    fn hash_key(&self, mut state: &mut dyn Hasher) {
        // Two families' descriptions may hash alike; their types tell them apart.
        TypeId::of::<S>().hash(&mut state);
        self.hash(&mut state);
    }
}

impl PartialEq for dyn AnyKey {
    fn eq(&self, other: &Self) -> bool {
        self.eq_key(other)
    }
}

impl Eq for dyn AnyKey {}

impl Hash for dyn AnyKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.hash_key(state);
    }
}

/// A description as the cache stores it (boxed once, when its pipeline is built).
struct StoredKey(Box<dyn AnyKey>);

impl Borrow<dyn AnyKey> for StoredKey {
    fn borrow(&self) -> &(dyn AnyKey + 'static) {
        &*self.0
    }
}

impl PartialEq for StoredKey {
    fn eq(&self, other: &Self) -> bool {
        *self.0 == *other.0
    }
}

impl Eq for StoredKey {}

impl Hash for StoredKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

fn build<S: KernelSpec>(device: &wgpu::Device, spec: &S, id: usize) -> Kernel {
    let name = spec.name();
    let storage = spec.storage();
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
        storage
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
        label: Some(&name),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(&name),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(&name),
        source: wgpu::ShaderSource::Wgsl(spec.source().into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&name),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(spec.entry()),
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
        name,
        pipeline,
        layout,
        storage_bindings: storage.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct A(u32);
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct B(u32);

    macro_rules! spec {
        ($t:ty) => {
            impl KernelSpec for $t {
                fn name(&self) -> String {
                    format!("{self:?}")
                }
                fn source(&self) -> String {
                    String::new()
                }
                fn entry(&self) -> &'static str {
                    "main"
                }
                fn storage(&self) -> &'static [Access] {
                    &[]
                }
            }
        };
    }
    spec!(A);
    spec!(B);

    fn hash(key: &(dyn AnyKey + 'static)) -> u64 {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        h.finish()
    }

    #[test]
    fn descriptions_are_equal_only_within_one_family() {
        let (k_a1, k_a1_again): (&dyn AnyKey, &dyn AnyKey) = (&A(1), &A(1));
        let (k_a2, k_b1): (&dyn AnyKey, &dyn AnyKey) = (&A(2), &B(1));
        assert!(*k_a1 == *k_a1_again);
        assert_eq!(hash(k_a1), hash(k_a1_again));
        assert!(*k_a1 != *k_a2);
        // The same payload in another family is another kernel.
        assert!(*k_a1 != *k_b1);
        let stored = StoredKey(Box::new(A(1)));
        let mut map = HashMap::new();
        map.insert(stored, 7);
        assert_eq!(map.get(k_a1_again), Some(&7));
        assert_eq!(map.get(k_b1), None);
        assert_eq!(map.get(k_a2), None);
    }
}
