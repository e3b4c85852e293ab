//! One module per kernel family. Each records dispatches into a step's `Recorder` (so a
//! forward pass is one compute pass and one submit) and is checked against the CPU
//! references in `crate::reference` (a fused kernel against the chain it replaces).

pub mod attention;
pub mod embedding;
pub mod head_norm_rope;
pub mod logit_adjust;
pub mod logit_entries;
pub mod logits;
pub mod mask;
pub mod matmul;
pub mod norm_add;
pub mod reduction;
pub mod rope;
pub mod row_info;
pub mod sample;
pub mod softmax;
pub mod target_rank;
pub mod top_logprobs;

pub use logits::{Logits, LogitsChunk};
pub use row_info::RowInfo;

use crate::formats::WeightFormat;
use crate::gpu::pipelines::KernelSpec;
use crate::gpu::shaders::with_weights;
use reduction::Reduction;
use sample::{SampleEntry, SampleKernel};
use softmax::{SoftmaxEntry, SoftmaxKernel};
use top_logprobs::TopLogprobsKernel;

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
    out.push(("mask_tokens".to_string(), mask::KERNEL.source()));
    out.push(("keep_only".to_string(), mask::keep_only::SOURCE.to_string()));
    out.push(("logit_adjust".to_string(), logit_adjust::KERNEL.source()));
    for shape in norm_add::NormAddShape::ALL {
        for output in norm_add::NormOutput::ALL {
            let kernel = norm_add::NormAddKernel { shape, output };
            out.push((kernel.name(), kernel.source()));
        }
    }
    out.push((
        "head_norm_rope".to_string(),
        head_norm_rope::HeadNormRopeKernel.source(),
    ));
    for (heads, head_dim) in [(1, 64), (3, 64), (8, 32)] {
        for q_loads in attention::QLoads::ALL {
            out.push((
                format!("attention+{heads}x{head_dim}+{q_loads:?}"),
                attention::AttentionKernel {
                    heads,
                    head_dim,
                    q_loads,
                }
                .source(),
            ));
        }
    }
    out.push((
        "attention_combine".to_string(),
        attention::AttentionCombine.source(),
    ));
    let sample = SampleKernel {
        entry: SampleEntry::Sample,
        reduction: Reduction::Tree,
    };
    out.push(("sample".to_string(), sample.source()));
    let softmax = SoftmaxKernel {
        entry: SoftmaxEntry::RowStats,
        reduction: Reduction::Tree,
    };
    out.push(("softmax".to_string(), softmax.source()));
    let top = TopLogprobsKernel {
        reduction: Reduction::Tree,
    };
    out.push(("top_logprobs".to_string(), top.source()));
    for shape in target_rank::TargetRankShape::ALL {
        let kernel = target_rank::TargetRankKernel {
            shape,
            reduction: Reduction::Tree,
        };
        out.push((kernel.name(), kernel.source()));
    }
    out
}

/// Every WGSL module the engine builds for adapters with subgroups (validated with the
/// subgroup capabilities; the modules of `all_modules` cover every adapter).
pub fn subgroup_modules() -> Vec<(String, String)> {
    let mut out = matmul::subgroup_modules();
    for width in [4, 64] {
        let softmax = SoftmaxKernel {
            entry: SoftmaxEntry::TargetLogprobs,
            reduction: Reduction::Butterfly { width },
        };
        out.push((softmax.name(), softmax.source()));
        let reduction = Reduction::Butterfly { width };
        let sample = SampleKernel {
            entry: SampleEntry::Truncate,
            reduction,
        };
        out.push((sample.name(), sample.source()));
        let top = TopLogprobsKernel { reduction };
        out.push((top.name(), top.source()));
        let rank = target_rank::TargetRankKernel {
            shape: target_rank::TargetRankShape::EntryPerWorkgroup,
            reduction,
        };
        out.push((rank.name(), rank.source()));
    }
    out
}
