//! Speculative decoding with drafts that need no second model: a suffix index over the
//! prompt, the sibling samples of the same group as they grow, and earlier rollouts of the
//! same prompt ([`DraftCorpus`]).
//!
//! The scheduler drafts up to k tokens for a decoding sample and plans its step as k+1
//! rows (the last drawn token, then the draft), each drawing the token of its position
//! with the sample's own key (seed, sample, position), through the same kernels as any
//! prefill or decode. A drafted token is accepted exactly when it equals what its row
//! drew; the first row whose draw differs gives the next token, as it would have without
//! speculation. Kernels compute a row bitwise the same whatever shares its step, and draws
//! depend only on their key and their row's logits, so the tokens, log-probs and finish
//! reasons are bitwise those of decoding without speculation; only the speed changes.
//!
//! [`SpecMode::Auto`] speculates only when [`AutoPolicy`] predicts a gain from the
//! measured acceptance and the adapter's measured cost of an extra row.

mod corpus;
mod policy;
pub mod suffix_index;

pub use corpus::DraftCorpus;
pub use policy::{AutoPolicy, StepCost};
pub use suffix_index::{Draft, SuffixIndex};

/// Whether and how to speculate (`--speculative`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpecMode {
    /// Never: one row per decoding sample.
    #[default]
    Off,
    /// Draft for every decoding sample whenever the suffix index has a draft.
    Suffix,
    /// Draft when the measured acceptance and step cost predict a gain.
    Auto,
}

impl SpecMode {
    pub fn parse(text: &str) -> Option<SpecMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Some(SpecMode::Off),
            "suffix" | "on" => Some(SpecMode::Suffix),
            "auto" => Some(SpecMode::Auto),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SpecMode::Off => "off",
            SpecMode::Suffix => "suffix",
            SpecMode::Auto => "auto",
        }
    }
}

impl std::fmt::Display for SpecMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The most tokens drafted for one sample in one step.
pub const MAX_DRAFT: usize = 8;
