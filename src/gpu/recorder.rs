//! `Recorder`: a step's GPU work, recorded into one command encoder with its dispatches in
//! one compute pass, and submitted once.
//!
//! Kernels record through [`Recorder::dispatch`]. A dispatch's uniform parameters get a
//! fresh slot of the device's parameter buffer (`gpu::bindings`), but their bytes stay here
//! until [`Recorder::submit`], which writes every slot of the step with one
//! `queue.write_buffer` per contiguous run of slots (one run per step unless another thread
//! records at the same time, or the parameter buffer rolls over). Copies (a block's
//! copy-on-write, read-back) go through [`Recorder::encoder`], which ends the open pass; the
//! next dispatch opens a new one. A step that copies only before and after its kernels
//! therefore records exactly one compute pass, and wgpu places the barriers between its
//! dispatches.
//!
//! While the device is profiling (`Gpu::start_profiling`) the recorder times every
//! dispatch (`gpu::profile` says how) and adds the times to the profile when it submits.

use std::sync::Arc;

use super::Gpu;
use super::pipelines::Kernel;
use super::profile::ProfileMethod;

/// Timestamp queries per query set (wgpu's maximum), two per dispatch.
const QUERIES_PER_SET: u32 = 4096;

/// Parameter bytes waiting for their one write: consecutive slots of one buffer.
struct ParamRun {
    buffer: wgpu::Buffer,
    start: u64,
    bytes: Vec<u8>,
}

/// How the dispatches of this recorder are timed while profiling.
enum Timing {
    Off,
    /// Timestamps before and after each dispatch, in sets of `QUERIES_PER_SET`; the
    /// kernels' names in dispatch order.
    Timestamps {
        sets: Vec<wgpu::QuerySet>,
        names: Vec<Arc<str>>,
    },
    /// Each dispatch submitted alone and waited for.
    Alone,
}

pub struct Recorder<'g> {
    gpu: &'g Gpu,
    encoder: wgpu::CommandEncoder,
    pass: Option<wgpu::ComputePass<'static>>,
    params: Vec<ParamRun>,
    dispatches: usize,
    passes: usize,
    timing: Timing,
}

impl Gpu {
    /// A recorder for one step's (or one test's) work.
    pub fn recorder(&self) -> Recorder<'_> {
        let timing = match self.profile_method() {
            None => Timing::Off,
            Some(ProfileMethod::Timestamps) => Timing::Timestamps {
                sets: Vec::new(),
                names: Vec::new(),
            },
            Some(ProfileMethod::SubmitLatency) => Timing::Alone,
        };
        Recorder {
            gpu: self,
            encoder: self.encoder(),
            pass: None,
            params: Vec::new(),
            dispatches: 0,
            passes: 0,
            timing,
        }
    }
}

impl<'g> Recorder<'g> {
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Dispatches recorded so far.
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }

    /// Compute passes opened so far.
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// The command encoder, for copies: ends the open compute pass first.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.encoder
    }

    /// Records one dispatch of `kernel`: binding 0 is the uniform `params`, bindings 1..
    /// are `buffers` in the order the kernel's spec lists them. Nothing is recorded when a
    /// dimension of `workgroups` is 0.
    pub fn dispatch(
        &mut self,
        kernel: &Kernel,
        params: &[u8],
        buffers: &[&wgpu::Buffer],
        workgroups: [u32; 3],
    ) {
        let gpu = self.gpu;
        assert_eq!(
            buffers.len(),
            kernel.storage_bindings,
            "kernel {} takes {} storage buffers",
            kernel.name,
            kernel.storage_bindings
        );
        let max = gpu.caps.max_workgroups_per_dim;
        assert!(
            workgroups.iter().all(|&w| w <= max),
            "kernel {}: {workgroups:?} workgroups exceed the adapter's {max} per dimension",
            kernel.name
        );
        if workgroups.contains(&0) {
            return;
        }
        let (params_buffer, offset) = gpu.bindings.reserve(&gpu.device, params.len());
        self.put_params(&params_buffer, offset, params);
        let bind_group = gpu.bind_group(kernel, &params_buffer, buffers);
        let offset = u32::try_from(offset).expect("parameter buffer past 4 GiB");
        if matches!(self.timing, Timing::Alone) {
            // Finish the work recorded so far, so that only this dispatch is timed.
            self.submit_recorded();
            let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
        }
        let index = self.dispatches as u32;
        self.open_pass();
        let pass = self.pass.as_mut().expect("opened above");
        if let Timing::Timestamps { sets, names } = &mut self.timing {
            let (set, query) = (index * 2 / QUERIES_PER_SET, index * 2 % QUERIES_PER_SET);
            if set as usize == sets.len() {
                sets.push(gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("kernel timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: QUERIES_PER_SET,
                }));
            }
            pass.write_timestamp(&sets[set as usize], query);
            pass.set_pipeline(&kernel.pipeline);
            pass.set_bind_group(0, &bind_group, &[offset]);
            pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
            pass.write_timestamp(&sets[set as usize], query + 1);
            names.push(kernel.name.as_str().into());
        } else {
            pass.set_pipeline(&kernel.pipeline);
            pass.set_bind_group(0, &bind_group, &[offset]);
            pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
        }
        self.dispatches += 1;
        if matches!(self.timing, Timing::Alone) {
            let started = web_time::Instant::now();
            self.submit_recorded();
            let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
            gpu.record_profile(&kernel.name, started.elapsed().as_secs_f64());
        }
    }

    /// Writes the parameters, submits everything recorded and returns the submission.
    pub fn submit(mut self) -> wgpu::SubmissionIndex {
        let timestamps = match std::mem::replace(&mut self.timing, Timing::Off) {
            Timing::Timestamps { sets, names } if !names.is_empty() => {
                Some(self.resolve_timestamps(sets, names))
            }
            _ => None,
        };
        let index = self.submit_recorded();
        if let Some((staging, names)) = timestamps {
            self.read_timestamps(&staging, &names);
        }
        index
    }

    /// Opens a compute pass unless one is open.
    fn open_pass(&mut self) {
        if self.pass.is_none() {
            self.passes += 1;
            let pass = self
                .encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("sprout step"),
                    timestamp_writes: None,
                })
                .forget_lifetime();
            self.pass = Some(pass);
        }
    }

    /// Keeps `params` for the slot at `offset` of `buffer`, joining the current run when
    /// the slot follows it.
    fn put_params(&mut self, buffer: &wgpu::Buffer, offset: u64, params: &[u8]) {
        let slot = self.gpu.bindings.slot_bytes();
        let joins = self
            .params
            .last()
            .is_some_and(|r| r.buffer == *buffer && r.start + r.bytes.len() as u64 == offset);
        if !joins {
            self.params.push(ParamRun {
                buffer: buffer.clone(),
                start: offset,
                bytes: Vec::with_capacity(64 * slot as usize),
            });
        }
        let run = self.params.last_mut().expect("pushed above");
        let at = run.bytes.len();
        run.bytes.extend_from_slice(params);
        run.bytes.resize(at + slot as usize, 0);
    }

    /// Writes the pending parameters and submits what is recorded, leaving a fresh
    /// encoder.
    fn submit_recorded(&mut self) -> wgpu::SubmissionIndex {
        self.pass = None;
        for run in self.params.drain(..) {
            self.gpu
                .queue
                .write_buffer(&run.buffer, run.start, &run.bytes);
        }
        let encoder = std::mem::replace(&mut self.encoder, self.gpu.encoder());
        self.gpu.submit(encoder)
    }

    /// Records resolving the timestamp sets into a buffer the CPU can read.
    fn resolve_timestamps(
        &mut self,
        sets: Vec<wgpu::QuerySet>,
        names: Vec<Arc<str>>,
    ) -> (wgpu::Buffer, Vec<Arc<str>>) {
        let queries = 2 * names.len() as u64;
        let bytes = 8 * queries;
        let resolved = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("resolved timestamps"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = self.gpu.staging(bytes);
        let encoder = self.encoder();
        for (i, set) in sets.iter().enumerate() {
            let first = i as u64 * u64::from(QUERIES_PER_SET);
            let count = (queries - first).min(u64::from(QUERIES_PER_SET)) as u32;
            encoder.resolve_query_set(set, 0..count, &resolved, 8 * first);
        }
        encoder.copy_buffer_to_buffer(&resolved, 0, &staging, 0, bytes);
        (staging, names)
    }

    /// Waits for the step, reads its timestamps and adds each dispatch's time to the
    /// profile. A failed read only loses the timings. (Profiling is native only.)
    #[cfg(target_arch = "wasm32")]
    fn read_timestamps(&self, _staging: &wgpu::Buffer, _names: &[Arc<str>]) {}

    #[cfg(not(target_arch = "wasm32"))]
    fn read_timestamps(&self, staging: &wgpu::Buffer, names: &[Arc<str>]) {
        let size = 16 * names.len() as u64;
        let Ok(bytes) = pollster::block_on(self.gpu.read_staged(staging, size)) else {
            return;
        };
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        let period = f64::from(self.gpu.queue.get_timestamp_period()) * 1e-9;
        for (name, pair) in names.iter().zip(ticks.chunks_exact(2)) {
            let seconds = pair[1].saturating_sub(pair[0]) as f64 * period;
            self.gpu.record_profile(name, seconds);
        }
    }
}
