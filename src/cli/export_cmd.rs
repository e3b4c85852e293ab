//! `sprout export`: the model `--model` names (a GGUF dequantized, a Hugging Face
//! directory converted, quantized on load first with `--quantize`) written as a Hugging
//! Face directory that transformers loads (`sprout::model::export`), with a progress bar
//! on a terminal.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sprout::formats::WeightFormat;
use sprout::model::export::directory::{ExportOptions, export};
use sprout::model::export::tensors::EXPORT_FORMATS;

use crate::cli::cli_args::{ModelArg, parse_weight_format};
use crate::cli::progress;

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The directory to write (model.safetensors, config.json, generation_config.json,
    /// tokenizer.json, tokenizer_config.json); it must not exist or be empty.
    #[arg(long)]
    out: PathBuf,
    /// The dtype of every tensor: f32 (every value sprout computes with, exactly) or bf16.
    #[arg(long, value_parser = parse_export_dtype, default_value = "f32")]
    dtype: WeightFormat,
    /// Replace --out when it is a directory that is not empty.
    #[arg(long)]
    overwrite: bool,
}

/// Parses `--dtype`: a format an export can be written in.
fn parse_export_dtype(text: &str) -> Result<WeightFormat, String> {
    match parse_weight_format(text) {
        Ok(format) if EXPORT_FORMATS.contains(&format) => Ok(format),
        _ => Err(format!("cannot export as `{text}` (use f32 or bf16)")),
    }
}

pub fn run(args: ExportArgs) -> Result<()> {
    let mut model = args.model.open_model()?;
    let bar = progress::bar("exporting {bar:30} {pos}/{len} tensors", 0);
    let options = ExportOptions {
        format: args.dtype,
        overwrite: args.overwrite,
    };
    let exported = export(&mut model, &args.out, options, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .with_context(|| format!("exporting {} to {}", model.info.name, args.out.display()))?;
    bar.finish_and_clear();
    let files: Vec<String> = exported
        .files
        .iter()
        .map(|(name, bytes)| format!("{name} ({})", size(*bytes)))
        .collect();
    println!(
        "wrote {} ({} weights): {}",
        exported.dir.display(),
        args.dtype,
        files.join(", ")
    );
    Ok(())
}

/// A file size in bytes, or in kB or MB with one decimal.
fn size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}
