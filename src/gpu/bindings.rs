//! Dispatch arguments without a buffer or bind group made per dispatch.
//!
//! Every kernel's uniform parameters go to a fresh slot of a shared uniform buffer, bound
//! with a dynamic offset, and bind groups are cached by kernel and buffers. A step that
//! repeats the previous step's dispatches over the same tensors (the engine's steady
//! state) therefore only writes its parameters; it creates a bind group only in the step
//! after a parameter buffer fills (one step in about fifty for the default model).
//!
//! A cached bind group keeps its buffers alive, so whoever owns a set of long-lived
//! buffers (the engine) calls `Gpu::forget_bind_groups` when it drops them.
//!
//! Invariant: a slot is written once. When a buffer's slots run out, a new buffer takes
//! over (and the bind groups over the old one leave the cache); dispatches already recorded
//! keep the old buffer alive through their bind groups. So no dispatch can read another's
//! parameters, whatever the order of recording and submission and from however many
//! threads.

use std::collections::HashMap;
use std::sync::Mutex;

use super::pipelines::Kernel;

/// Parameter slots per buffer (4 MiB at 256 bytes a slot).
const SLOTS: u64 = 16384;
/// Cached bind groups past which the cache is emptied (tests make many short-lived
/// buffers, which the cache would otherwise keep alive).
const MAX_CACHED_GROUPS: usize = 4096;

/// A bind group's identity: the kernel, the parameter buffer and the storage buffers.
#[derive(PartialEq, Eq, Hash)]
struct GroupKey {
    kernel: String,
    params: wgpu::Buffer,
    storage: Vec<wgpu::Buffer>,
}

struct State {
    params: wgpu::Buffer,
    next: u64,
    groups: HashMap<GroupKey, wgpu::BindGroup>,
}

pub struct Bindings {
    /// Bytes per slot: the adapter's uniform offset alignment, at least 256 (which every
    /// kernel's parameters fit).
    slot_bytes: u64,
    state: Mutex<State>,
}

impl Bindings {
    pub fn new(device: &wgpu::Device, offset_alignment: u32) -> Bindings {
        let slot_bytes = u64::from(offset_alignment).max(256);
        Bindings {
            slot_bytes,
            state: Mutex::new(State {
                params: params_buffer(device, SLOTS * slot_bytes),
                next: 0,
                groups: HashMap::new(),
            }),
        }
    }

    /// Writes `params` to a fresh slot; returns the buffer and the slot's offset.
    pub fn write_params(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        params: &[u8],
    ) -> (wgpu::Buffer, u32) {
        assert!(
            params.len() as u64 <= self.slot_bytes && params.len().is_multiple_of(4),
            "kernel parameters of {} bytes: at most {} and a multiple of 4",
            params.len(),
            self.slot_bytes
        );
        let mut s = self.state.lock().expect("bindings lock");
        if s.next == SLOTS {
            s.params = params_buffer(device, SLOTS * self.slot_bytes);
            s.next = 0;
            s.groups.clear();
        }
        let offset = s.next * self.slot_bytes;
        s.next += 1;
        if !params.is_empty() {
            queue.write_buffer(&s.params, offset, params);
        }
        let offset = u32::try_from(offset).expect("parameter buffer past 4 GiB");
        (s.params.clone(), offset)
    }

    /// The bind group of `kernel` over `params` (binding 0) and `storage` (bindings 1..).
    pub fn bind_group(
        &self,
        device: &wgpu::Device,
        kernel: &Kernel,
        params: &wgpu::Buffer,
        storage: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let key = GroupKey {
            kernel: kernel.name.clone(),
            params: params.clone(),
            storage: storage.iter().map(|&b| b.clone()).collect(),
        };
        let mut s = self.state.lock().expect("bindings lock");
        if let Some(group) = s.groups.get(&key) {
            return group.clone();
        }
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: params,
                offset: 0,
                size: wgpu::BufferSize::new(self.slot_bytes),
            }),
        }];
        entries.extend(
            storage
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: b.as_entire_binding(),
                }),
        );
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.name.as_str()),
            layout: &kernel.layout,
            entries: &entries,
        });
        if s.groups.len() >= MAX_CACHED_GROUPS {
            s.groups.clear();
        }
        s.groups.insert(key, group.clone());
        group
    }

    /// Drops every cached bind group (and with them their hold on buffers).
    pub fn forget_groups(&self) {
        self.state.lock().expect("bindings lock").groups.clear();
    }
}

/// A zeroed parameter buffer. It is created mapped (and unmapped at once) so that the
/// device counts all of it as initialised: a slot's binding is longer than the parameters
/// written to it, and an uninitialised remainder would otherwise be cleared before every
/// dispatch that binds it.
fn params_buffer(device: &wgpu::Device, bytes: u64) -> wgpu::Buffer {
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("kernel parameters"),
        size: bytes,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: true,
    });
    buffer.unmap();
    buffer
}
