//! Every WGSL module sprout builds is parsed and validated by naga with no optional
//! capabilities beyond core WGSL (so the portable path needs neither shader-f16 nor subgroups), and
//! translated to SPIR-V, MSL and HLSL: a kernel that would break on Metal or DX12 fails
//! here, where neither exists.
//!
//! The modules are the ones the engine builds (`sprout::gpu::kernels::all_modules`), each
//! kernel composed with every weight decoder and activation reader it is used with.

use std::path::Path;

use naga::valid::{Capabilities, ValidationFlags, Validator};
use naga::valid::{ShaderStages, SubgroupOperationSet};
use sprout::gpu::kernels::{all_modules, subgroup_modules};

/// Every module the engine builds without subgroups; every .wgsl file under shaders/ is
/// used by one of them or of the subgroup modules.
fn kernel_sources() -> Vec<(String, String)> {
    let modules = all_modules();
    let with_subgroups = subgroup_modules();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut files = vec![dir.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "wgsl") {
            let text = std::fs::read_to_string(&path).unwrap();
            // Binding numbers the host fills in (`@binding(B_OUT)`) match any number.
            let file = unnumbered(text.trim());
            assert!(
                modules
                    .iter()
                    .chain(&with_subgroups)
                    .any(|(_, src)| unnumbered(src).contains(&file)),
                "{} is in no module the engine builds",
                path.display()
            );
        }
    }
    modules
}

/// `text` with every `@binding(...)` argument replaced by `#`.
fn unnumbered(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("@binding(") {
        let (head, tail) = rest.split_at(at + "@binding(".len());
        out.push_str(head);
        out.push('#');
        rest = &tail[tail.find(')').unwrap_or(0)..];
    }
    out.push_str(rest);
    out
}

/// Validates and translates `src` with no optional capability (`subgroups` false) or with
/// the subgroup operations sprout's subgroup kernels use.
fn check(name: &str, src: &str, subgroups: bool) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(src)
        .map_err(|e| format!("{name}: {}", e.emit_to_string(src)))?;
    // unpack2x16float is core WGSL; naga files it under SHADER_FLOAT16_IN_FLOAT32, which
    // every WebGPU device (and wgpu on GL's downlevel flag) grants. Nothing else is allowed
    // on the portable path.
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if subgroups {
        caps |= Capabilities::SUBGROUP;
    }
    let mut validator = Validator::new(ValidationFlags::all(), caps);
    if subgroups {
        validator
            .subgroup_stages(ShaderStages::COMPUTE)
            .subgroup_operations(SubgroupOperationSet::BASIC | SubgroupOperationSet::SHUFFLE);
    }
    let info = validator
        .validate(&module)
        .map_err(|e| format!("{name}: validation: {}", e.emit_to_string(src)))?;
    if module.entry_points.is_empty() {
        return Err(format!("{name}: no entry point"));
    }
    naga::back::spv::write_vec(&module, &info, &Default::default(), None)
        .map_err(|e| format!("{name}: SPIR-V: {e}"))?;
    naga::back::msl::write_string(&module, &info, &Default::default(), &Default::default())
        .map_err(|e| format!("{name}: MSL: {e}"))?;
    let mut hlsl = String::new();
    let options = naga::back::hlsl::Options::default();
    let pipeline = naga::back::hlsl::PipelineOptions::default();
    naga::back::hlsl::Writer::new(&mut hlsl, &options, &pipeline)
        .write(&module, &info, None)
        .map_err(|e| format!("{name}: HLSL: {e}"))?;
    Ok(())
}

#[test]
fn every_shader_validates_and_translates_without_optional_features() {
    let sources = kernel_sources();
    // matmul alone gives six composed modules; fewer means the scan found nothing.
    assert!(
        sources.len() >= 6,
        "found only {} shader modules",
        sources.len()
    );
    let failures: Vec<String> = sources
        .iter()
        .filter_map(|(name, src)| check(name, src, false).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn subgroup_shaders_validate_and_translate_with_subgroups_only() {
    let sources = subgroup_modules();
    assert!(!sources.is_empty(), "no subgroup modules");
    for (name, src) in &sources {
        check(name, src, true).unwrap_or_else(|e| panic!("{e}"));
        // And they really need the capability: without it they must not validate.
        assert!(
            check(name, src, false).is_err(),
            "{name} validates without subgroups"
        );
    }
}

#[test]
fn a_broken_shader_is_caught() {
    // The check itself must be able to fail.
    let bad = "@compute @workgroup_size(1) fn main() { let x: f32 = 1u; }";
    assert!(check("bad", bad, false).is_err());
    let needs_f16 = "enable f16;\n@compute @workgroup_size(1) fn main() { let x: f16 = 1.0h; }";
    assert!(
        check("f16", needs_f16, false).is_err(),
        "f16 must not validate without the capability"
    );
}
