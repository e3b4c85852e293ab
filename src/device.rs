//! Opening the GPU for a command: the adapter `--backend` picks, with the kernel choices
//! of its tune file in force when `sprout tune` has written one (`gpu::tune_file`).

use std::sync::Arc;

use anyhow::Result;
use sprout::gpu::{BackendChoice, Gpu};

/// The device for `backend`, tuned where a tune file exists for it.
pub fn open(backend: BackendChoice) -> Result<Arc<Gpu>> {
    let gpu = pollster::block_on(Gpu::open(backend))?;
    sprout::gpu::tune_file::apply(&gpu)?;
    Ok(gpu)
}

/// The device for `backend` with the untuned defaults (what `sprout tune` measures against).
pub fn open_untuned(backend: BackendChoice) -> Result<Arc<Gpu>> {
    Ok(pollster::block_on(Gpu::open(backend))?)
}

/// One line saying which kernel choices are in force on `gpu`.
pub fn describe_choices(gpu: &Gpu) -> String {
    match gpu.tuned_from() {
        Some(path) => format!("kernels tuned by {path}"),
        None => format!(
            "kernels: untuned {} defaults (run `sprout tune` to measure this adapter)",
            if gpu.cpu_shaped_defaults() {
                "CPU-shaped"
            } else {
                "GPU-shaped"
            }
        ),
    }
}
