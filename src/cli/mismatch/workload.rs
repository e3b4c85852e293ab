//! The prompts every format rolls out: a built-in set, or a prompts file (the format `sprout
//! rollout --prompts` reads). Each format runs exactly this list, with the same sampling
//! parameters and seed, so the rows differ only by the weights.
//!
//! A prompts-file line with its own sampling parameters is refused: one workload for every
//! format is the point, and a line's overrides would make the rows measure different things.

use std::path::Path;

use anyhow::{Context, Result, bail};
use sprout::prompts::{LineParams, PromptInput};
use sprout::tokenizer::Tokenizer;
use sprout::tokenizer::chat_template::{ChatTemplate, Message};

use crate::cli::prompts_file;

/// Instructions of several kinds (lists, explanation, arithmetic, code, prose), so the
/// completions cover the token types a rollout meets.
pub const BUILT_IN: [&str; 4] = [
    "List five animals that live in the ocean, one per line.",
    "Explain why the sky is blue in two sentences.",
    "What is 17 times 23? Show your working.",
    "Write a Python function that reverses a string.",
];

/// The prompts' token ids: `file`'s lines, or the built-in set rendered with the chat
/// template (as user messages) when the model has one, else as plain text.
pub fn prompts(
    file: Option<&Path>,
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<Vec<Vec<u32>>> {
    let Some(path) = file else {
        return BUILT_IN
            .iter()
            .map(|text| {
                let input = match template {
                    Some(_) => PromptInput::Messages(vec![Message::new("user", text)]),
                    None => PromptInput::Text(text.to_string()),
                };
                encode(&input, tokenizer, template)
            })
            .collect();
    };
    let mut out = Vec::new();
    for line in prompts_file::read(path)? {
        let line = match line {
            Ok(line) => line,
            Err(e) => bail!("{} line {}: {}", path.display(), e.line, e.error),
        };
        if line.params != LineParams::default() {
            bail!(
                "{} line {}: sprout mismatch runs one workload for every format, so a line \
                 cannot set its own sampling parameters (use -n, --max-tokens, --temperature \
                 and --seed)",
                path.display(),
                line.line
            );
        }
        let ids = encode(&line.input, tokenizer, template)
            .with_context(|| format!("{} line {}", path.display(), line.line))?;
        if ids.is_empty() {
            bail!(
                "{} line {}: the prompt has no tokens",
                path.display(),
                line.line
            );
        }
        out.push(ids);
    }
    if out.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(out)
}

fn encode(
    input: &PromptInput,
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<Vec<u32>> {
    Ok(match input {
        PromptInput::Text(text) => tokenizer.encode(text)?,
        PromptInput::TokenIds(ids) => ids.clone(),
        PromptInput::Messages(messages) => match template {
            Some(t) => tokenizer.encode(&t.render(messages)?)?,
            None => bail!("\"messages\" needs a chat template, and this model has none"),
        },
    })
}
