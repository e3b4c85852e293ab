//! The progress bars commands draw on a terminal: one look for all of them, and none
//! when stderr is not a terminal (a pipe or a log file gets no control codes).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `total` steps drawn with `template` (indicatif's syntax) on a terminal, or a
/// hidden one elsewhere.
pub fn bar(template: &str, total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    ProgressBar::new(total)
        .with_style(ProgressStyle::with_template(template).expect("a valid progress bar template"))
}
