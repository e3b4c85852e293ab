//! Dispatch arguments without a buffer, a bind group or a heap allocation made per dispatch.
//!
//! Every kernel's uniform parameters go to a fresh slot of a shared uniform buffer, bound
//! with a dynamic offset; the slot's bytes are written by the step's `Recorder` together
//! with every other slot of the step, in one `queue.write_buffer` (gpu::recorder). Bind
//! groups are cached by kernel and buffers, under a key built without allocating. A step
//! that repeats the previous step's dispatches over the same tensors (the engine's steady
//! state) therefore writes its parameters once and creates no bind group, except in the
//! step after a parameter buffer fills (one step in about eighty for the default model).
//! The cache is looked up with a key that borrows the buffers ([`GroupView`]): a hit
//! clones no buffer handle (each clone is two atomic counts, taken and given back) and
//! hashes with hashbrown's fast hasher, since this lookup runs for every dispatch.
//!
//! A cached bind group keeps its buffers alive, so whoever owns a set of long-lived
//! buffers (the engine) calls `Gpu::forget_bind_groups` when it drops them.
//!
//! Invariant: a slot is handed out once. When a buffer's slots run out, a new buffer takes
//! over (and the bind groups over the old one leave the cache); dispatches already recorded
//! keep the old buffer alive through their bind groups. So no dispatch can read another's
//! parameters, whatever the order of recording and submission and from however many
//! threads.

use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use hashbrown::{Equivalent, HashMap};

use super::pipelines::Kernel;

/// Parameter slots per buffer (4 MiB at 256 bytes a slot).
const SLOTS: u64 = 16384;
/// Cached bind groups past which the cache is emptied (tests make many short-lived
/// buffers, which the cache would otherwise keep alive).
const MAX_CACHED_GROUPS: usize = 4096;
/// The most storage buffers a kernel binds: WebGPU's default per-stage limit is 8, which
/// every kernel keeps within but the q|k|v matmul with a LoRA term (10, run only where the
/// adapter's limit allows: `kernels::matmul::lora_fits`).
pub const MAX_STORAGE_BINDINGS: usize = 10;

/// A bind group's identity: the kernel, the parameter buffer and the storage buffers,
/// as the cache keeps it (made only when a bind group is created).
#[derive(PartialEq, Eq)]
struct GroupKey {
    kernel: usize,
    params: wgpu::Buffer,
    storage: Vec<wgpu::Buffer>,
}

/// The same identity over borrowed buffers, for looking a bind group up. It hashes as
/// the `GroupKey` it stands for.
struct GroupView<'a> {
    kernel: usize,
    params: &'a wgpu::Buffer,
    storage: &'a [&'a wgpu::Buffer],
}

/// Hashes a bind group's identity: what `GroupKey` and `GroupView` both hash, so that a
/// view finds the key it stands for.
fn hash_identity<'a, H: Hasher>(
    kernel: usize,
    params: &wgpu::Buffer,
    storage: impl Iterator<Item = &'a wgpu::Buffer>,
    state: &mut H,
) {
    kernel.hash(state);
    params.hash(state);
    for buffer in storage {
        buffer.hash(state);
    }
}

impl Hash for GroupKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_identity(self.kernel, &self.params, self.storage.iter(), state);
    }
}

impl Hash for GroupView<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_identity(
            self.kernel,
            self.params,
            self.storage.iter().copied(),
            state,
        );
    }
}

impl Equivalent<GroupKey> for GroupView<'_> {
    fn equivalent(&self, key: &GroupKey) -> bool {
        self.kernel == key.kernel
            && *self.params == key.params
            && self.storage.len() == key.storage.len()
            && self.storage.iter().zip(&key.storage).all(|(a, b)| *a == b)
    }
}

impl GroupView<'_> {
    fn to_key(&self) -> GroupKey {
        GroupKey {
            kernel: self.kernel,
            params: self.params.clone(),
            storage: self.storage.iter().map(|&b| b.clone()).collect(),
        }
    }
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

    /// Bytes per parameter slot.
    pub fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }

    /// A fresh slot for `len` bytes of parameters: its buffer and offset. The caller writes
    /// the bytes before the dispatch that reads them is submitted.
    pub fn reserve(&self, device: &wgpu::Device, len: usize) -> (wgpu::Buffer, u64) {
        assert!(
            len as u64 <= self.slot_bytes && len.is_multiple_of(4),
            "kernel parameters of {len} bytes: at most {} and a multiple of 4",
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
        assert!(
            storage.len() <= MAX_STORAGE_BINDINGS,
            "kernel {} binds {} storage buffers, more than {MAX_STORAGE_BINDINGS}",
            kernel.name,
            storage.len()
        );
        let view = GroupView {
            kernel: kernel.id,
            params,
            storage,
        };
        let mut s = self.state.lock().expect("bindings lock");
        if let Some(group) = s.groups.get(&view) {
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
        s.groups.insert(view.to_key(), group.clone());
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
