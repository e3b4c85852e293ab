//! Matrix-vector time per call at SmolLM2-135M's shapes, for every weight format.
//!
//! Each sample records `CALLS` dispatches into one command encoder and submits once, so
//! the figure is the kernel's own time (plus its share of one submit), not submit latency.
//! Throughput is the weight bytes read per second. Runs on the adapter `SPROUT_BACKEND`
//! picks (default: the best one found).

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sprout::gpu::kernels::matmul::{MatmulPath, encode_path};
use sprout::gpu::{BackendChoice, Gpu, GpuWeight};
use sprout::model::format::{WeightFormat, quantize};

const CALLS: u32 = 16;
/// (in, out): MLP up (and gate), MLP down, the vocabulary projection.
const SHAPES: [(usize, usize); 3] = [(576, 1536), (1536, 576), (576, 49152)];

fn matvec(c: &mut Criterion) {
    let choice = BackendChoice::from_env().expect("SPROUT_BACKEND");
    let gpu = pollster::block_on(Gpu::open(choice)).expect("a GPU adapter");
    let mut group = c.benchmark_group(format!("matvec/{}", gpu.adapter.label()));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    for (k, n) in SHAPES {
        let values: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 1000.0)
            .collect();
        let x = gpu.upload(&vec![0.5f32; k]);
        let y = gpu.zeros(n);
        for format in WeightFormat::ALL {
            let bytes = quantize(format, &values, k).unwrap();
            let weight = GpuWeight::upload(&gpu, format, &bytes, n, k).unwrap();
            group.throughput(Throughput::Bytes(bytes.len() as u64));
            group.bench_with_input(
                BenchmarkId::new(format.name(), format!("{k}x{n}")),
                &weight,
                |b, w| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let mut enc = gpu.encoder();
                            for _ in 0..CALLS {
                                encode_path(&gpu, &mut enc, MatmulPath::MatVec, &x, 1, w, &y);
                            }
                            let start = Instant::now();
                            gpu.submit(enc);
                            gpu.wait_idle().unwrap();
                            total += start.elapsed() / CALLS;
                        }
                        total
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, matvec);
criterion_main!(benches);
