//! The pipeline cache is keyed by each kernel's typed description: every kernel asks for its
//! pipeline on every dispatch, so finding a built one must allocate nothing, and two
//! descriptions get the same pipeline exactly when they are equal. The bind-group cache is
//! looked up on every dispatch too: a hit allocates nothing, and other buffers (or the
//! same in another order) get another group.
//!
//! These run on every adapter; with no adapter they fail (never pass without having run).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use sprout::formats::WeightFormat;
use sprout::gpu::Gpu;
use sprout::gpu::kernels::attention::{AttentionKernel, QLoads};
use sprout::gpu::kernels::matmul::{
    Epilogue, MatmulKernel, MatmulShape, Prologue, XLoads, XReader,
};
use sprout::gpu::kernels::reduction::Reduction;
use sprout::gpu::kernels::sample::{SampleEntry, SampleKernel};

/// Counts the allocations made on each thread (wgpu may allocate on threads of its own).
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System` unchanged; the counter only observes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn matmul(format: WeightFormat, mr: u32) -> MatmulKernel {
    let shape = MatmulShape::Tile {
        rows: 1,
        cols: 2,
        loads: XLoads::Direct,
    };
    let fusion = (Prologue::RmsNorm, Epilogue::SiluGate);
    MatmulKernel::new(format, shape, mr, fusion, XReader::Vec4)
}

fn attention() -> AttentionKernel {
    AttentionKernel {
        heads: 3,
        head_dim: 64,
        q_loads: QLoads::Direct,
    }
}

/// Every family's pipeline, once built, is found again without an allocation.
fn lookups_allocate_nothing(gpu: &Gpu) {
    let (m, a, s) = (
        matmul(WeightFormat::Q4_1, 0),
        attention(),
        SampleKernel {
            entry: SampleEntry::Sample,
            reduction: Reduction::Tree,
        },
    );
    let built = (gpu.pipeline(&m), gpu.pipeline(&a), gpu.pipeline(&s));
    let before = allocations();
    for _ in 0..100 {
        let found = (gpu.pipeline(&m), gpu.pipeline(&a), gpu.pipeline(&s));
        assert!(Arc::ptr_eq(&found.0, &built.0) && Arc::ptr_eq(&found.1, &built.1));
        assert!(Arc::ptr_eq(&found.2, &built.2));
    }
    let made = allocations() - before;
    assert_eq!(
        made,
        0,
        "{}: 300 lookups of built pipelines allocated {made} times",
        gpu.adapter.label()
    );
}

#[test]
fn finding_a_built_pipeline_allocates_nothing() {
    for gpu in common::gpus() {
        lookups_allocate_nothing(&gpu);
    }
}

#[test]
fn descriptions_are_one_pipeline_exactly_when_equal() {
    for gpu in common::gpus() {
        let q4 = gpu.pipeline(&matmul(WeightFormat::Q4_1, 0));
        assert!(Arc::ptr_eq(
            &q4,
            &gpu.pipeline(&matmul(WeightFormat::Q4_1, 0))
        ));
        // `mr` counts only for the matrix-vector shape, so the tile ignores it.
        assert!(Arc::ptr_eq(
            &q4,
            &gpu.pipeline(&matmul(WeightFormat::Q4_1, 4))
        ));
        let q8 = gpu.pipeline(&matmul(WeightFormat::Q8_0, 0));
        assert!(!Arc::ptr_eq(&q4, &q8));
        assert_ne!(q4.id, q8.id);
        assert_eq!(
            q8.name,
            "matmul/tile1x2-Direct/mr0/RmsNorm/SiluGate/q8_0/Vec4"
        );
        let direct = gpu.pipeline(&attention());
        let shared = gpu.pipeline(&AttentionKernel {
            q_loads: QLoads::Shared,
            ..attention()
        });
        assert!(!Arc::ptr_eq(&direct, &shared));
        assert_eq!(direct.name, "attention/paged/3/64/Direct");
    }
}

/// Bind groups over the buffers of one dispatch, looked up as the recorder does.
fn bind_group_lookups(gpu: &Gpu) {
    let kernel = gpu.pipeline(&attention());
    let params = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4096,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let tensors: Vec<_> = (0..=kernel.storage_bindings)
        .map(|_| gpu.zeros(64))
        .collect();
    let storage: Vec<&wgpu::Buffer> = tensors[..kernel.storage_bindings]
        .iter()
        .map(|t| &t.buffer)
        .collect();
    let made = gpu.bind_group(&kernel, &params, &storage);
    let before = allocations();
    for _ in 0..100 {
        assert!(gpu.bind_group(&kernel, &params, &storage) == made);
    }
    let allocated = allocations() - before;
    assert_eq!(
        allocated,
        0,
        "{}: 100 lookups of a cached bind group allocated {allocated} times",
        gpu.adapter.label()
    );
    let mut other = storage.clone();
    *other.last_mut().unwrap() = &tensors[kernel.storage_bindings].buffer;
    assert!(gpu.bind_group(&kernel, &params, &other) != made);
    let mut swapped = storage.clone();
    swapped.swap(0, 1);
    assert!(gpu.bind_group(&kernel, &params, &swapped) != made);
    assert!(gpu.bind_group(&kernel, &params, &storage) == made);
}

#[test]
fn finding_a_cached_bind_group_allocates_nothing_and_tells_buffers_apart() {
    for gpu in common::gpus() {
        bind_group_lookups(&gpu);
    }
}
