//! The `sprout` command line: one module per command (a folder where a command has several
//! files: `bench`, its workload and chart; `check`; `mismatch`; `serve`), the arguments
//! several commands share, reading a prompts file (`prompts_file`; the format and its
//! parser are the library's, `sprout::prompts`), and the one bootstrap that opens the GPU,
//! the model and the engine for a command; `serve` is the HTTP server (`sprout serve`),
//! `json_out` is the one way a command writes JSON (never a NaN as `null`), `mismatch`
//! measures what quantized rollouts cost a full-precision trainer, `progress` draws every
//! progress bar and `runtime_dir` keeps the drivers' `XDG_RUNTIME_DIR` warning away;
//! `warnings` reports the values a run uses other than asked.
//!
//! Everything here is native only and may block, print and exit; the library (`sprout`)
//! stays free of both so that it compiles to wasm32.

pub mod bench;
pub mod bootstrap;
pub mod chart_font;
pub mod check;
pub mod cli_args;
pub mod devices_cmd;
pub mod draft_corpus;
pub mod export_cmd;
pub mod generate_cmd;
pub mod json_out;
pub mod mismatch;
pub mod progress;
pub mod prompts_file;
pub mod record_sink;
pub mod resume;
pub mod rollout_cmd;
pub mod runtime_dir;
pub mod score_cmd;
pub mod serve;
pub mod tune_cmd;
pub mod warnings;
