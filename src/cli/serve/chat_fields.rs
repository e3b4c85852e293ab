//! The chat route's fields about rendering the prompt, read as vLLM's
//! `ChatCompletionRequest` reads them and handed to the template as vLLM hands them, so
//! that the template's text is the one vLLM (through transformers) renders:
//!
//! - `tools`: 1 to [`MAX_TOOLS`] `{"type": "function", "function": {"name", "description"?,
//!   "parameters"?, "strict"?}}`, given to the template as vLLM's `model_dump()` writes
//!   them (`description` and `parameters` null when absent, `strict` only when given);
//!   rendered even with `tool_choice: "none"` (vLLM's default).
//! - `tool_choice`: `"none"`, or `"auto"` (the default when there are tools); `"required"`
//!   and a named function are a 400: vLLM enforces them with structured output, which
//!   sprout does not have.
//! - `chat_template_kwargs` (the template's other variables), `add_generation_prompt`
//!   (default true, false when `continue_final_message` is set alone) and
//!   `continue_final_message`; both true is a 400.
//! - In messages: `name`; an assistant's `tool_calls` (each call's `arguments`, a JSON
//!   string, parsed into the value templates print, `{}` when empty) and `reasoning_content`
//!   (or vLLM's `reasoning`); a tool result's `tool_call_id`. Any other key is a 400
//!   naming it, except those OpenAI's SDK echoes from a response, at null.
//!
//! Every error is a 400 naming the field (`messages` for what is inside a message).

use serde_json::{Map, Value, json};
use sprout::tokenizer::chat_template::{self, Message, RenderOptions};

use crate::cli::serve::body_fields::{field, get};
use crate::cli::serve::error::{ApiError, short};
use crate::cli::serve::token_prefix::MESSAGE_FIELDS;

/// The most tools a request may give (OpenAI's bound), and the most calls one message
/// may carry.
pub const MAX_TOOLS: usize = 128;
/// The longest tool or function name.
pub const MAX_NAME_BYTES: usize = 256;
/// The most bytes the tools' JSON may take.
pub const MAX_TOOLS_BYTES: usize = 1 << 20;

/// Whether the model may call the tools (`tool_choice`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// `"none"`, and the default without tools: the output is text.
    None,
    /// `"auto"`, the default with tools: the output may hold calls.
    Auto,
}

/// The keys a message may have. `tool_calls`, `reasoning_content` and `reasoning` are an
/// assistant's, `tool_call_id` a tool result's.
const MESSAGE_KEYS: &[&str] = &[
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "reasoning",
];

/// Keys of a response's message that OpenAI's SDK sends back in a history: accepted at
/// null only.
const ECHOED_KEYS: &[&str] = &["refusal", "annotations", "audio", "function_call"];

/// The rendering fields of a chat body: the options for the template, and the tool
/// choice.
pub fn render_options(obj: &Map<String, Value>) -> Result<(RenderOptions, ToolChoice), ApiError> {
    let tools = tools(get(obj, "tools"))?;
    let choice = tool_choice(get(obj, "tool_choice"), tools.is_some())?;
    let kwargs = kwargs(get(obj, "chat_template_kwargs"))?;
    let continue_final: bool = field(obj, "continue_final_message", "a boolean")?.unwrap_or(false);
    let add: Option<bool> = field(obj, "add_generation_prompt", "a boolean")?;
    if continue_final && add == Some(true) {
        return Err(ApiError::bad(
            "continue_final_message",
            "continue_final_message and add_generation_prompt cannot both be true",
        ));
    }
    let options = RenderOptions {
        tools,
        add_generation_prompt: add.unwrap_or(!continue_final),
        continue_final_message: continue_final,
        kwargs,
    };
    Ok((options, choice))
}

/// `tools`, as vLLM hands them to the template.
fn tools(value: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let bad = |message: String| ApiError::bad("tools", message);
    let items = match value {
        None => return Ok(None),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(bad(
                "tools must not be empty: give at least one tool or leave tools out".into(),
            ));
        }
        Some(Value::Array(items)) if items.len() > MAX_TOOLS => {
            return Err(bad(format!(
                "tools holds {} tools, more than the {MAX_TOOLS} sprout takes",
                items.len()
            )));
        }
        Some(Value::Array(items)) => items,
        Some(v) => return Err(bad(format!("tools must be a list, not {}", short(v)))),
    };
    let out: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, tool)| one_tool(i, tool).map_err(bad))
        .collect::<Result<_, _>>()?;
    let out = Value::Array(out);
    let bytes = out.to_string().len();
    if bytes > MAX_TOOLS_BYTES {
        return Err(bad(format!(
            "tools take {bytes} bytes of JSON, more than the {MAX_TOOLS_BYTES} sprout takes"
        )));
    }
    Ok(Some(out))
}

/// The keys of `obj` outside `allowed`, as an error `what.KEY is not ...`.
fn only_keys(obj: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{what}.{key} is not a key sprout reads (it takes {})",
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

/// A name: a string of 1 to [`MAX_NAME_BYTES`] bytes.
fn name(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        Some(Value::String(name)) if !name.is_empty() && name.len() <= MAX_NAME_BYTES => {
            Ok(name.clone())
        }
        other => Err(format!(
            "{what} must be a string of 1 to {MAX_NAME_BYTES} bytes, not {}",
            other.map(short).unwrap_or_else(|| "nothing".into())
        )),
    }
}

/// `"type"` of a tool or a call: absent or `"function"`.
fn function_type(obj: &Map<String, Value>, what: &str) -> Result<(), String> {
    match obj.get("type") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(t)) if t == "function" => Ok(()),
        Some(v) => Err(format!(
            "{what}.type must be \"function\", not {}",
            short(v)
        )),
    }
}

/// Tool `i`, in vLLM's `ChatCompletionToolsParam.model_dump()` shape.
fn one_tool(i: usize, tool: &Value) -> Result<Value, String> {
    let what = format!("tools[{i}]");
    let Value::Object(tool) = tool else {
        return Err(format!("{what} must be an object, not {}", short(tool)));
    };
    only_keys(tool, &["type", "function"], &what)?;
    function_type(tool, &what)?;
    let what = format!("{what}.function");
    let Some(Value::Object(function)) = tool.get("function") else {
        let given = tool
            .get("function")
            .map(short)
            .unwrap_or_else(|| "nothing".into());
        return Err(format!("{what} must be an object, not {given}"));
    };
    only_keys(
        function,
        &["name", "description", "parameters", "strict"],
        &what,
    )?;
    let name = name(function.get("name"), &format!("{what}.name"))?;
    let description = match function.get("description") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(v) => {
            return Err(format!(
                "{what}.description must be a string, not {}",
                short(v)
            ));
        }
    };
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Object(schema)) => Value::Object(schema.clone()),
        Some(v) => {
            return Err(format!(
                "{what}.parameters must be an object, not {}",
                short(v)
            ));
        }
    };
    let mut out = json!({"name": name, "description": description, "parameters": parameters});
    match function.get("strict") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(strict)) => {
            out["strict"] = Value::Bool(*strict);
        }
        Some(v) => return Err(format!("{what}.strict must be a boolean, not {}", short(v))),
    }
    Ok(json!({"type": "function", "function": out}))
}

/// `tool_choice`; `"auto"` by default when there are tools, else `"none"`.
fn tool_choice(value: Option<&Value>, has_tools: bool) -> Result<ToolChoice, ApiError> {
    let bad = |message: String| ApiError::bad("tool_choice", message);
    let structured = |what: &str| {
        bad(format!(
            "tool_choice {what} needs structured output to force a call, which sprout does \
             not have yet: use \"auto\" or \"none\""
        ))
    };
    match value {
        None if has_tools => Ok(ToolChoice::Auto),
        None => Ok(ToolChoice::None),
        Some(Value::String(s)) if s == "none" => Ok(ToolChoice::None),
        Some(Value::String(s)) if s == "auto" && has_tools => Ok(ToolChoice::Auto),
        Some(Value::String(s)) if s == "auto" => {
            Err(bad("tool_choice \"auto\" needs tools to be set".into()))
        }
        Some(Value::String(s)) if s == "required" => Err(structured("\"required\"")),
        Some(Value::Object(_)) => Err(structured("naming a function")),
        Some(v) => Err(bad(format!(
            "tool_choice must be \"none\", \"auto\", \"required\" or a named function, not {}",
            short(v)
        ))),
    }
}

/// `chat_template_kwargs`: an object of variables, none of those sprout sets.
fn kwargs(value: Option<&Value>) -> Result<Map<String, Value>, ApiError> {
    let bad = |message: String| ApiError::bad("chat_template_kwargs", message);
    let map = match value {
        None => return Ok(Map::new()),
        Some(Value::Object(map)) => map,
        Some(v) => {
            return Err(bad(format!(
                "chat_template_kwargs must be an object, not {}",
                short(v)
            )));
        }
    };
    if let Some(name) = chat_template::RESERVED
        .iter()
        .find(|n| map.contains_key(**n))
    {
        return Err(bad(format!(
            "chat_template_kwargs may not set {name}: it is set from the request"
        )));
    }
    Ok(map.clone())
}

/// Message `i`'s keys besides `role` and `content` into `message`: its name, and the
/// tool-calling and reasoning fields its role may have.
pub fn message_fields(
    i: usize,
    m: &Map<String, Value>,
    message: &mut Message,
) -> Result<(), ApiError> {
    let bad = |message: String| ApiError::bad("messages", message);
    let what = format!("messages[{i}]");
    for (key, value) in m {
        // NeMo Gym's token fields are read beside the messages (`token_prefix`).
        if MESSAGE_KEYS.contains(&key.as_str()) || MESSAGE_FIELDS.contains(&key.as_str()) {
            continue;
        }
        if ECHOED_KEYS.contains(&key.as_str()) && value.is_null() {
            continue;
        }
        let why = match ECHOED_KEYS.contains(&key.as_str()) {
            true => "sprout takes it only as null".to_string(),
            false => format!("a message's keys are {}", MESSAGE_KEYS.join(", ")),
        };
        return Err(bad(format!("{what}.{key} is not supported: {why}")));
    }
    let text = |key: &str| -> Result<Option<String>, ApiError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(bad(format!(
                "{what}.{key} must be a string, not {}",
                short(v)
            ))),
        }
    };
    let only = |key: &str, role: &str| -> Result<(), ApiError> {
        match m.get(key).is_some_and(|v| !v.is_null()) && message.role != role {
            true => Err(bad(format!(
                "{what}.{key} is for {role} messages, not {}",
                message.role
            ))),
            false => Ok(()),
        }
    };
    for key in ["tool_calls", "reasoning_content", "reasoning"] {
        only(key, "assistant")?;
    }
    only("tool_call_id", "tool")?;
    message.name = text("name")?;
    message.tool_call_id = text("tool_call_id")?;
    // vLLM's name wins over the older one.
    message.reasoning_content = text("reasoning")?.or(text("reasoning_content")?);
    message.tool_calls = match m.get("tool_calls") {
        None | Some(Value::Null) => None,
        Some(Value::Array(calls)) if calls.is_empty() => None,
        Some(Value::Array(calls)) if calls.len() > MAX_TOOLS => {
            return Err(bad(format!(
                "{what}.tool_calls holds {} calls, more than the {MAX_TOOLS} sprout takes",
                calls.len()
            )));
        }
        Some(Value::Array(calls)) => {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(j, call)| tool_call(&format!("{what}.tool_calls[{j}]"), call))
                .collect::<Result<_, _>>()
                .map_err(bad)?;
            Some(Value::Array(calls))
        }
        Some(v) => {
            return Err(bad(format!(
                "{what}.tool_calls must be a list, not {}",
                short(v)
            )));
        }
    };
    Ok(())
}

/// One call of an assistant message, its `arguments` parsed from their JSON text (as
/// vLLM does before rendering: templates print them as an object).
fn tool_call(what: &str, call: &Value) -> Result<Value, String> {
    let Value::Object(call) = call else {
        return Err(format!("{what} must be an object, not {}", short(call)));
    };
    only_keys(call, &["id", "type", "function"], what)?;
    function_type(call, what)?;
    let Some(Value::Object(function)) = call.get("function") else {
        let given = call
            .get("function")
            .map(short)
            .unwrap_or_else(|| "nothing".into());
        return Err(format!("{what}.function must be an object, not {given}"));
    };
    only_keys(
        function,
        &["name", "arguments"],
        &format!("{what}.function"),
    )?;
    let name = name(function.get("name"), &format!("{what}.function.name"))?;
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(text)) if text.is_empty() => json!({}),
        Some(Value::String(text)) => serde_json::from_str(text).map_err(|e| {
            format!(
                "{what}.function.arguments is not valid JSON ({e}): {}",
                short(&Value::String(text.clone()))
            )
        })?,
        Some(Value::Object(args)) => Value::Object(args.clone()),
        Some(v) => {
            return Err(format!(
                "{what}.function.arguments must be a JSON string or an object, not {}",
                short(v)
            ));
        }
    };
    let mut out = Map::new();
    match call.get("id") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) => {
            out.insert("id".into(), Value::String(id.clone()));
        }
        Some(v) => return Err(format!("{what}.id must be a string, not {}", short(v))),
    }
    out.insert("type".into(), json!("function"));
    out.insert(
        "function".into(),
        json!({"name": name, "arguments": arguments}),
    );
    Ok(Value::Object(out))
}

#[cfg(test)]
#[path = "chat_fields_tests.rs"]
mod tests;
