//! Opening the GPU for a command, and putting the kernel choices of its tune file in force
//! on a loaded model when `sprout tune` has written one (`gpu::tune_file`).

use std::sync::Arc;

use anyhow::Result;
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;

/// The device for `backend`.
pub fn open(backend: BackendChoice) -> Result<Arc<Gpu>> {
    Ok(pollster::block_on(Gpu::open(backend))?)
}

/// Puts the adapter's tune file's choices in force on `decoder`, when there is one.
pub fn tune(decoder: &Decoder) -> Result<()> {
    decoder.set_choices(sprout::gpu::tune_file::choices(&decoder.gpu)?);
    Ok(())
}

/// One line saying which kernel choices are in force on `decoder`.
pub fn describe_choices(decoder: &Decoder) -> String {
    match decoder.tuned_from() {
        Some(path) => format!("kernels tuned by {path}"),
        None => format!(
            "kernels: untuned {} defaults (run `sprout tune` to measure this adapter)",
            if decoder.gpu.cpu_shaped_defaults() {
                "CPU-shaped"
            } else {
                "GPU-shaped"
            }
        ),
    }
}
