//! Multi-turn prompts that hold the tokens the model sampled, not a re-tokenization of
//! its text: NeMo Gym's convention on the chat route.
//!
//! A chat response's message may carry its turn's tokens ([`TurnTokens`]:
//! `prompt_token_ids`, `generation_token_ids`, `generation_log_probs`). A client sends its
//! history back with those fields on its assistant messages, and may name the prefix the
//! next prompt must start with (`required_prefix_token_ids`); by default it is the
//! `prompt_token_ids + generation_token_ids` of the last assistant message that carries
//! them ([`required_prefix`]). The server renders the conversation as usual, renders it
//! again through the message the prefix ends with (no generation prompt), and splices
//! ([`splice`]): the prompt is the prefix, then the full rendering's tokens after the
//! end-of-turn token that closes that message. Templates that drop earlier `<think>`
//! blocks or strip whitespace, and text that tokenizes differently from how it was
//! sampled, then change nothing the model already saw.
//!
//! Invariants: a spliced prompt starts with the prefix exactly (when the prefix ends with
//! an end-of-turn token, it stands for the template's); the fields never reach the
//! template (they are read beside the messages, not into them); hostile fields (ids
//! outside the vocabulary, mismatched lengths, a prefix longer than the context, a
//! rendering with no end-of-turn token where the prefix ends) are 400s naming the field,
//! never a panic.
//!
//! Where sprout differs from NeMo RL's `_replace_prefix_tokens`: NeMo RL takes the last
//! end-of-turn token of the full rendering *at a position* inside the shorter rendering's
//! length, which lands in the wrong turn when the two renderings differ in length before
//! the cut (Qwen3's template keeps the last assistant turn's reasoning when it is the
//! conversation's end and drops it when a user message follows). sprout counts instead:
//! the cut is the full rendering's k-th end-of-turn token, k being how many the rendering
//! through the prefix's message holds. And a default prefix ends at the message that
//! carried it, not always at the last assistant message, so that an assistant message
//! without tokens after it is rendered rather than dropped.

use serde::Serialize;
use serde_json::Value;

use crate::cli::serve::error::{ApiError, short};

/// The names of the token fields a message may carry, in the order they are read.
pub const MESSAGE_FIELDS: [&str; 3] = [
    "prompt_token_ids",
    "generation_token_ids",
    "generation_log_probs",
];

/// The request field that names the prefix explicitly.
pub const REQUIRED_PREFIX: &str = "required_prefix_token_ids";

/// One turn's exact tokens: the prompt it ran, what it sampled, and each sampled token's
/// log-prob. On a response's message with `return_token_ids`; on a request's assistant
/// messages as the client sends its history back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TurnTokens {
    pub prompt_token_ids: Vec<u32>,
    pub generation_token_ids: Vec<u32>,
    /// Optional on a request (read and checked against the ids, not used).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_log_probs: Option<Vec<f32>>,
}

/// The prefix a prompt must start with, and the message it ends with.
#[derive(Clone, Debug, PartialEq)]
pub struct Prefix {
    pub tokens: Vec<u32>,
    /// The index of the message whose end the prefix reaches.
    pub through: usize,
}

/// `messages[i].name`, as an error names it.
fn param(i: usize, name: &str) -> String {
    format!("messages[{i}].{name}")
}

/// A list of token ids, or a 400 naming `name`.
fn ids(value: &Value, name: &str) -> Result<Vec<u32>, ApiError> {
    let wrong = || {
        ApiError::bad(
            name,
            format!("{name} must be a list of token ids, not {}", short(value)),
        )
    };
    let Value::Array(items) = value else {
        return Err(wrong());
    };
    items
        .iter()
        .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(wrong)
}

/// The token fields of each message of `items` (`None` for a message without them),
/// checked for shape: ids are ids, both id lists or neither, log-probs one per generated
/// token, only on assistant messages. `items` are the `messages` the parser has already
/// read (each an object with a role).
pub fn read_turns(items: &[Value]) -> Result<Vec<Option<TurnTokens>>, ApiError> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = |name: &str| item.get(name).filter(|v| !v.is_null());
        let [prompt, generation, log_probs] = MESSAGE_FIELDS.map(field);
        if prompt.is_none() && generation.is_none() && log_probs.is_none() {
            out.push(None);
            continue;
        }
        let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
        if role != "assistant" {
            let given = [prompt, generation, log_probs].map(|v| v.is_some());
            let name = MESSAGE_FIELDS[given.iter().position(|&g| g).unwrap_or(0)];
            return Err(ApiError::bad(
                &param(i, name),
                format!(
                    "{} is read on assistant messages only, not on a {role:?} message",
                    param(i, name)
                ),
            ));
        }
        let (Some(prompt), Some(generation)) = (prompt, generation) else {
            let missing = if prompt.is_none() {
                MESSAGE_FIELDS[0]
            } else {
                MESSAGE_FIELDS[1]
            };
            return Err(ApiError::bad(
                &param(i, missing),
                format!(
                    "{} is required with the message's other token fields",
                    param(i, missing)
                ),
            ));
        };
        let prompt_token_ids = ids(prompt, &param(i, MESSAGE_FIELDS[0]))?;
        let generation_token_ids = ids(generation, &param(i, MESSAGE_FIELDS[1]))?;
        let generation_log_probs = log_probs
            .map(|v| read_log_probs(v, &param(i, MESSAGE_FIELDS[2]), generation_token_ids.len()))
            .transpose()?;
        out.push(Some(TurnTokens {
            prompt_token_ids,
            generation_token_ids,
            generation_log_probs,
        }));
    }
    Ok(out)
}

/// A list of `count` numbers, or a 400 naming `name`.
fn read_log_probs(value: &Value, name: &str, count: usize) -> Result<Vec<f32>, ApiError> {
    let numbers = match value {
        Value::Array(items) => items.iter().map(Value::as_f64).collect::<Option<Vec<_>>>(),
        _ => None,
    };
    let Some(numbers) = numbers else {
        return Err(ApiError::bad(
            name,
            format!("{name} must be a list of numbers, not {}", short(value)),
        ));
    };
    if numbers.len() != count {
        return Err(ApiError::bad(
            name,
            format!(
                "{name} has {} log-probs for {count} generated tokens",
                numbers.len()
            ),
        ));
    }
    Ok(numbers.into_iter().map(|x| x as f32).collect())
}

/// `required_prefix_token_ids`, when the body has it (null is absence).
pub fn read_required(value: Option<&Value>) -> Result<Option<Vec<u32>>, ApiError> {
    value.map(|v| ids(v, REQUIRED_PREFIX)).transpose()
}

/// Checks every id against a vocabulary of `vocab` and every list against a context of
/// `max_len` tokens.
pub fn check(
    turns: &[Option<TurnTokens>],
    required: Option<&[u32]>,
    vocab: usize,
    max_len: usize,
) -> Result<(), ApiError> {
    let one = |ids: &[u32], name: &str| -> Result<(), ApiError> {
        if ids.len() > max_len {
            return Err(ApiError::bad(
                name,
                format!(
                    "{name} holds {} tokens, more than the maximum context length ({max_len})",
                    ids.len()
                ),
            ));
        }
        match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(bad) => Err(ApiError::bad(
                name,
                format!("{name}: token id {bad} is outside the vocabulary of {vocab}"),
            )),
            None => Ok(()),
        }
    };
    for (i, turn) in turns.iter().enumerate() {
        if let Some(t) = turn {
            one(&t.prompt_token_ids, &param(i, MESSAGE_FIELDS[0]))?;
            one(&t.generation_token_ids, &param(i, MESSAGE_FIELDS[1]))?;
            let whole = t.prompt_token_ids.len() + t.generation_token_ids.len();
            if whole > max_len {
                let name = param(i, MESSAGE_FIELDS[1]);
                return Err(ApiError::bad(
                    &name,
                    format!(
                        "{} and {name} hold {whole} tokens together, more than the maximum \
                         context length ({max_len})",
                        param(i, MESSAGE_FIELDS[0])
                    ),
                ));
            }
        }
    }
    match required {
        Some(ids) => one(ids, REQUIRED_PREFIX),
        None => Ok(()),
    }
}

/// The prefix the prompt must start with, if any: `required` (the request's
/// `required_prefix_token_ids`), ending at the last assistant message (at the last message
/// when there is none); else the last message that carries token fields, its prompt and
/// generation. An empty `required` asks for no prefix, as in NeMo RL.
pub fn required_prefix(
    roles: &[&str],
    turns: &[Option<TurnTokens>],
    required: Option<&[u32]>,
) -> Option<Prefix> {
    if let Some(ids) = required {
        let last_assistant = roles.iter().rposition(|&r| r == "assistant");
        let through = last_assistant.unwrap_or(roles.len().checked_sub(1)?);
        return (!ids.is_empty()).then(|| Prefix {
            tokens: ids.to_vec(),
            through,
        });
    }
    let through = turns.iter().rposition(Option::is_some)?;
    let t = turns[through].as_ref()?;
    let mut tokens = t.prompt_token_ids.clone();
    tokens.extend_from_slice(&t.generation_token_ids);
    Some(Prefix { tokens, through })
}

/// The prompt: `prefix`, then the tokens of `full` (the conversation's rendering) after
/// the end-of-turn token that closes the prefix's message, found as the k-th end-of-turn
/// token of `full`, k being how many `through` (the rendering through that message, no
/// generation prompt) holds. When `prefix` itself ends with an end-of-turn token it stands
/// for the template's; else the template's closes the turn (a generation cut short by
/// `max_tokens`). `end_ids`: the model's end-of-turn (EOS) tokens.
pub fn splice(
    prefix: &[u32],
    through: &[u32],
    full: &[u32],
    end_ids: &[u32],
) -> Result<Vec<u32>, ApiError> {
    let bad = |message: String| ApiError::bad(REQUIRED_PREFIX, message);
    if prefix.is_empty() {
        return Ok(full.to_vec());
    }
    if end_ids.is_empty() {
        return Err(bad(format!(
            "{REQUIRED_PREFIX} needs the model's end-of-turn token, and this model names none"
        )));
    }
    let is_end = |id: &u32| end_ids.contains(id);
    let k = through.iter().filter(|id| is_end(id)).count();
    if k == 0 {
        return Err(bad(format!(
            "{REQUIRED_PREFIX}: the template's rendering of the messages the prefix stands \
             for has no end-of-turn token (ids {end_ids:?}), so there is no place to splice"
        )));
    }
    let Some(cut) = full
        .iter()
        .enumerate()
        .filter(|(_, id)| is_end(id))
        .nth(k - 1)
        .map(|(at, _)| at)
    else {
        return Err(bad(format!(
            "{REQUIRED_PREFIX}: the conversation's rendering holds fewer end-of-turn tokens \
             than its rendering through the prefix's message ({k}): it does not extend it"
        )));
    };
    let rest = match prefix.last().is_some_and(is_end) {
        true => &full[cut + 1..],
        false => &full[cut..],
    };
    let mut out = Vec::with_capacity(prefix.len() + rest.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const EOS: u32 = 2;

    fn turns(messages: Value) -> Result<Vec<Option<TurnTokens>>, ApiError> {
        read_turns(messages.as_array().unwrap())
    }

    #[test]
    fn nemo_rl_s_example_splices_alike() {
        // Turn 1 sampled [220, 17, EOS] after [11, 12, 13, 40, 41]; the template writes
        // the reply as 1001 now.
        let prefix = [11, 12, 13, 40, 41, 220, 17, EOS];
        let through = [11, 12, 13, 40, 41, 1001, EOS];
        let full = [11, 12, 13, 40, 41, 1001, EOS, 21, 22, 40, 41];
        let out = splice(&prefix, &through, &full, &[EOS]).unwrap();
        assert_eq!(out, vec![11, 12, 13, 40, 41, 220, 17, EOS, 21, 22, 40, 41]);
    }

    #[test]
    fn a_template_that_drops_reasoning_before_the_cut_still_splices_at_the_turn_s_end() {
        // Through the assistant message the template keeps its reasoning (77, 78); in
        // the whole conversation, a user message later, it drops it. The cut is the
        // first turn's end either way, and the user message (5, EOS) is kept.
        let prefix = [10, 11, 77, 78, 31, 32, EOS];
        let through = [10, 11, 77, 78, 31, EOS, 9];
        let full = [10, 11, 31, EOS, 9, 5, EOS, 9, 40];
        let out = splice(&prefix, &through, &full, &[EOS]).unwrap();
        assert_eq!(out, vec![10, 11, 77, 78, 31, 32, EOS, 9, 5, EOS, 9, 40]);
        assert!(out.starts_with(&prefix));
    }

    #[test]
    fn a_generation_cut_short_is_closed_by_the_template_s_end_token() {
        let prefix = [10, 31, 32];
        let out = splice(&prefix, &[10, 33, EOS, 9], &[10, 33, EOS, 9, 5], &[EOS]).unwrap();
        assert_eq!(out, vec![10, 31, 32, EOS, 9, 5]);
    }

    #[test]
    fn a_sampled_end_token_other_than_the_template_s_is_kept() {
        // The model stopped on another of its EOS ids (3): the prompt holds what it drew.
        let out = splice(&[10, 31, 3], &[10, 31, EOS], &[10, 31, EOS, 5], &[EOS, 3]).unwrap();
        assert_eq!(out, vec![10, 31, 3, 5]);
    }

    #[test]
    fn an_empty_prefix_keeps_the_template_s_tokens() {
        let full = [1, 2, 3];
        assert_eq!(splice(&[], &[9], &full, &[EOS]).unwrap(), full.to_vec());
    }

    #[test]
    fn no_place_to_splice_is_a_400_naming_the_field() {
        // (prefix, through, full, end ids)
        type Case<'a> = (&'a [u32], &'a [u32], &'a [u32], &'a [u32]);
        let cases: [Case; 3] = [
            // No end-of-turn token where the prefix ends.
            (&[1, 2], &[7, 8, 9], &[7, 8, 9, 4], &[EOS]),
            // The full rendering has fewer turns than the partial one.
            (&[1, 2], &[7, EOS, 8, EOS], &[7, EOS, 8], &[EOS]),
            // The model names no end token.
            (&[1, 2], &[7, EOS], &[7, EOS], &[]),
        ];
        for (prefix, through, full, ends) in cases {
            let e = splice(prefix, through, full, ends).unwrap_err();
            assert_eq!(e.status, 400);
            assert_eq!(e.param.as_deref(), Some(REQUIRED_PREFIX), "{}", e.message);
            assert!(e.message.contains(REQUIRED_PREFIX), "{}", e.message);
        }
    }

    proptest! {
        /// Whatever the renderings, a splice is an error or a prompt that starts with the
        /// prefix, and never panics.
        #[test]
        fn any_splice_keeps_the_prefix_or_refuses(
            prefix in prop::collection::vec(0u32..6, 0..12),
            through in prop::collection::vec(0u32..6, 0..12),
            full in prop::collection::vec(0u32..6, 0..16),
            ends in prop::collection::vec(0u32..6, 0..3),
        ) {
            if let Ok(out) = splice(&prefix, &through, &full, &ends) {
                prop_assert!(out.starts_with(&prefix));
                prop_assert!(out.len() <= prefix.len() + full.len());
            }
        }
    }

    #[test]
    fn the_default_prefix_is_the_last_carried_turn() {
        let t = |p: Vec<u32>, g: Vec<u32>| {
            Some(TurnTokens {
                prompt_token_ids: p,
                generation_token_ids: g,
                generation_log_probs: None,
            })
        };
        let roles = ["user", "assistant", "tool", "assistant", "user"];
        let carried = vec![
            None,
            t(vec![1, 2], vec![3]),
            None,
            t(vec![1, 2, 3, 4], vec![5]),
            None,
        ];
        let p = required_prefix(&roles, &carried, None).unwrap();
        assert_eq!((p.tokens, p.through), (vec![1, 2, 3, 4, 5], 3));
        // The last assistant message has none: the prefix ends where the tokens do.
        let earlier = vec![None, t(vec![1, 2], vec![3]), None, None, None];
        let p = required_prefix(&roles, &earlier, None).unwrap();
        assert_eq!((p.tokens, p.through), (vec![1, 2, 3], 1));
        // An explicit prefix wins and ends at the last assistant message.
        let p = required_prefix(&roles, &carried, Some(&[9, 9])).unwrap();
        assert_eq!((p.tokens, p.through), (vec![9, 9], 3));
        let p = required_prefix(&["user"], &[None], Some(&[9])).unwrap();
        assert_eq!(p.through, 0);
        assert_eq!(required_prefix(&roles, &carried, Some(&[])), None);
        assert_eq!(required_prefix(&roles, &vec![None; 5], None), None);
    }

    #[test]
    fn message_token_fields_read() {
        let read = turns(json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y", "prompt_token_ids": [1, 2],
             "generation_token_ids": [3, 4], "generation_log_probs": [-0.5, -1]},
            {"role": "assistant", "content": "z", "prompt_token_ids": [1],
             "generation_token_ids": [], "generation_log_probs": null},
        ]))
        .unwrap();
        assert_eq!(read[0], None);
        let second = read[1].as_ref().unwrap();
        assert_eq!(second.generation_token_ids, vec![3, 4]);
        assert_eq!(second.generation_log_probs, Some(vec![-0.5, -1.0]));
        assert_eq!(read[2].as_ref().unwrap().generation_log_probs, None);
    }

    #[test]
    fn bad_message_token_fields_name_the_message_and_field() {
        let a = |extra: Value| {
            let mut m = json!({"role": "assistant", "content": "y"});
            m.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json!([{"role": "user", "content": "x"}, m])
        };
        let cases = [
            (
                a(json!({"prompt_token_ids": [1]})),
                "messages[1].generation_token_ids",
            ),
            (
                a(json!({"generation_token_ids": [1]})),
                "messages[1].prompt_token_ids",
            ),
            (
                a(json!({"generation_log_probs": [0.0]})),
                "messages[1].prompt_token_ids",
            ),
            (
                a(json!({"prompt_token_ids": [1, -1], "generation_token_ids": [2]})),
                "messages[1].prompt_token_ids",
            ),
            (
                a(json!({"prompt_token_ids": [1], "generation_token_ids": "2"})),
                "messages[1].generation_token_ids",
            ),
            (
                a(json!({"prompt_token_ids": [1], "generation_token_ids": [2, 4294967296u64]})),
                "messages[1].generation_token_ids",
            ),
            (
                a(json!({"prompt_token_ids": [1], "generation_token_ids": [2],
                         "generation_log_probs": [-1, -2]})),
                "messages[1].generation_log_probs",
            ),
            (
                a(json!({"prompt_token_ids": [1], "generation_token_ids": [2],
                         "generation_log_probs": ["x"]})),
                "messages[1].generation_log_probs",
            ),
            (
                json!([{"role": "user", "content": "x", "prompt_token_ids": [1],
                        "generation_token_ids": [2]}]),
                "messages[0].prompt_token_ids",
            ),
        ];
        for (messages, name) in cases {
            let e = turns(messages.clone()).unwrap_err();
            assert_eq!(e.status, 400, "{messages}");
            assert_eq!(e.param.as_deref(), Some(name), "{messages}: {}", e.message);
            assert!(e.message.contains(name), "{messages}: {}", e.message);
        }
    }

    #[test]
    fn ids_outside_the_vocabulary_or_the_context_are_refused() {
        let t = |p: Vec<u32>, g: Vec<u32>| {
            vec![
                None,
                Some(TurnTokens {
                    prompt_token_ids: p,
                    generation_token_ids: g,
                    generation_log_probs: None,
                }),
            ]
        };
        let cases = [
            (
                t(vec![1, 10], vec![2]),
                None,
                "messages[1].prompt_token_ids",
            ),
            (
                t(vec![1], vec![10]),
                None,
                "messages[1].generation_token_ids",
            ),
            (t(vec![1; 9], vec![]), None, "messages[1].prompt_token_ids"),
            (
                t(vec![1; 5], vec![2; 4]),
                None,
                "messages[1].generation_token_ids",
            ),
            (vec![None], Some(vec![10]), REQUIRED_PREFIX),
            (vec![None], Some(vec![1; 9]), REQUIRED_PREFIX),
        ];
        for (turns, required, name) in cases {
            let e = check(&turns, required.as_deref(), 10, 8).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(name), "{}", e.message);
            assert!(e.message.contains(name), "{}", e.message);
        }
        check(&t(vec![1; 4], vec![9; 4]), Some(&[9; 8]), 10, 8).unwrap();
    }

    #[test]
    fn the_required_prefix_reads_ids_only() {
        assert_eq!(read_required(None).unwrap(), None);
        assert_eq!(
            read_required(Some(&json!([1, 2]))).unwrap(),
            Some(vec![1, 2])
        );
        for bad in [json!("1"), json!([1.5]), json!([-1]), json!({"a": 1})] {
            let e = read_required(Some(&bad)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(REQUIRED_PREFIX));
        }
    }
}
