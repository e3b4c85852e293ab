//! Every request field of `/v1/completions`, `/v1/chat/completions` and
//! `/inference/v1/generate`, and what sprout does with it: the one table ([`FIELDS`]) that
//! the parsers, the screening of each body ([`screen`]) and the README's field table are
//! all checked against.
//!
//! The generate column names vLLM's `GenerateRequest`: its own fields ([`GENERATE_TOP`])
//! at the body's top level, and `SamplingParams`' inside `sampling_params`
//! ([`screen_generate`] holds each to its place).
//!
//! A field is *implemented* (read and honoured), *neutral only* (accepted at a value that
//! asks for nothing: SDKs send `best_of: 1`, `tools: []`, ...; any other value is a 400
//! naming it) or *refused* (a 400 naming it whenever present and not null). A field the
//! table gives to the other route only is a 400 too: ignoring it could sample from
//! another distribution than the client asked for. A field no API defines is ignored, as
//! OpenAI-compatible servers do, and named in one log line per request. Null is absence,
//! for every field.
//!
//! The fields are OpenAI's (its completions and chat-completions references) and vLLM's
//! (its `CompletionRequest`, `ChatCompletionRequest`, `GenerateRequest` and
//! `SamplingParams`, at the commit `VLLM_COMMIT` names).

use serde_json::{Map, Value};

use crate::cli::serve::error::{ApiError, short};
use crate::cli::serve::response::Api;

/// The vLLM commit whose protocol classes the table was pinned to.
#[cfg(test)]
pub const VLLM_COMMIT: &str = "002032ee2b18e1f7bd924ec47b62504ba3866063";

/// What sprout does with a field on one route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    Implemented,
    /// Accepted at one of the field's neutral values only.
    Neutral,
    Refused,
}

use Treatment::{Implemented as I, Neutral as N, Refused as R};

/// One field: its treatment on each route (`None`: not a field of that route).
#[derive(Debug)]
pub struct FieldRule {
    pub name: &'static str,
    pub completions: Option<Treatment>,
    pub chat: Option<Treatment>,
    pub generate: Option<Treatment>,
    /// JSON texts of the values that ask for nothing (neutral-only fields).
    pub neutral: &'static [&'static str],
    /// A value that is not neutral (for the tests that walk the table): accepted where
    /// implemented, refused elsewhere.
    #[cfg_attr(not(test), allow(dead_code))]
    pub sample: &'static str,
    /// What sprout does, for the README.
    pub does: &'static str,
}

const fn f(
    name: &'static str,
    completions: Option<Treatment>,
    chat: Option<Treatment>,
    generate: Option<Treatment>,
    neutral: &'static [&'static str],
    sample: &'static str,
    does: &'static str,
) -> FieldRule {
    FieldRule {
        name,
        completions,
        chat,
        generate,
        neutral,
        sample,
        does,
    }
}

/// Every field of the three routes, in the README's order (one row a line: a table).
#[rustfmt::skip]
pub const FIELDS: &[FieldRule] = &[
    f("model", Some(I), Some(I), Some(I), &[], r#""m""#, "the served model, or the loaded LoRA adapter to run with it (else 404)"),
    f("prompt", Some(I), None, None, &[], r#"[1, 2]"#, "text, token ids, or a list of either"),
    f("messages", None, Some(I), None, &[], r#"[{"role": "user", "content": "x"}]"#, "rendered by the chat template; text parts only"),
    f("n", Some(I), Some(I), Some(I), &[], "2", "samples per prompt, at most `--max-n`"),
    f("max_tokens", Some(I), Some(I), Some(I), &[], "3", "prompt + max_tokens past `--max-model-len` is a 400; 0 only with echo or prompt_logprobs (scoring, no generation)"),
    f("max_completion_tokens", None, Some(I), None, &[], "3", "as max_tokens; wins over it"),
    f("temperature", Some(I), Some(I), Some(I), &[], "0.5", "0 is greedy"),
    f("top_p", Some(I), Some(I), Some(I), &[], "0.9", "nucleus truncation"),
    f("top_k", Some(I), Some(I), Some(I), &[], "5", "0 or -1: every token"),
    f("min_p", Some(I), Some(I), Some(I), &[], "0.1", "min-p truncation"),
    f("seed", Some(I), Some(I), Some(I), &[], "7", "the request's own seed: same samples whatever the batch"),
    f("stop", Some(I), Some(I), Some(I), &[], r#"["x"]"#, "stop strings; the text is cut before the match"),
    f("stop_token_ids", Some(I), Some(I), Some(I), &[], "[3]", "stop tokens besides EOS"),
    f("min_tokens", Some(I), Some(I), Some(I), &[], "1", "stop tokens masked before it"),
    f("ignore_eos", Some(I), Some(I), Some(I), &[], "true", "EOS does not stop"),
    f("include_stop_str_in_output", Some(I), Some(I), Some(I), &[], "true", "the stop string that ended a sample stays in its text"),
    f("logit_bias", Some(I), Some(I), Some(I), &[], r#"{"3": -5}"#, "token id (string) to bias in [-100, 100]"),
    f("allowed_token_ids", Some(I), Some(I), Some(I), &[], "[3, 4]", "only these tokens may be drawn"),
    f("bad_words", Some(I), Some(I), Some(I), &[], r#"["hello"]"#, "words never generated, tokenized as vLLM does"),
    f("repetition_penalty", Some(I), Some(I), Some(I), &[], "1.2", "over prompt and generated tokens; > 0"),
    f("presence_penalty", Some(I), Some(I), Some(I), &[], "0.5", "over generated tokens; in [-2, 2]"),
    f("frequency_penalty", Some(I), Some(I), Some(I), &[], "0.5", "over generated tokens; in [-2, 2]"),
    f("logprobs", Some(I), Some(I), Some(I), &[], "2", "completions and generate: alternatives per token; chat: a boolean (see `--logprobs-mode`)"),
    f("top_logprobs", None, Some(I), None, &[], "2", "alternatives per token; needs logprobs"),
    f("prompt_logprobs", Some(I), Some(I), Some(I), &[], "1", "each prompt token's log-prob, rank and k alternatives, teacher-forced (vLLM's shape; not with stream)"),
    f("echo", Some(I), Some(N), None, &["false"], "true", "completions: the prompt's text before each completion; with logprobs, the prompt's log-probs first (max_tokens 0: the prompt alone, scored)"),
    f("truncate_prompt_tokens", Some(I), Some(I), Some(I), &[], "2", "keep the prompt's last k tokens (-1: `--max-model-len`)"),
    f("truncation_side", Some(N), Some(N), None, &[r#""left""#], r#""right""#, "truncation keeps the last tokens"),
    f("add_special_tokens", Some(I), Some(I), None, &[], "false", "whether the tokenizer adds BOS/EOS (default true on both routes)"),
    f("skip_special_tokens", Some(I), Some(I), Some(I), &[], "false", "whether special tokens are left out of the text"),
    f("spaces_between_special_tokens", Some(N), Some(N), Some(N), &["true"], "false", "the fast tokenizer's decoding only"),
    f("stream", Some(I), Some(I), Some(I), &[], "true", "server-sent events"),
    f("stream_options", Some(I), Some(I), Some(I), &[], r#"{"include_usage": true}"#, "include_usage; continuous_usage_stats and include_obfuscation false only"),
    f("request_id", Some(I), Some(I), Some(I), &[], r#""r1""#, "the response's id; `/abort_requests` takes it"),
    f("return_token_ids", Some(I), Some(I), None, &[], "true", "prompt and completion token ids in the response; chat: also on each message, NeMo Gym's `prompt_token_ids`, `generation_token_ids`, `generation_log_probs`"),
    f("required_prefix_token_ids", None, Some(I), None, &[], "[1, 2]", "NeMo Gym's: the prompt starts with these tokens exactly, the template's after the last assistant turn (default: that turn's `prompt_token_ids` + `generation_token_ids`)"),
    f("return_tokens_as_token_ids", Some(I), Some(I), None, &[], "true", "log-probs name tokens `token_id:ID`"),
    f("user", Some(I), Some(I), None, &[], r#""u""#, "recorded in the request's log line"),
    f("safety_identifier", None, Some(I), None, &[], r#""u""#, "recorded in the request's log line"),
    f("session_id", Some(I), Some(I), None, &[], r#""s""#, "recorded in the request's log line"),
    f("prompt_cache_key", None, Some(I), None, &[], r#""k""#, "recorded in the request's log line (the prefix cache is automatic)"),
    f("best_of", Some(N), None, None, &["1"], "2", "one candidate per sample"),
    f("use_beam_search", Some(N), Some(N), None, &["false"], "true", "no beam search"),
    f("length_penalty", Some(N), Some(N), None, &["1"], "0.5", "beam search only"),
    f("watermarking", Some(N), Some(N), None, &["false"], "true", "no watermarking"),
    f("priority", Some(N), Some(N), Some(N), &["0"], "1", "one priority: first come, first served"),
    f("response_format", Some(N), Some(N), None, &[r#"{"type": "text"}"#], r#"{"type": "json_object"}"#, "no structured outputs"),
    f("routed_experts_prompt_start", Some(N), Some(N), Some(N), &["0"], "1", "no expert routing data"),
    f("return_token_offsets", Some(N), Some(N), None, &["false"], "true", "render endpoints only"),
    f("return_mm_kwargs", Some(N), Some(N), None, &["true"], "false", "render endpoints only"),
    f("thinking_token_budget", Some(N), Some(N), Some(N), &["-1"], "10", "no thinking budget"),
    f("stream_interval", Some(N), Some(N), Some(N), &["1"], "4", "every token is streamed as it comes"),
    f("add_generation_prompt", None, Some(I), None, &[], "false", "whether the prompt ends with the assistant's turn opened (default true; false when continue_final_message is set alone)"),
    f("continue_final_message", None, Some(I), None, &[], "true", "the prompt ends inside the last message, which the model continues (a prefill); not with add_generation_prompt true"),
    f("include_reasoning", None, Some(N), None, &["true"], "false", "no reasoning parser: the content is the whole text"),
    f("return_prompt_text", None, Some(N), None, &["false"], "true", "no prompt_text in the response"),
    f("chat_template_kwargs", None, Some(I), None, &[], r#"{"enable_thinking": true}"#, "more variables for the template (`enable_thinking`, `date_string`, ...), not those the request sets"),
    f("media_io_kwargs", None, Some(N), None, &["{}"], r#"{"image": {}}"#, "text only"),
    f("mm_processor_kwargs", None, Some(N), None, &["{}"], r#"{"x": 1}"#, "text only"),
    f("tools", None, Some(I), None, &[], r#"[{"type": "function", "function": {"name": "f"}}]"#, "1 to 128 functions, rendered by the chat template as vLLM hands them to it (also with tool_choice none)"),
    f("tool_choice", None, Some(I), None, &[], r#""none""#, "none, or auto (the default with tools); required and named functions need structured output: a 400"),
    f("parallel_tool_calls", None, Some(N), None, &["true", "false"], r#""yes""#, "no tool calling"),
    f("functions", None, Some(N), None, &["[]"], r#"[{"name": "f"}]"#, "no function calling"),
    f("function_call", None, Some(N), None, &[r#""none""#, r#""auto""#], r#"{"name": "f"}"#, "no function calling"),
    f("modalities", None, Some(N), None, &[r#"["text"]"#], r#"["text", "audio"]"#, "text only"),
    f("store", None, Some(N), None, &["false"], "true", "nothing is stored"),
    f("metadata", None, Some(N), None, &["{}"], r#"{"k": "v"}"#, "nothing is stored"),
    f("service_tier", None, Some(N), None, &[r#""auto""#, r#""default""#], r#""flex""#, "one tier"),
    f("suffix", Some(R), None, None, &[], r#""x""#, "no insertion"),
    f("prompt_embeds", Some(R), None, None, &[], r#""AAAA""#, "token prompts only"),
    f("logprob_token_ids", Some(R), Some(R), Some(R), &[], "[3]", "log-probs of the sampled and top tokens only"),
    f("structured_outputs", Some(R), Some(R), Some(R), &[], r#"{"regex": "a+"}"#, "no structured outputs"),
    f("cache_salt", Some(I), Some(I), Some(I), &[], r#""salt""#, "1 to 1024 bytes; prompt blocks are shared only with requests of the same salt"),
    f("kv_transfer_params", Some(R), Some(R), Some(R), &[], "{}", "no disaggregated serving"),
    f("ec_transfer_params", Some(R), Some(R), None, &[], "{}", "no disaggregated serving"),
    f("vllm_xargs", Some(R), Some(R), None, &[], "{}", "no extensions"),
    f("repetition_detection", Some(R), Some(R), Some(R), &[], "{}", "no repetition detection"),
    f("reasoning_effort", None, Some(R), None, &[], r#""low""#, "no reasoning controls"),
    f("verbosity", None, Some(R), None, &[], r#""low""#, "no verbosity control"),
    f("audio", None, Some(R), None, &[], r#"{"voice": "alloy"}"#, "text only"),
    f("prediction", None, Some(R), None, &[], r#"{"type": "content", "content": "x"}"#, "no predicted outputs"),
    f("web_search_options", None, Some(R), None, &[], "{}", "no web search"),
    f("documents", None, Some(R), None, &[], r#"[{"text": "x"}]"#, "the template gets messages only"),
    f("chat_template", None, Some(R), None, &[], r#""{{ x }}""#, "the server's template only (`--chat-template`)"),
    f("token_ids", None, None, Some(I), &[], "[1, 2]", "the prompt's token ids"),
    f("sampling_params", None, None, Some(I), &[], r#"{"n": 2}"#, "vLLM's SamplingParams: the rows with a generate column"),
    f("detokenize", None, None, Some(I), &[], "false", "token ids are returned either way"),
    f("output_kind", None, None, Some(N), &["0", "1", "2"], "3", "whole responses and streamed deltas whatever the kind"),
    f("flat_logprobs", None, None, Some(N), &["false"], "true", "log-probs in the response's shape only"),
    f("skip_reading_prefix_cache", None, None, Some(N), &["false"], "true", "the prefix cache changes no output: it is always read"),
    f("prompt_logprob_token_ids", None, None, Some(R), &[], "[3]", "no prompt log-probs"),
    f("prompt_logprob_start", None, None, Some(R), &[], "1", "no prompt log-probs"),
    f("trace_decode_token_ids", None, None, Some(R), &[], "[3]", "no forced decoding"),
    f("extra_args", None, None, Some(R), &[], r#"{"k": 1}"#, "no custom sampling"),
    f("logits_processors", None, None, Some(R), &[], r#"["p"]"#, "no custom logits processors"),
    f("features", None, None, Some(R), &[], r#"{"mm_hashes": {}}"#, "text only"),
];

impl FieldRule {
    /// The field's treatment on `api`'s route, `None` when it is not one of its fields.
    pub fn on(&self, api: Api) -> Option<Treatment> {
        match api {
            Api::Completions => self.completions,
            Api::Chat => self.chat,
            Api::Generate => self.generate,
        }
    }

    /// Whether `value` is one of the field's neutral values (numbers compared as numbers).
    pub fn is_neutral(&self, value: &Value) -> bool {
        self.neutral.iter().any(|text| {
            serde_json::from_str::<Value>(text).is_ok_and(|neutral| same(&neutral, value))
        })
    }
}

/// JSON equality with numbers compared by value (`1` is `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
        }
        _ => a == b,
    }
}

/// The route's path, for messages.
fn path(api: Api) -> &'static str {
    match api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
        Api::Generate => "/inference/v1/generate",
    }
}

/// The fields of a generate body's top level; every other generate field goes in its
/// `sampling_params`.
pub const GENERATE_TOP: &[&str] = &[
    "request_id",
    "token_ids",
    "sampling_params",
    "model",
    "stream",
    "stream_options",
    "cache_salt",
    "priority",
    "kv_transfer_params",
    "features",
];

/// Screens a generate body: `top` (its top level) and `params` (its `sampling_params`)
/// each as [`screen`] does, and each field in its place: a `SamplingParams` field at the
/// top level, or a request field inside `sampling_params`, is a 400 naming it (rather
/// than a field silently not applied).
pub fn screen_generate(
    top: &Map<String, Value>,
    params: &Map<String, Value>,
) -> Result<(), ApiError> {
    let generate = |name: &str| rule(name).is_some_and(|r| r.generate.is_some());
    let top_level = |name: &str| GENERATE_TOP.contains(&name);
    if let Some(name) = top.keys().find(|n| !top_level(n) && generate(n)) {
        return Err(ApiError::bad(
            name,
            format!("{name} goes in sampling_params on /inference/v1/generate"),
        ));
    }
    if let Some(name) = params.keys().find(|n| top_level(n)) {
        return Err(ApiError::bad(
            name,
            format!("{name} is a field of the request, not of its sampling_params"),
        ));
    }
    screen(top, Api::Generate)?;
    screen(params, Api::Generate)
}

/// The rule of field `name`, if the table has one.
pub fn rule(name: &str) -> Option<&'static FieldRule> {
    FIELDS.iter().find(|r| r.name == name)
}

/// Checks each field of a body for `api` against the table: a refused field, a
/// neutral-only one at another value or another route's field is a 400 naming it; the
/// fields no API defines are logged in one line.
pub fn screen(obj: &Map<String, Value>, api: Api) -> Result<(), ApiError> {
    let mut unknown: Vec<&str> = Vec::new();
    for (name, value) in obj {
        let Some(rule) = rule(name) else {
            unknown.push(name);
            continue;
        };
        if value.is_null() {
            continue;
        }
        match rule.on(api) {
            Some(Treatment::Implemented) => {}
            None => {
                return Err(ApiError::bad(
                    name,
                    format!(
                        "{name} is not a field of {} (sprout refuses it rather than ignore it)",
                        path(api)
                    ),
                ));
            }
            Some(Treatment::Refused) => {
                return Err(ApiError::bad(
                    name,
                    format!("{name} is not supported by sprout: {}", rule.does),
                ));
            }
            Some(Treatment::Neutral) if rule.is_neutral(value) => {}
            Some(Treatment::Neutral) => {
                return Err(ApiError::bad(
                    name,
                    format!(
                        "{name} is accepted only as {}, not {}: {}",
                        rule.neutral.join(" or "),
                        short(value),
                        rule.does
                    ),
                ));
            }
        }
    }
    if !unknown.is_empty() {
        tracing::info!(
            "{}: ignoring fields no API defines: {}",
            path(api),
            unknown.join(", ")
        );
    }
    Ok(())
}

/// The README's field table, as the table gives it, with the vLLM commit it was pinned to.
#[cfg(test)]
pub fn markdown() -> String {
    let cell = |t: Option<Treatment>| match t {
        Some(Treatment::Implemented) => "implemented",
        Some(Treatment::Neutral) => "neutral only",
        Some(Treatment::Refused) => "refused",
        None => "-",
    };
    let top: Vec<String> = GENERATE_TOP.iter().map(|n| format!("`{n}`")).collect();
    let mut out = format!(
        "Pinned to OpenAI's completions and chat-completions references and to vLLM's \
         `CompletionRequest`, `ChatCompletionRequest`, `GenerateRequest` and `SamplingParams` \
         (vLLM commit {VLLM_COMMIT}, `vllm/entrypoints/openai/completion/protocol.py`, \
         `vllm/entrypoints/openai/chat_completion/protocol.py`, \
         `vllm/entrypoints/serve/disagg/protocol.py` and `vllm/sampling_params.py`). On \
         /inference/v1/generate the fields of `GenerateRequest` ({}) are at the top level \
         and the others inside `sampling_params`.\n\n",
        top.join(", ")
    );
    out.push_str(
        "| Field | /v1/completions | /v1/chat/completions | /inference/v1/generate | Neutral values | What sprout does |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in FIELDS {
        let neutral: Vec<String> = r.neutral.iter().map(|v| format!("`{v}`")).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            r.name,
            cell(r.completions),
            cell(r.chat),
            cell(r.generate),
            neutral.join(", "),
            r.does.replace('|', "\\|"),
        ));
    }
    out
}

#[cfg(test)]
thread_local! {
    /// The fields the parsers read on this thread (see [`note_read`]).
    static READ: std::cell::RefCell<std::collections::BTreeSet<String>> =
        Default::default();
}

/// Records that a parser read field `name` (tests only: they check the parsers read
/// exactly the implemented fields of the table).
pub fn note_read(name: &str) {
    #[cfg(test)]
    READ.with(|r| r.borrow_mut().insert(name.to_string()));
    #[cfg(not(test))]
    let _ = name;
}

#[cfg(test)]
pub fn take_read() -> std::collections::BTreeSet<String> {
    READ.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

#[cfg(test)]
#[path = "fields_tests.rs"]
mod tests;
