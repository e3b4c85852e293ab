//! The chat route's rendering fields read from bodies: transformers' renders of real
//! templates reached from OpenAI-shaped requests, and every wrong value a 400 naming its
//! field.

use serde::Deserialize;
use serde_json::{Value, json};
use sprout::tokenizer::chat_template::ChatTemplate;

use super::*;
use crate::cli::serve::request::ChatRequest;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chat_templates");

#[derive(Deserialize)]
struct Case {
    template: String,
    name: String,
    bos_token: String,
    eos_token: String,
    request: Map<String, Value>,
    messages: Vec<Message>,
    tools: Option<Value>,
    add_generation_prompt: bool,
    continue_final_message: bool,
    kwargs: Map<String, Value>,
    text: String,
}

fn chat(body: Value) -> Result<ChatRequest, ApiError> {
    ChatRequest::parse(&serde_json::to_vec(&body).unwrap())
}

/// Each request of `renders.json` (OpenAI's shapes: arguments as JSON strings, null
/// content beside calls, tools without descriptions) reads into what vLLM hands the
/// template, and renders to transformers' text.
#[test]
fn requests_render_as_transformers_renders_them() {
    let text = std::fs::read_to_string(format!("{FIXTURES}/renders.json")).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let cases: Vec<Case> = serde_json::from_value(document["cases"].clone()).unwrap();
    assert!(cases.len() >= 40);
    for case in cases {
        let label = format!("{} / {}", case.template, case.name);
        let request = chat(Value::Object(case.request.clone()))
            .unwrap_or_else(|e| panic!("{label}: {}", e.message));
        assert_eq!(request.messages, case.messages, "{label}");
        assert_eq!(request.render.tools, case.tools, "{label}");
        assert_eq!(request.render.kwargs, case.kwargs, "{label}");
        assert_eq!(
            (
                request.render.add_generation_prompt,
                request.render.continue_final_message
            ),
            (case.add_generation_prompt, case.continue_final_message),
            "{label}"
        );
        let expected_choice = match (case.request.get("tool_choice"), case.tools.is_some()) {
            (Some(c), _) if c == "none" => ToolChoice::None,
            (_, true) => ToolChoice::Auto,
            (_, false) => ToolChoice::None,
        };
        assert_eq!(request.tool_choice, expected_choice, "{label}");
        let source = std::fs::read_to_string(format!("{FIXTURES}/{}", case.template)).unwrap();
        let template = ChatTemplate::new(&source, &case.bos_token, &case.eos_token).unwrap();
        let rendered = template
            .render_with(&request.messages, &request.render)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(rendered, case.text, "{label}");
    }
}

fn user() -> Value {
    json!({"role": "user", "content": "hi"})
}

fn tool() -> Value {
    json!({"type": "function", "function": {"name": "f"}})
}

#[test]
fn tools_are_written_in_vllm_s_shape() {
    let r = chat(json!({"messages": [user()], "tools": [
        tool(),
        {"function": {"name": "g", "description": "d", "parameters": {"type": "object"},
                      "strict": true}},
    ]}))
    .unwrap();
    assert_eq!(
        r.render.tools,
        Some(json!([
            {"type": "function", "function": {"name": "f", "description": null,
                                              "parameters": null}},
            {"type": "function", "function": {"name": "g", "description": "d",
                                              "parameters": {"type": "object"},
                                              "strict": true}},
        ]))
    );
    assert_eq!(r.tool_choice, ToolChoice::Auto);
    let none = chat(json!({"messages": [user()], "tools": [tool()], "tool_choice": "none"}));
    let none = none.unwrap();
    // Rendered all the same, as vLLM does by default.
    assert!(none.render.tools.is_some());
    assert_eq!(none.tool_choice, ToolChoice::None);
    let plain = chat(json!({"messages": [user()]})).unwrap();
    assert_eq!(
        (plain.render.tools, plain.tool_choice),
        (None, ToolChoice::None)
    );
}

#[test]
fn message_fields_read_as_vllm_reads_them() {
    let r = chat(json!({"messages": [
        user(),
        {"role": "assistant", "content": null, "refusal": null, "function_call": null,
         "reasoning": "think", "reasoning_content": "older",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [2.5]}"}},
                        {"function": {"name": "g", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "3"},
        {"role": "assistant", "content": "x", "tool_calls": []},
    ]}))
    .unwrap();
    let call = &r.messages[1];
    assert_eq!(call.content, "");
    assert_eq!(call.reasoning_content.as_deref(), Some("think"));
    let calls = call.tool_calls.as_ref().unwrap();
    assert_eq!(
        calls,
        &json!([
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [2.5]}}},
            {"type": "function", "function": {"name": "g", "arguments": {}}},
        ])
    );
    // The arguments keep the client's key order.
    let keys: Vec<&String> = calls[0]["function"]["arguments"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["b", "a"]);
    let result = &r.messages[2];
    assert_eq!(result.tool_call_id.as_deref(), Some("c1"));
    assert_eq!(result.name.as_deref(), Some("f"));
    assert_eq!(r.messages[3].tool_calls, None);
}

#[test]
fn render_flags_and_kwargs_read() {
    let r = chat(json!({"messages": [user()], "continue_final_message": true,
                        "chat_template_kwargs": {"enable_thinking": false}}))
    .unwrap();
    // Continuing alone turns the generation prompt off.
    assert!(r.render.continue_final_message && !r.render.add_generation_prompt);
    assert_eq!(r.render.kwargs["enable_thinking"], json!(false));
    let r = chat(json!({"messages": [user()], "add_generation_prompt": false})).unwrap();
    assert!(!r.render.add_generation_prompt && !r.render.continue_final_message);
}

#[test]
fn wrong_values_are_refused_naming_the_field() {
    let with = |key: &str, value: Value| {
        let mut body = json!({"messages": [user()], "tools": [tool()]});
        body[key] = value;
        body
    };
    let assistant = |extra: Value| {
        let mut m = json!({"role": "assistant", "content": null});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        json!({"messages": [user(), m]})
    };
    let call = |arguments: Value| {
        assistant(json!({"tool_calls": [{"id": "c", "type": "function",
                                         "function": {"name": "f", "arguments": arguments}}]}))
    };
    let cases = [
        (with("tools", json!([])), "tools", "empty"),
        (with("tools", json!({"a": 1})), "tools", "a list"),
        (with("tools", json!([3])), "tools", "tools[0]"),
        (
            with(
                "tools",
                json!([{"type": "code", "function": {"name": "f"}}]),
            ),
            "tools",
            "type",
        ),
        (
            with("tools", json!([{"function": {"name": ""}}])),
            "tools",
            "name",
        ),
        (
            with("tools", json!([{"function": {"name": 3}}])),
            "tools",
            "name",
        ),
        (
            with("tools", json!([{"function": {"name": "f", "x": 1}}])),
            "tools",
            "function.x",
        ),
        (
            with(
                "tools",
                json!([{"function": {"name": "f", "parameters": "s"}}]),
            ),
            "tools",
            "parameters",
        ),
        (
            with(
                "tools",
                json!([{"function": {"name": "f", "strict": "yes"}}]),
            ),
            "tools",
            "strict",
        ),
        (
            with("tools", Value::Array(vec![tool(); MAX_TOOLS + 1])),
            "tools",
            "more than",
        ),
        (
            with("tool_choice", json!("required")),
            "tool_choice",
            "structured output",
        ),
        (
            with(
                "tool_choice",
                json!({"type": "function", "function": {"name": "f"}}),
            ),
            "tool_choice",
            "structured output",
        ),
        (
            with("tool_choice", json!("sometimes")),
            "tool_choice",
            "must be",
        ),
        (
            json!({"messages": [user()], "tool_choice": "auto"}),
            "tool_choice",
            "needs tools",
        ),
        (
            with("chat_template_kwargs", json!([1])),
            "chat_template_kwargs",
            "object",
        ),
        (
            with("chat_template_kwargs", json!({"bos_token": "x"})),
            "chat_template_kwargs",
            "bos_token",
        ),
        (
            json!({"messages": [user()], "add_generation_prompt": true,
                   "continue_final_message": true}),
            "continue_final_message",
            "both",
        ),
        (
            with("add_generation_prompt", json!("yes")),
            "add_generation_prompt",
            "boolean",
        ),
        (
            call(json!("{not json")),
            "messages",
            "messages[1].tool_calls[0].function.arguments",
        ),
        (call(json!(3)), "messages", "arguments"),
        (
            assistant(json!({"tool_calls": [{"function": {"name": "f"}, "extra": 1}]})),
            "messages",
            "tool_calls[0].extra",
        ),
        (assistant(json!({"tool_calls": "f"})), "messages", "a list"),
        (
            assistant(json!({"tool_calls": [{"id": 3, "function": {"name": "f"}}]})),
            "messages",
            "id",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "tool_calls": [tool()]}]}),
            "messages",
            "for assistant messages",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]}),
            "messages",
            "for tool messages",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]}),
            "messages",
            "tool_call_id",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "colour": "red"}]}),
            "messages",
            "messages[0].colour",
        ),
        (assistant(json!({"refusal": "no"})), "messages", "refusal"),
        (assistant(json!({"name": 3})), "messages", "name"),
    ];
    for (body, param, says) in cases {
        let e = chat(body.clone()).unwrap_err();
        assert_eq!(e.status, 400, "{body}");
        assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        assert!(
            e.message.contains(param) || param == "messages",
            "{body}: {}",
            e.message
        );
        assert!(e.message.contains(says), "{body}: {}", e.message);
    }
}
