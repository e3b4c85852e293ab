//! One module per kernel family. Each records dispatches into a caller's command encoder
//! (so a forward pass is one submit) and has a CPU reference in `crate::reference`.

pub mod attention;
pub mod elementwise;
pub mod embedding;
pub mod kv_write;
pub mod mask;
pub mod matmul;
pub mod matmul_tile;
pub mod rmsnorm;
pub mod rope;
pub mod sample;
pub mod softmax;
pub mod top_logprobs;

use crate::gpu::shaders::with_weights;
use crate::model::format::WeightFormat;

/// Every WGSL module the engine builds, as (name, source): each kernel family's source,
/// composed with every weight decoder and activation reader it is used with. The shader
/// test validates and translates each of them.
pub fn all_modules() -> Vec<(String, String)> {
    let mut out = matmul::modules();
    for format in WeightFormat::ALL {
        out.push((
            format!("embedding+{format}"),
            with_weights(embedding::SOURCE, format),
        ));
    }
    for (name, source) in [
        ("elementwise", elementwise::SOURCE),
        ("kv_write", kv_write::SOURCE),
        ("mask_tokens", mask::SOURCE),
        ("rmsnorm", rmsnorm::SOURCE),
    ] {
        out.push((name.to_string(), source.to_string()));
    }
    for (heads, head_dim) in [(1, 64), (3, 64), (8, 32)] {
        for q_loads in attention::QLoads::ALL {
            out.push((
                format!("attention+{heads}x{head_dim}+{q_loads:?}"),
                attention::source(heads, head_dim, q_loads),
            ));
        }
    }
    out.push(("rope".to_string(), rope::source()));
    out.push(("sample".to_string(), sample::source()));
    out.push(("softmax".to_string(), softmax::source()));
    out.push(("top_logprobs".to_string(), top_logprobs::source()));
    out
}

/// Every WGSL module the engine builds for adapters with subgroups (validated with the
/// subgroup capabilities; the modules of `all_modules` cover every adapter).
pub fn subgroup_modules() -> Vec<(String, String)> {
    matmul::subgroup_modules()
}
