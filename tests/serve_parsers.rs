//! `sprout serve`'s reply parsers over HTTP on the tiny Llama fixture: the flags start a
//! server or are refused at start, and a chat reply through `--reasoning-parser` holds
//! the sampled text as its reasoning, whole and streamed alike, with the tokens the
//! completion of the same prompt draws. (The tiny model never writes a tool call; the
//! parsers' shapes are the unit tests' in `src/cli/serve/`.)
//!
//! The server runs the model on the GPU: with no adapter it cannot start, and these
//! tests fail.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;
use http::{ok_json, post_json};
use server::Server;

/// `sprout serve` on the tiny model with `extra` flags, run to its end.
fn serve_output(extra: &[&str]) -> std::process::Output {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
    Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn parser_flags_that_cannot_work_are_refused_at_start() {
    let out = serve_output(&["--enable-auto-tool-choice"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--enable-auto-tool-choice requires --tool-call-parser"),
        "{stderr}"
    );
    for (flag, names) in [
        ("--tool-call-parser", "hermes, llama3_json"),
        ("--reasoning-parser", "qwen3, deepseek_r1"),
    ] {
        let out = serve_output(&[flag, "mistral"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("invalid value 'mistral'"), "{stderr}");
        assert!(stderr.contains(names), "{flag}: {stderr}");
    }
}

/// A ChatML template (SmolLM2-Instruct's, without its default system prompt).
const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + \
                      message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}\
                      {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#[test]
fn a_reasoning_parser_splits_chat_replies_whole_and_streamed_alike() {
    let server = Server::tiny_with_template(
        CHATML,
        &[
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--reasoning-parser",
            "deepseek_r1",
        ],
    );
    let port = server.port;
    let request = json!({"messages": [{"role": "user", "content": "Think."}],
                         "n": 2, "seed": 5, "max_tokens": 8, "return_token_ids": true});
    let chat = ok_json(port, "/v1/chat/completions", &request);
    let prompt = "<|im_start|>user\nThink.<|im_end|>\n<|im_start|>assistant\n";
    let completion = ok_json(
        port,
        "/v1/completions",
        &json!({"prompt": prompt, "n": 2, "seed": 5, "max_tokens": 8, "return_token_ids": true}),
    );
    let choices = chat["choices"].as_array().unwrap();
    for (c, t) in choices
        .iter()
        .zip(completion["choices"].as_array().unwrap())
    {
        // The parser shapes the text only: the same tokens and reason as the completion.
        assert_eq!(c["token_ids"], t["token_ids"]);
        assert_eq!(c["finish_reason"], t["finish_reason"]);
        let text = t["text"].as_str().unwrap();
        let message = &c["message"];
        // deepseek_r1: what comes before `</think>` is reasoning (all of it, without one).
        // An opening tag at the start (after whitespace) is dropped.
        let opened = text.trim_start().strip_prefix("<think>").unwrap_or(text);
        let (reasoning, content) = opened.split_once("</think>").unwrap_or((opened, ""));
        assert_eq!(
            message["reasoning_content"].as_str().unwrap_or(""),
            reasoning,
            "{c}"
        );
        assert_eq!(message["reasoning"], message["reasoning_content"]);
        assert_eq!(message["content"].as_str().unwrap_or(""), content, "{c}");
        assert!(message.get("tool_calls").is_none(), "no tools asked: {c}");
    }

    let mut body = request.clone();
    body["stream"] = json!(true);
    let reply = post_json(port, "/v1/chat/completions", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let mut reasoning = vec![String::new(); 2];
    let mut content = vec![String::new(); 2];
    let mut finish = vec![Value::Null; 2];
    for line in reply.body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(line).unwrap();
        for c in chunk["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            let delta = &c["delta"];
            reasoning[i].push_str(delta["reasoning_content"].as_str().unwrap_or(""));
            content[i].push_str(delta["content"].as_str().unwrap());
            if !c["finish_reason"].is_null() {
                finish[i] = c["finish_reason"].clone();
            }
        }
    }
    for (i, c) in choices.iter().enumerate() {
        let message = &c["message"];
        assert_eq!(
            reasoning[i],
            message["reasoning_content"].as_str().unwrap_or("")
        );
        assert_eq!(content[i], message["content"].as_str().unwrap_or(""));
        assert_eq!(finish[i], c["finish_reason"]);
    }
}
