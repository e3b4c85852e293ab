//! The kernel suite, in the spirit of llama.cpp's test-backend-ops: every kernel, every
//! weight format, several shapes (awkward ones included), on every adapter wgpu finds,
//! against the plain-Rust references in `sprout::reference`, with a stated tolerance in
//! normalised mean squared error (NMSE). Batch invariance is checked bitwise.
//!
//! With `SPROUT_REQUIRE_GPU=1` and no adapter the suite fails; without it, it reports the
//! kernel tests as ignored (never as passed).

mod attention;
#[path = "../common/chi_square.rs"]
mod chi_square;
mod common;
mod embedding;
mod fused;
mod head_norm_rope;
mod keep_only;
mod logit_adjust;
mod lora;
mod mask;
mod matmul;
mod norm_add;
mod sample;
mod softmax;
mod target_rank;
mod top_logprobs;

use common::Case;
use libtest_mimic::Trial;
use sprout::formats::WeightFormat;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let cases: Vec<Case> = [
        matmul::cases(),
        fused::cases(),
        lora::cases(),
        head_norm_rope::cases(),
        attention::cases(),
        embedding::cases(),
        sample::cases(),
        softmax::cases(),
        top_logprobs::cases(),
        target_rank::cases(),
        mask::cases(),
        keep_only::cases(),
        logit_adjust::cases(),
        norm_add::cases(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut trials = vec![registry_trial(&cases)];
    trials.extend(common::trials(cases));
    let conclusion = libtest_mimic::run(&args, trials);
    common::print_summary();
    conclusion.exit();
}

/// The weight formats' registry (`WeightFormat::ALL`) is what every family that reads
/// weights iterates, so a format added there gets matmul, fused and embedding cases with
/// no other list to edit. Checked from the cases' names: it needs no adapter.
fn registry_trial(cases: &[Case]) -> Trial {
    let names: Vec<(&'static str, String)> =
        cases.iter().map(|c| (c.kernel, c.name.clone())).collect();
    Trial::test(
        "registry::every-weight-format-has-matmul-fused-and-embedding-cases",
        move || {
            for family in ["matmul", "fused", "embedding"] {
                for format in WeightFormat::ALL {
                    let covered = names.iter().any(|(k, n)| {
                        *k == family && n.split('/').any(|part| part == format.name())
                    });
                    if !covered {
                        return Err(format!("no {family} case for {format}").into());
                    }
                }
            }
            Ok(())
        },
    )
}
