//! `sprout serve`'s token routes end to end on the tiny Llama fixture, over real HTTP:
//! `/inference/v1/generate` whole and streamed gives the completions route's tokens and
//! log-probs bitwise, and what was drawn when aborted; `/tokenize`, `/detokenize` and the
//! render routes give the ids the generation routes run; `cache_salt` keeps prefix-cache
//! blocks apart; bad generate bodies are 400s naming the field.
//!
//! The server runs the model on the GPU: with no adapter it cannot start, and these
//! tests fail.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};

#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;
use http::{Reply, await_generated, generated, http, ok_json, post_json};
use server::Server;

/// A ChatML template (the tiny tokenizer has `<|im_start|>` and `<|im_end|>`).
const CHATML: &str = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + \
                      m['content'] + '<|im_end|>\\n' }}{% endfor %}\
                      {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const PROMPT: &str = "The quick brown fox";

fn start(extra: &[&str]) -> Server {
    Server::tiny(extra)
}

fn start_with_chat() -> Server {
    Server::tiny_with_template(CHATML, &[])
}

fn ids(v: &Value) -> Vec<u64> {
    let list = v.as_array().unwrap_or_else(|| panic!("not a list: {v}"));
    list.iter().map(|x| x.as_u64().unwrap()).collect()
}

fn bits(x: &Value) -> u32 {
    (x.as_f64().unwrap() as f32).to_bits()
}

/// A 400 naming `param` in OpenAI's error body (the context's limit is named in OpenAI's
/// own words).
fn assert_names(reply: &Reply, param: &str) {
    assert_eq!(reply.status, 400, "{param}: {}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["param"], param, "{}", reply.body);
    let says = match param {
        "max_tokens" => "maximum context length",
        _ => param,
    };
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(says), "{}", reply.body);
}

/// One choice's log-probs, as (sampled token, bits, alternatives by token).
type Logprobs = Vec<(String, u32, BTreeMap<String, u32>)>;

/// A generate choice's log-probs.
fn generate_logprobs(choice: &Value) -> Logprobs {
    let content = choice["logprobs"]["content"].as_array().unwrap();
    content
        .iter()
        .map(|e| {
            let top = e["top_logprobs"].as_array().unwrap();
            let top = top
                .iter()
                .map(|t| {
                    (
                        t["token"].as_str().unwrap().to_string(),
                        bits(&t["logprob"]),
                    )
                })
                .collect();
            (
                e["token"].as_str().unwrap().to_string(),
                bits(&e["logprob"]),
                top,
            )
        })
        .collect()
}

/// A completions choice's log-probs (asked with `return_tokens_as_token_ids`).
fn completion_logprobs(choice: &Value) -> Logprobs {
    let l = &choice["logprobs"];
    let tokens = l["tokens"].as_array().unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let top = l["top_logprobs"][i].as_object().unwrap();
            let top = top.iter().map(|(k, v)| (k.clone(), bits(v))).collect();
            (
                t.as_str().unwrap().to_string(),
                bits(&l["token_logprobs"][i]),
                top,
            )
        })
        .collect()
}

/// What a streamed generate choice adds up to.
#[derive(Default, Debug)]
struct Streamed {
    token_ids: Vec<u64>,
    logprobs: Logprobs,
    finish_reason: Option<String>,
    weights_version: Option<u64>,
    /// The chunks it came in.
    chunks: usize,
}

/// A generate stream's choices and its usage chunk; checks it ends with `[DONE]`.
fn gather(body: &str, choices: usize) -> (Vec<Streamed>, Option<Value>) {
    let payloads: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(payloads.last(), Some(&"[DONE]"), "{body}");
    let mut out: Vec<Streamed> = (0..choices).map(|_| Streamed::default()).collect();
    let mut usage = None;
    for p in &payloads[..payloads.len() - 1] {
        let chunk: Value = serde_json::from_str(p).unwrap();
        assert!(chunk["request_id"].is_string(), "{p}");
        if let Some(u) = chunk.get("usage") {
            assert_eq!(chunk["choices"], json!([]), "usage comes alone: {p}");
            usage = Some(u.clone());
        }
        for c in chunk["choices"].as_array().unwrap() {
            let s = &mut out[c["index"].as_u64().unwrap() as usize];
            assert!(s.finish_reason.is_none(), "a chunk after the last: {p}");
            s.chunks += 1;
            s.token_ids.extend(ids(&c["token_ids"]));
            if c["logprobs"].is_object() {
                s.logprobs.extend(generate_logprobs(c));
            }
            if let Some(r) = c["finish_reason"].as_str() {
                s.finish_reason = Some(r.to_string());
                s.weights_version = c["sprout"]["weights_version"].as_u64();
            }
        }
    }
    (out, usage)
}

#[test]
fn generate_whole_and_streamed_equal_the_completions_route_bitwise() {
    let server = start(&[]);
    let port = server.port;
    let prompt: Vec<u64> = vec![0, 72, 81, 90, 275, 81];
    let completion = ok_json(
        port,
        "/v1/completions",
        &json!({"prompt": prompt, "n": 3, "seed": 11, "max_tokens": 12, "logprobs": 2,
                "return_token_ids": true, "return_tokens_as_token_ids": true}),
    );
    let expected = completion["choices"].as_array().unwrap();
    let params = json!({"n": 3, "seed": 11, "max_tokens": 12, "logprobs": 2});
    let whole = ok_json(
        port,
        "/inference/v1/generate",
        &json!({"token_ids": prompt, "sampling_params": params, "request_id": "g-1"}),
    );
    assert_eq!(whole["request_id"], "g-1");
    assert!(whole["prompt_logprobs"].is_null() && whole["kv_transfer_params"].is_null());
    assert_eq!(whole["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(
        whole["usage"]["completion_tokens"],
        completion["usage"]["completion_tokens"]
    );
    let choices = whole["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (k, (g, c)) in choices.iter().zip(expected).enumerate() {
        assert_eq!(g["index"], k);
        assert_eq!(ids(&g["token_ids"]), ids(&c["token_ids"]), "sample {k}");
        assert_eq!(g["finish_reason"], c["finish_reason"], "sample {k}");
        let logprobs = generate_logprobs(g);
        assert_eq!(logprobs, completion_logprobs(c), "sample {k}");
        assert_eq!(logprobs.len(), ids(&g["token_ids"]).len());
        for (token, _, top) in &logprobs {
            assert!(token.starts_with("token_id:"), "{token}");
            assert_eq!(top.len(), 2, "k alternatives: {g}");
        }
        assert_eq!(
            g["sprout"]["weights_version"],
            c["sprout"]["weights_version"]
        );
        assert!(g["sprout"]["weights_version"].is_u64(), "{g}");
    }

    // Streamed: per token, with log-probs or without; usage then [DONE].
    for logprobs in [false, true] {
        let mut params = params.clone();
        if !logprobs {
            params["logprobs"] = Value::Null;
        }
        let body = json!({"token_ids": prompt, "sampling_params": params, "stream": true,
                          "stream_options": {"include_usage": true}});
        let reply = post_json(port, "/inference/v1/generate", &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let (streamed, usage) = gather(&reply.body, 3);
        for (k, (s, g)) in streamed.iter().zip(choices).enumerate() {
            assert_eq!(s.token_ids, ids(&g["token_ids"]), "sample {k}");
            assert_eq!(s.finish_reason.as_deref(), g["finish_reason"].as_str());
            assert_eq!(s.weights_version, g["sprout"]["weights_version"].as_u64());
            // Each token is its own delta, with its log-prob and alternatives when asked.
            assert!(s.chunks >= s.token_ids.len(), "sample {k}: {s:?}");
            if logprobs {
                assert_eq!(s.logprobs, generate_logprobs(g), "sample {k}");
            }
        }
        assert_eq!(
            usage.unwrap()["completion_tokens"],
            whole["usage"]["completion_tokens"]
        );
    }
}

/// Checks an aborted choice: some tokens, fewer than asked, each with its log-prob.
fn assert_partial(token_ids: &[u64], logprobs: usize, reason: Option<&str>, max: usize) {
    assert_eq!(reason, Some("abort"));
    assert!(
        !token_ids.is_empty() && token_ids.len() < max,
        "{token_ids:?}"
    );
    assert_eq!(logprobs, token_ids.len());
}

/// Streams `body`, runs `cut` once tokens come, and checks the stream ends with what was
/// drawn.
fn assert_stream_cut(port: u16, body: &Value, max: usize, cut: impl FnOnce()) {
    let before = generated(port);
    let body = body.clone();
    let streaming = std::thread::spawn(move || post_json(port, "/inference/v1/generate", &body));
    await_generated(port, before);
    cut();
    let reply = streaming.join().unwrap();
    let (streamed, _) = gather(&reply.body, 1);
    let s = &streamed[0];
    let reason = s.finish_reason.as_deref();
    assert_partial(&s.token_ids, s.logprobs.len(), reason, max);
}

#[test]
fn an_aborted_generation_returns_what_was_drawn_whole_and_streamed_and_at_exit() {
    let server = start(&[]);
    let port = server.port;
    let max = 240;
    let request = |stream: bool, id: &str| {
        json!({"token_ids": [0, 72, 81, 90], "request_id": id, "stream": stream,
               "sampling_params": {"max_tokens": max, "ignore_eos": true, "logprobs": 0}})
    };
    // By id, streamed.
    assert_stream_cut(port, &request(true, "long-stream"), max, || {
        let body = br#"{"request_ids": ["long-stream"]}"#;
        let aborted = http(port, "POST", "/abort_requests", &[], body);
        assert_eq!(aborted.status, 200, "{}", aborted.body);
    });

    // By a pause that aborts, whole.
    let before = generated(port);
    let body = request(false, "long-whole");
    let running = std::thread::spawn(move || post_json(port, "/inference/v1/generate", &body));
    await_generated(port, before);
    let paused = http(port, "POST", "/pause?mode=abort", &[], b"");
    assert_eq!(paused.status, 200, "{}", paused.body);
    let whole = running.join().unwrap();
    assert_eq!(whole.status, 200, "{}", whole.body);
    let c = &whole.json()["choices"][0];
    let logprobs = generate_logprobs(c).len();
    assert_partial(
        &ids(&c["token_ids"]),
        logprobs,
        c["finish_reason"].as_str(),
        max,
    );
    assert_eq!(http(port, "POST", "/resume", &[], b"").status, 200);
    // The server goes on serving.
    let after = ok_json(port, "/inference/v1/generate", &request(false, "after"));
    assert_eq!(after["choices"][0]["finish_reason"], "length");

    // By SIGTERM, streamed: the client gets what was drawn, and the server exits 0.
    let mut server = server;
    let pid = server.child.id().to_string();
    assert_stream_cut(port, &request(true, "at-exit"), max, || {
        let kill = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(kill.unwrap().success());
    });
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
}

#[test]
fn tokenize_detokenize_and_render_give_the_ids_the_routes_run() {
    let server = start_with_chat();
    let port = server.port;
    // Text: with and without the tokenizer's BOS, and back.
    let t = ok_json(
        port,
        "/tokenize",
        &json!({"prompt": PROMPT, "return_token_strs": true}),
    );
    let tokens = ids(&t["tokens"]);
    assert_eq!(t["count"], tokens.len());
    assert_eq!(t["max_model_len"], 256);
    assert_eq!(tokens[0], 0, "BOS first: {t}");
    assert_eq!(t["token_strs"].as_array().unwrap().len(), tokens.len());
    assert_eq!(t["token_strs"][0], "<|begin_of_text|>");
    let plain = ok_json(
        port,
        "/tokenize",
        &json!({"prompt": PROMPT, "add_special_tokens": false}),
    );
    assert_eq!(ids(&plain["tokens"]), tokens[1..]);
    assert!(plain["token_strs"].is_null());
    let text = ok_json(port, "/detokenize", &json!({"tokens": plain["tokens"]}));
    assert_eq!(text["prompt"], PROMPT);
    // The completions route runs the same ids.
    let completion = ok_json(
        port,
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": 1, "return_token_ids": true}),
    );
    assert_eq!(ids(&completion["choices"][0]["prompt_token_ids"]), tokens);

    // Chat: tokenize, render and the chat route agree on the prompt's ids.
    let messages = json!([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Say something"}]);
    let chat_body = json!({"messages": messages, "n": 2, "seed": 5, "max_tokens": 8,
                           "logprobs": true, "top_logprobs": 1, "return_token_ids": true,
                           "prompt_logprobs": 2, "return_tokens_as_token_ids": true});
    let chat = ok_json(port, "/v1/chat/completions", &chat_body);
    let prompt = ids(&chat["prompt_token_ids"]);
    let t = ok_json(port, "/tokenize", &json!({"messages": messages}));
    assert_eq!(ids(&t["tokens"]), prompt);
    let rendered = ok_json(port, "/v1/chat/completions/render", &chat_body);
    assert_eq!(ids(&rendered["token_ids"]), prompt);
    assert_eq!(
        rendered["prompt"],
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay something<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let params = &rendered["sampling_params"];
    assert_eq!(
        (params["n"].as_u64(), params["seed"].as_u64()),
        (Some(2), Some(5))
    );
    assert_eq!(
        (params["max_tokens"].as_u64(), params["logprobs"].as_u64()),
        (Some(8), Some(1))
    );
    assert_eq!(rendered["priority"], 0);
    // Rendered, then generated: the chat route's samples, bitwise.
    let body = json!({"token_ids": rendered["token_ids"],
                      "sampling_params": rendered["sampling_params"]});
    let generated = ok_json(port, "/inference/v1/generate", &body);
    assert_eq!(rendered["sampling_params"]["prompt_logprobs"], 2);
    assert!(chat["prompt_logprobs"].is_array(), "{chat}");
    assert_eq!(generated["prompt_logprobs"], chat["prompt_logprobs"]);
    let chat_choices = chat["choices"].as_array().unwrap();
    for (g, c) in generated["choices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(chat_choices)
    {
        assert_eq!(ids(&g["token_ids"]), ids(&c["token_ids"]));
        let chat_bits: Vec<u32> = c["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| bits(&e["logprob"]))
            .collect();
        let generate_bits: Vec<u32> = generate_logprobs(g).iter().map(|e| e.1).collect();
        assert_eq!(generate_bits, chat_bits);
    }

    // Completions render: one generate request per prompt.
    let all = ok_json(
        port,
        "/v1/completions/render",
        &json!({"prompt": [PROMPT, "hello"], "max_tokens": 3, "request_id": "r"}),
    );
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(ids(&all[0]["token_ids"]), tokens);
    assert_eq!(all[0]["sampling_params"]["max_tokens"], 3);
    assert_eq!(
        (&all[0]["request_id"], &all[1]["request_id"]),
        (&json!("r"), &json!("r-1"))
    );

    // Refusals name their field.
    let refusals = [
        ("/detokenize", json!({"tokens": [1, 1_000_000]}), "tokens"),
        ("/detokenize", json!({"tokens": "x"}), "tokens"),
        ("/tokenize", json!({"prompt": 3}), "prompt"),
        (
            "/tokenize",
            json!({"messages": messages, "chat_template": "x"}),
            "chat_template",
        ),
        (
            "/tokenize",
            json!({"messages": messages, "tools": [{"type": "function"}]}),
            "tools",
        ),
        (
            "/tokenize",
            json!({"messages": messages, "continue_final_message": true,
                   "add_generation_prompt": true}),
            "continue_final_message",
        ),
        (
            "/v1/chat/completions/render",
            json!({"messages": messages, "temperature": "hot"}),
            "temperature",
        ),
    ];
    for (path, body, param) in refusals {
        assert_names(&post_json(port, path, &body), param);
    }
}

/// The cached prompt tokens of a completion of `prompt` with `salt`.
fn cached(port: u16, prompt: &str, salt: Option<&str>) -> u64 {
    let mut body = json!({"prompt": prompt, "max_tokens": 1});
    if let Some(salt) = salt {
        body["cache_salt"] = json!(salt);
    }
    let reply = ok_json(port, "/v1/completions", &body);
    reply["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

#[test]
fn a_cache_salt_shares_prefix_blocks_only_within_the_salt() {
    let server = start_with_chat();
    let port = server.port;
    // Long enough for full blocks.
    let prompt = PROMPT.repeat(8);
    assert_eq!(cached(port, &prompt, None), 0);
    assert_eq!(
        cached(port, &prompt, Some("A")),
        0,
        "a salt is apart from no salt"
    );
    assert!(
        cached(port, &prompt, Some("A")) > 0,
        "the same salt hits the cache"
    );
    assert_eq!(
        cached(port, &prompt, Some("B")),
        0,
        "another salt misses it"
    );
    assert!(
        cached(port, &prompt, None) > 0,
        "no salt still hits its own blocks"
    );

    // Generate and chat salt the same cache.
    let t = ok_json(port, "/tokenize", &json!({"prompt": prompt}));
    let generate = |salt: &str| {
        let body = json!({"token_ids": t["tokens"], "cache_salt": salt,
                          "sampling_params": {"max_tokens": 1}});
        let reply = ok_json(port, "/inference/v1/generate", &body);
        reply["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };
    assert!(
        generate("B") > 0,
        "generate shares the completions route's salted blocks"
    );
    assert_eq!(generate("C"), 0);
    let content = PROMPT.repeat(8);
    let chat = |salt: &str| {
        let body = json!({"messages": [{"role": "user", "content": content}],
                          "max_tokens": 1, "cache_salt": salt});
        let reply = ok_json(port, "/v1/chat/completions", &body);
        reply["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(chat("D"), 0);
    assert!(chat("D") > 0);
    assert_eq!(chat("E"), 0);
    for (path, body) in [
        ("/v1/completions", json!({"prompt": "x", "cache_salt": ""})),
        (
            "/v1/completions",
            json!({"prompt": "x", "cache_salt": "s".repeat(1025)}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
                                        "cache_salt": 1}),
        ),
    ] {
        assert_names(&post_json(port, path, &body), "cache_salt");
    }
}

#[test]
fn bad_generate_bodies_are_400s_naming_the_field_and_the_key_guards_the_routes() {
    let server = start(&["--api-key", "k"]);
    let port = server.port;
    let key = ["Authorization: Bearer k"];
    let send = |body: &Value| {
        http(
            port,
            "POST",
            "/inference/v1/generate",
            &key,
            body.to_string().as_bytes(),
        )
    };
    let cases = [
        (json!({"sampling_params": {"max_tokens": 2}}), "token_ids"),
        (json!({"token_ids": [1, 1_000_000]}), "token_ids"),
        (json!({"token_ids": [1, 384]}), "token_ids"),
        (json!({"token_ids": [1, -2]}), "token_ids"),
        (json!({"token_ids": "The quick"}), "token_ids"),
        (
            json!({"token_ids": [1], "sampling_params": []}),
            "sampling_params",
        ),
        (
            json!({"token_ids": [1], "sampling_params": {"temperature": "hot"}}),
            "temperature",
        ),
        (
            json!({"token_ids": [1], "sampling_params": {"max_tokens": 1000}}),
            "max_tokens",
        ),
        (
            json!({"token_ids": [1], "sampling_params": {"logprobs": 21}}),
            "logprobs",
        ),
        (
            json!({"token_ids": [1], "sampling_params": {"prompt_logprobs": 21}}),
            "prompt_logprobs",
        ),
        (
            json!({"token_ids": [1, 2], "stream": true, "sampling_params": {"prompt_logprobs": 1}}),
            "prompt_logprobs",
        ),
        (
            json!({"token_ids": [1], "sampling_params": {"structured_outputs": {"regex": "a"}}}),
            "structured_outputs",
        ),
        (
            json!({"token_ids": [1], "sampling_params": {"extra_args": {"x": 1}}}),
            "extra_args",
        ),
        (json!({"token_ids": [1], "temperature": 0.5}), "temperature"),
        (json!({"token_ids": [1], "priority": 2}), "priority"),
        (
            json!({"token_ids": [1], "kv_transfer_params": {"x": 1}}),
            "kv_transfer_params",
        ),
    ];
    for (body, param) in cases {
        assert_names(&send(&body), param);
    }
    let model = send(&json!({"token_ids": [1], "model": "other"}));
    assert_eq!(model.status, 404, "{}", model.body);
    // Null is absence; keys no API defines are ignored.
    let fine = json!({"token_ids": [1, 2], "priority": 0, "kv_transfer_params": null,
                      "sampling_params": {"max_tokens": 2, "output_kind": 1,
                                          "detokenize": false, "no_such_key": 1}});
    let reply = send(&fine);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["usage"]["completion_tokens"], 2);
    // The API key guards the token routes as it guards /v1.
    for path in [
        "/inference/v1/generate",
        "/tokenize",
        "/detokenize",
        "/v1/chat/completions/render",
        "/v1/completions/render",
    ] {
        let reply = post_json(port, path, &json!({}));
        assert_eq!(reply.status, 401, "{path}: {}", reply.body);
    }
}
