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
mod mask;
mod matmul;
mod sample;
mod softmax;
mod top_logprobs;

use common::Case;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let cases: Vec<Case> = [
        matmul::cases(),
        fused::cases(),
        attention::cases(),
        embedding::cases(),
        sample::cases(),
        softmax::cases(),
        top_logprobs::cases(),
        mask::cases(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let trials = common::trials(cases);
    let conclusion = libtest_mimic::run(&args, trials);
    common::print_summary();
    conclusion.exit();
}
