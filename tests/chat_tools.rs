//! Chat templates with tools render byte for byte as transformers renders them: every case
//! of `tests/fixtures/chat_templates/renders.json` (made by
//! `scripts/make_template_fixtures.py` with transformers' `apply_chat_template`: Qwen2.5,
//! Qwen3 and Llama 3.2's real templates; tools, tool calls and results, reasoning of
//! earlier turns, `enable_thinking`, no generation prompt, a continued final message)
//! rendered through `ChatTemplate::render_with` with the same inputs gives the same text;
//! and over HTTP, `/v1/chat/completions/render`, `/tokenize` and the chat route render a
//! request with tools, calls and kwargs the same, through the server's template.
//!
//! The server test runs the model on the GPU: with no adapter it cannot start, and it
//! fails.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};
use sprout::tokenizer::chat_template::{ChatTemplate, Message, RenderOptions};

#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;
use http::{ok_json, post_json};
use server::Server;

#[derive(Deserialize)]
struct Renders {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    template: String,
    name: String,
    bos_token: String,
    eos_token: String,
    messages: Vec<Message>,
    tools: Option<serde_json::Value>,
    add_generation_prompt: bool,
    continue_final_message: bool,
    kwargs: serde_json::Map<String, serde_json::Value>,
    text: String,
}

fn fixtures() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chat_templates"
    ))
}

fn renders() -> Vec<Case> {
    let text = std::fs::read_to_string(fixtures().join("renders.json")).unwrap();
    serde_json::from_str::<Renders>(&text).unwrap().cases
}

#[test]
fn every_case_renders_as_transformers_renders_it() {
    let cases = renders();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let source = std::fs::read_to_string(fixtures().join(&case.template)).unwrap();
        let template = ChatTemplate::new(&source, &case.bos_token, &case.eos_token).unwrap();
        let options = RenderOptions {
            tools: case.tools.clone(),
            add_generation_prompt: case.add_generation_prompt,
            continue_final_message: case.continue_final_message,
            kwargs: case.kwargs.clone(),
        };
        let label = format!("{} / {}", case.template, case.name);
        match template.render_with(&case.messages, &options) {
            Ok(text) if text == case.text => {}
            Ok(text) => failures.push(format!(
                "{label}: differs\n--- transformers\n{}\n--- sprout\n{text}",
                case.text
            )),
            Err(e) => failures.push(format!("{label}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The fixtures hold what the tests need: the three families, tools in the text, a tool
/// call's arguments printed from an object, the thinking switch, a date from kwargs.
#[test]
fn the_fixtures_cover_the_cases_they_name() {
    let cases = renders();
    let find = |template: &str, name: &str| {
        cases
            .iter()
            .find(|c| c.template == template && c.name == name)
            .unwrap_or_else(|| panic!("no case {template} / {name}"))
    };
    for template in [
        "qwen2.5-7b-instruct.jinja",
        "qwen3-0.6b.jinja",
        "qwen3.jinja",
        "llama-3.2-3b-instruct.jinja",
    ] {
        let episode = find(template, "tool_episode");
        assert!(episode.text.contains("get_weather"), "{template}");
        assert!(episode.text.contains("\"city\": \"Paris\""), "{template}");
        assert!(find(template, "plain").tools.is_none());
    }
    let llama = find("llama-3.2-3b-instruct.jinja", "plain");
    assert!(
        llama.text.contains("Today Date: 15 Mar 2025"),
        "{}",
        llama.text
    );
    let off = find("qwen3-0.6b.jinja", "thinking_off");
    let on = find("qwen3-0.6b.jinja", "thinking_on");
    assert!(off.text.ends_with("<think>\n\n</think>\n\n") && !on.text.contains("<think>"));
}

/// Without `date_string`, Llama 3.2's template asks `strftime_now` for today's date, as
/// transformers gives it: the text names a date in the template's format.
#[test]
fn llama_s_date_comes_from_strftime_now() {
    let source = std::fs::read_to_string(fixtures().join("llama-3.2-3b-instruct.jinja")).unwrap();
    let template = ChatTemplate::new(&source, "<|begin_of_text|>", "<|eot_id|>").unwrap();
    let text = template.render(&[Message::new("user", "hi")]).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Today Date: "))
        .unwrap();
    let parts: Vec<&str> = line.split(' ').collect();
    assert_eq!(parts.len(), 3, "{line}");
    assert!(
        parts[0].len() == 2 && parts[0].parse::<u32>().is_ok(),
        "{line}"
    );
    assert_ne!(line, "26 Jul 2024", "the template's fallback, not today");
    assert!(parts[2].parse::<u32>().unwrap() >= 2025, "{line}");
}

/// A template short enough for the tiny model's 256 positions that prints what a
/// tool-calling template prints: the tools' schemas and the calls' arguments with
/// `tojson`, the results' call ids, a kwarg.
const TOOLS_TEMPLATE: &str = "{% if tools %}{% for t in tools %}{{ t.function.name }}\
    {{ t.function.parameters | tojson }}{{ t.function.description | tojson }};{% endfor %}\n\
    {% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls \
    or [] %}[{{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}\
    {% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% endfor %}\
    {% if add_generation_prompt %}<assistant>{% endif %}{% if enable_thinking is false %}\
    /no_think{% endif %}";

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn the_routes_render_tools_calls_and_kwargs_through_the_server_s_template() {
    // Tools with tool_choice "auto" (their default) need a server that parses calls.
    let parsing = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"];
    let server = Server::tiny_with_template(TOOLS_TEMPLATE, &parsing);
    let port = server.port;
    let messages = json!([
        {"role": "user", "content": "sum?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "add", "arguments": "{\"b\": 2, \"a\": 1.0}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]);
    let tools = json!([{"type": "function", "function": {"name": "add",
        "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}}]);
    let kwargs = json!({"enable_thinking": false});
    let body = json!({"messages": messages, "tools": tools, "chat_template_kwargs": kwargs,
                      "max_tokens": 1, "return_token_ids": true});
    let rendered = ok_json(port, "/v1/chat/completions/render", &body);
    assert_eq!(
        rendered["prompt"],
        // The newline after `{% endfor %}` goes, as trim_blocks has it in transformers.
        "add{\"type\": \"object\", \"properties\": {\"b\": {}, \"a\": {}}}null;\
         <user>sum?<assistant>[add {\"b\": 2, \"a\": 1.0}]<tool>3#c1<assistant>/no_think"
    );
    let tokenized = ok_json(
        port,
        "/tokenize",
        &json!({"messages": messages, "tools": tools, "chat_template_kwargs": kwargs}),
    );
    assert_eq!(ids(&tokenized["tokens"]), ids(&rendered["token_ids"]));
    let chat = ok_json(port, "/v1/chat/completions", &body);
    assert_eq!(ids(&chat["prompt_token_ids"]), ids(&rendered["token_ids"]));
    // A prefill: the last message left open, no generation prompt.
    let prefill = json!({"messages": [{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "Hel"}],
                         "continue_final_message": true});
    let rendered = ok_json(port, "/v1/chat/completions/render", &prefill);
    assert_eq!(rendered["prompt"], "<user>hi<assistant>Hel");
    // Refusals name their field.
    let refused = [
        (
            json!({"messages": messages, "tools": tools, "tool_choice": "required"}),
            "tool_choice",
        ),
        (json!({"messages": messages, "tools": []}), "tools"),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"function":
            {"name": "f", "arguments": "{"}}]}]}),
            "messages",
        ),
        (
            json!({"messages": messages, "chat_template_kwargs": {"tools": 1}}),
            "chat_template_kwargs",
        ),
    ];
    for (body, param) in refused {
        for path in [
            "/v1/chat/completions",
            "/v1/chat/completions/render",
            "/tokenize",
        ] {
            let reply = post_json(port, path, &body);
            assert_eq!(reply.status, 400, "{path} {body}: {}", reply.body);
            assert_eq!(
                reply.json()["error"]["param"],
                param,
                "{path}: {}",
                reply.body
            );
        }
    }
}
