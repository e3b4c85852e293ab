//! Whether a trainer model can score the tokens of the model that rolled out: only if every
//! token id means the same token to both (their tokenizers, compared by
//! [`Tokenizer::vocabulary_difference`]) and both compute logits over the same number of
//! ids (their configs' vocabulary sizes). Checked by `sprout mismatch --trainer-model` and
//! `sprout score --trainer-model` before any scoring.

use crate::error::SproutError;
use crate::tokenizer::{Tokenizer, VocabularyDifference};

/// One side of the comparison: what the error calls it, its tokenizer, and its config's
/// vocabulary size (the rows of its logits).
pub struct Side<'a> {
    pub name: &'a str,
    pub tokenizer: &'a Tokenizer,
    pub logits: usize,
}

/// An error naming both models and how their vocabularies differ
/// ([`SproutError::Vocabulary`]), unless they agree.
pub fn check_same(rollout: &Side, trainer: &Side) -> Result<(), SproutError> {
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
    Err(SproutError::Vocabulary(format!(
        "the rollout model {r} and the trainer model {t} have different vocabularies ({why}): \
         the trainer cannot score the rollout's token ids"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tests::fixture;

    #[test]
    fn the_error_names_both_models_and_the_difference() {
        let (llama, qwen) = (fixture("tiny-llama"), fixture("tiny-qwen2"));
        let side = |name, tokenizer, logits| Side {
            name,
            tokenizer,
            logits,
        };
        let ours = llama.vocab_size();
        assert!(check_same(&side("a", &llama, ours), &side("b", &llama, ours)).is_ok());
        let wider = check_same(&side("a", &llama, ours), &side("b", &llama, ours + 1));
        assert_eq!(
            wider.unwrap_err().to_string(),
            format!(
                "the rollout model a and the trainer model b have different vocabularies (a \
                 computes logits over {ours} ids, b over {}): the trainer cannot score the \
                 rollout's token ids",
                ours + 1
            )
        );
        let other = check_same(&side("a", &llama, ours), &side("b", &qwen, ours));
        assert_eq!(
            other.unwrap_err().to_string(),
            format!(
                "the rollout model a and the trainer model b have different vocabularies (a's \
                 tokenizer has {ours} tokens, b's {}): the trainer cannot score the rollout's \
                 token ids",
                qwen.vocab_size()
            )
        );
    }
}
