//! Reading a prompts file from disk for `sprout rollout --prompts` and `sprout mismatch
//! --prompts`. The format and its parser are the library's ([`sprout::prompts`]); this is
//! only the file I/O, with errors that name the file.

use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result};
use sprout::prompts::{self, LineError, PromptLine};

/// Every non-blank line of `path`, parsed or with its error, in file order.
pub fn read(path: &Path) -> Result<Vec<Result<PromptLine, LineError>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    prompts::parse_lines(std::io::BufReader::new(file).lines())
        .with_context(|| format!("reading {}", path.display()))
}
