//! `sprout devices`: every adapter wgpu finds, best first, with its limits and whether
//! `sprout tune` has measured it.

use anyhow::Result;

use crate::cli::json_out;
use sprout::gpu::{AdapterSummary, BackendChoice, list_adapters, tune_file};

pub fn run(backend: BackendChoice, json: bool) -> Result<()> {
    let adapters: Vec<AdapterSummary> = pollster::block_on(list_adapters(backend))
        .iter()
        .map(AdapterSummary::of)
        .collect();
    // Each adapter's tune file, when `sprout tune` has written one for it.
    let tuned: Vec<Option<String>> = adapters
        .iter()
        .map(|a| {
            let path = tune_file::path_for(a).ok()?;
            tune_file::read(&path, a).ok()??;
            Some(path.display().to_string())
        })
        .collect();
    if json {
        let list: Vec<serde_json::Value> = adapters
            .iter()
            .zip(&tuned)
            .map(|(a, t)| {
                let mut v = json_out::to_value(a)?;
                v["tune_file"] = serde_json::json!(t);
                Ok(v)
            })
            .collect::<Result<_>>()?;
        println!("{}", json_out::to_pretty(&list)?);
        return Ok(());
    }
    if adapters.is_empty() {
        return Err(sprout::SproutError::NoAdapter(backend).into());
    }
    println!(
        "{:<3} {:<7} {:<40} {:<14} {:<5} {:<9} {:>11} {:>11}  driver",
        "#", "backend", "name", "type", "f16", "subgroups", "max bind", "max buffer"
    );
    for (i, (a, tuned)) in adapters.iter().zip(&tuned).enumerate() {
        println!(
            "{:<3} {:<7} {:<40} {:<14} {:<5} {:<9} {:>11} {:>11}  {} {}",
            i,
            a.backend,
            a.name,
            a.device_type,
            yes_no(a.shader_f16),
            yes_no(a.subgroups),
            mib(a.max_storage_buffer_binding_size),
            mib(a.max_buffer_size),
            a.driver,
            a.driver_info
        );
        match tuned {
            Some(path) => println!("    tuned: {path}"),
            None => println!("    not tuned (sprout tune measures it)"),
        }
    }
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}
