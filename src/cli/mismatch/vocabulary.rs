//! A trainer model beside the model that rolled out: it can score the rollout's tokens
//! only if every token id means the same token to both, and both compute logits over the
//! same number of ids. Shared by `sprout mismatch --trainer-model` and `sprout score
//! --trainer-model`.

use anyhow::{Result, bail};
use sprout::tokenizer::{Tokenizer, VocabularyDifference};

/// One side of the comparison: what the error calls it, its tokenizer, and its config's
/// vocabulary size (the rows of its logits).
pub struct Side<'a> {
    pub name: &'a str,
    pub tokenizer: &'a Tokenizer,
    pub logits: usize,
}

/// An error naming both models and how their vocabularies differ, unless they agree.
pub fn check_same(rollout: &Side, trainer: &Side) -> Result<()> {
    let (r, t) = (rollout.name, trainer.name);
    let why = match rollout.tokenizer.vocabulary_difference(trainer.tokenizer) {
        Some(VocabularyDifference::Size { ours, theirs }) => {
            format!("{r}'s tokenizer has {ours} tokens, {t}'s {theirs}")
        }
        Some(VocabularyDifference::Token { id, ours, theirs }) => {
            format!("token id {id} is {ours:?} to {r}, {theirs:?} to {t}")
        }
        None if rollout.logits != trainer.logits => format!(
            "{r} computes logits over {} ids, {t} over {}",
            rollout.logits, trainer.logits
        ),
        None => return Ok(()),
    };
    bail!(
        "the rollout model {r} and the trainer model {t} have different vocabularies ({why}): \
         the trainer cannot score the rollout's token ids"
    )
}
