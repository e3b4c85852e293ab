//! `sprout serve` end to end on the tiny Llama fixture, over real HTTP on the loopback:
//! completions whole and streamed equal `sprout rollout`'s samples bitwise, bad requests
//! get their status and OpenAI's error body, a client that leaves mid-stream has its
//! request aborted and its blocks freed, and SIGTERM ends the server with exit code 0.
//!
//! The server runs the model on the GPU: with no adapter it cannot start, and these
//! tests fail.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "serve_cases/fields.rs"]
mod fields;
#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;
use http::{Reply, generated, http, parse_reply, request_bytes};
use server::Server;

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

impl Server {
    /// Starts the server on the tiny model on a free port and waits until it listens.
    fn start(extra: &[&str]) -> Server {
        Server::start_on(&tiny_llama(), extra)
    }

    /// Starts the server on `model` on a free port and waits until it listens.
    fn start_on(model: &Path, extra: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
        command
            .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
            .args(extra);
        Server::spawn(command)
    }

    /// Sends SIGTERM and waits for the exit; its exit code.
    fn terminate(mut self) -> Option<i32> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the server did not exit within 60 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn post(port: u16, body: &Value) -> Reply {
    post_to(port, "/v1/completions", body)
}

fn post_to(port: u16, path: &str, body: &Value) -> Reply {
    http(port, "POST", path, &[], body.to_string().as_bytes())
}

/// The `data:` payloads of an event stream, `[DONE]` included.
fn events(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// A list of JSON numbers as f32 bits (for bitwise comparison).
fn bits(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| (x.as_f64().unwrap() as f32).to_bits())
        .collect()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

const PROMPT: &str = "The quick brown fox";

/// What a streamed choice adds up to.
#[derive(Default, Debug)]
struct Streamed {
    text: String,
    token_ids: Vec<u64>,
    token_logprobs: Vec<u32>,
    finish_reason: Option<String>,
}

fn gather_stream(body: &str, choices: usize) -> (Vec<Streamed>, Option<Value>) {
    let payloads = events(body);
    assert_eq!(
        payloads.last().map(String::as_str),
        Some("[DONE]"),
        "{body}"
    );
    let mut out: Vec<Streamed> = (0..choices).map(|_| Streamed::default()).collect();
    let mut usage = None;
    for p in &payloads[..payloads.len() - 1] {
        let chunk: Value = serde_json::from_str(p).unwrap();
        assert_eq!(chunk["object"], "text_completion", "{p}");
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
        for c in chunk["choices"].as_array().unwrap() {
            let s = &mut out[c["index"].as_u64().unwrap() as usize];
            assert!(s.finish_reason.is_none(), "a chunk after the last: {p}");
            s.text.push_str(c["text"].as_str().unwrap());
            if let Some(t) = c.get("token_ids") {
                s.token_ids.extend(ids(t));
            }
            if c["logprobs"].is_object() {
                s.token_logprobs
                    .extend(bits(&c["logprobs"]["token_logprobs"]));
            }
            if let Some(r) = c["finish_reason"].as_str() {
                s.finish_reason = Some(r.to_string());
            }
        }
    }
    (out, usage)
}

#[test]
fn completions_whole_and_streamed_equal_the_rollout_command_bitwise() {
    let server = Server::start(&[]);
    let port = server.port;
    // Unseeded traffic shares the batch with the seeded requests below.
    let busy = std::thread::spawn(move || {
        let body = json!({"prompt": "Other traffic in the batch", "n": 3, "max_tokens": 40,
                          "ignore_eos": true});
        post(port, &body)
    });
    let request = json!({"prompt": PROMPT, "n": 4, "seed": 1, "max_tokens": 8,
                         "return_token_ids": true, "logprobs": 1});
    let reply = post(port, &request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let whole = reply.json();
    assert_eq!(whole["object"], "text_completion");
    let choices = whole["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);

    let out = std::env::temp_dir().join(format!("sprout-serve-{}.jsonl", std::process::id()));
    let model = tiny_llama();
    let status = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args([
            "rollout",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            PROMPT,
        ])
        .args(["-n", "4", "--seed", "1", "--max-tokens", "8", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let records: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let _ = std::fs::remove_file(&out);
    assert_eq!(records.len(), 4);

    let mut completion_tokens = 0;
    for (k, (c, r)) in choices.iter().zip(&records).enumerate() {
        assert_eq!(c["index"], k);
        assert_eq!(ids(&c["token_ids"]), ids(&r["token_ids"]), "sample {k}");
        assert_eq!(ids(&c["prompt_token_ids"]), ids(&r["prompt_token_ids"]));
        assert_eq!(
            bits(&c["sprout"]["logprobs"]),
            bits(&r["logprobs"]),
            "sample {k}"
        );
        let lp = &c["logprobs"];
        assert_eq!(
            bits(&lp["token_logprobs"]),
            bits(&r["logprobs"]),
            "sample {k}"
        );
        let n = r["token_ids"].as_array().unwrap().len();
        assert!(n > 0);
        completion_tokens += n;
        assert_eq!(lp["tokens"].as_array().unwrap().len(), n);
        assert_eq!(lp["text_offset"].as_array().unwrap().len(), n);
        for top in lp["top_logprobs"].as_array().unwrap() {
            assert_eq!(top.as_object().unwrap().len(), 1, "{top}");
        }
        assert_eq!(c["text"], r["text"]);
        assert_eq!(c["finish_reason"], r["finish_reason"]);
        assert_eq!(c["sprout"]["weights_version"], 0);
    }
    let usage = &whole["usage"];
    let prompt_tokens = records[0]["prompt_token_ids"].as_array().unwrap().len();
    assert_eq!(usage["prompt_tokens"], prompt_tokens);
    assert_eq!(usage["completion_tokens"], completion_tokens);
    assert_eq!(usage["total_tokens"], prompt_tokens + completion_tokens);

    // Streamed, with and without log-probs (tokens sent as drawn, or per sample).
    for logprobs in [Some(1), None] {
        let mut body = request.clone();
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        body["logprobs"] = json!(logprobs);
        let reply = post(port, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            reply
                .header("content-type")
                .unwrap()
                .starts_with("text/event-stream")
        );
        let (streamed, usage) = gather_stream(&reply.body, 4);
        for (s, r) in streamed.iter().zip(&records) {
            assert_eq!(s.token_ids, ids(&r["token_ids"]), "{logprobs:?}");
            assert_eq!(s.text, r["text"].as_str().unwrap(), "{logprobs:?}");
            assert_eq!(s.finish_reason.as_deref(), r["finish_reason"].as_str());
            if logprobs.is_some() {
                assert_eq!(s.token_logprobs, bits(&r["logprobs"]));
            }
        }
        assert_eq!(usage.unwrap()["completion_tokens"], completion_tokens);
    }

    // Two prompts: choices are indexed prompt * n + sample, each prompt keyed alike.
    let two = json!({"prompt": [PROMPT, "Another prompt"], "n": 4, "seed": 1, "max_tokens": 8,
                     "return_token_ids": true});
    let reply = post(port, &two);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let choices = reply.json()["choices"].as_array().unwrap().clone();
    assert_eq!(choices.len(), 8);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    for (c, r) in choices[..4].iter().zip(&records) {
        assert_eq!(ids(&c["token_ids"]), ids(&r["token_ids"]));
    }
    // A stop string from a sample's text: that sample is cut before it, whole and streamed.
    let texts: Vec<&str> = records
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    let (k, stop) = stop_string_of(&texts);
    let full = records[k]["text"].as_str().unwrap();
    let cut = &full[..full.find(&stop).unwrap()];
    let mut body = json!({"prompt": PROMPT, "n": 4, "seed": 1, "max_tokens": 8, "stop": stop});
    let whole = post(port, &body).json();
    let c = &whole["choices"][k];
    assert_eq!(c["text"], cut, "{whole}");
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(c["sprout"]["stop_string"], stop.as_str());
    body["stream"] = json!(true);
    let (streamed, _) = gather_stream(&post(port, &body).body, 4);
    for (s, c) in streamed.iter().zip(whole["choices"].as_array().unwrap()) {
        assert_eq!(s.text, c["text"].as_str().unwrap());
        assert_eq!(s.finish_reason.as_deref(), c["finish_reason"].as_str());
    }

    let busy = busy.join().unwrap();
    assert_eq!(busy.status, 200, "{}", busy.body);
    assert_eq!(busy.json()["choices"].as_array().unwrap().len(), 3);
}

/// Runs `sprout serve` on the tiny model with `extra` flags to its end (for a server that
/// must refuse to start).
fn serve_output(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args([
            "serve",
            "--model",
            tiny_llama().to_str().unwrap(),
            "--port",
            "0",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// A stop string found in one of `texts` (not at its start): the text's index and two
/// ASCII letters or digits in a row.
fn stop_string_of(texts: &[&str]) -> (usize, String) {
    texts
        .iter()
        .enumerate()
        .find_map(|(k, text)| {
            let chars: Vec<char> = text.chars().collect();
            chars
                .windows(2)
                .skip(1)
                .find(|w| w.iter().all(char::is_ascii_alphanumeric))
                .map(|w| (k, w.iter().collect::<String>()))
        })
        .expect("a sample with two ASCII letters or digits in a row")
}

/// A ChatML template (SmolLM2-Instruct's, without its default system prompt).
const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + \
                      message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}\
                      {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// What a streamed chat choice adds up to.
#[derive(Default, Debug)]
struct StreamedChat {
    role: Option<String>,
    content: String,
    token_ids: Vec<u64>,
    logprobs: Vec<u32>,
    finish_reason: Option<String>,
}

fn gather_chat_stream(body: &str, choices: usize) -> (Vec<StreamedChat>, Option<Value>) {
    let payloads = events(body);
    assert_eq!(
        payloads.last().map(String::as_str),
        Some("[DONE]"),
        "{body}"
    );
    let mut out: Vec<StreamedChat> = (0..choices).map(|_| StreamedChat::default()).collect();
    let mut usage = None;
    for p in &payloads[..payloads.len() - 1] {
        let chunk: Value = serde_json::from_str(p).unwrap();
        assert_eq!(chunk["object"], "chat.completion.chunk", "{p}");
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
        for c in chunk["choices"].as_array().unwrap() {
            let s = &mut out[c["index"].as_u64().unwrap() as usize];
            assert!(s.finish_reason.is_none(), "a chunk after the last: {p}");
            let delta = &c["delta"];
            if let Some(role) = delta["role"].as_str() {
                assert!(s.role.is_none(), "the role twice: {p}");
                s.role = Some(role.to_string());
            }
            s.content.push_str(delta["content"].as_str().unwrap());
            if let Some(t) = c.get("token_ids") {
                s.token_ids.extend(ids(t));
            }
            for entry in c["logprobs"]["content"].as_array().into_iter().flatten() {
                s.logprobs
                    .push((entry["logprob"].as_f64().unwrap() as f32).to_bits());
            }
            if let Some(r) = c["finish_reason"].as_str() {
                s.finish_reason = Some(r.to_string());
            }
        }
    }
    (out, usage)
}

#[test]
fn chat_whole_and_streamed_equal_the_completion_of_the_rendered_prompt() {
    let template = std::env::temp_dir().join(format!("sprout-chatml-{}.jinja", std::process::id()));
    std::fs::write(&template, CHATML).unwrap();
    let server = Server::start(&["--chat-template", template.to_str().unwrap()]);
    let _ = std::fs::remove_file(&template);
    let port = server.port;
    let messages = json!([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Say "},
                                                       {"type": "text", "text": "something"}]}]);
    let request = json!({"messages": messages, "n": 3, "seed": 2, "max_tokens": 8,
                         "return_token_ids": true, "logprobs": true, "top_logprobs": 2});
    let reply = post_to(port, "/v1/chat/completions", &request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let chat = reply.json();
    assert_eq!(chat["object"], "chat.completion");
    assert!(
        chat["id"].as_str().unwrap().starts_with("chatcmpl-"),
        "{chat}"
    );
    let prompt = ids(&chat["prompt_token_ids"]);

    // The template rendered the messages: the same text as a completion prompt gives the
    // same tokens, and that completion the same samples.
    let rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay \
                    something<|im_end|>\n<|im_start|>assistant\n";
    let same = json!({"prompt": rendered, "n": 3, "seed": 2, "max_tokens": 8,
                      "return_token_ids": true, "logprobs": 2});
    let completion = post(port, &same).json();
    let choices = completion["choices"].as_array().unwrap();
    assert_eq!(ids(&choices[0]["prompt_token_ids"]), prompt);
    let chat_choices = chat["choices"].as_array().unwrap();
    assert_eq!(chat_choices.len(), 3);
    for (k, (c, t)) in chat_choices.iter().zip(choices).enumerate() {
        assert_eq!(c["index"], k);
        assert_eq!(c["message"]["role"], "assistant");
        assert_eq!(c["message"]["content"], t["text"], "sample {k}");
        assert_eq!(ids(&c["token_ids"]), ids(&t["token_ids"]), "sample {k}");
        assert_eq!(c["finish_reason"], t["finish_reason"]);
        assert_eq!(
            bits(&c["sprout"]["logprobs"]),
            bits(&t["sprout"]["logprobs"])
        );
        let content = c["logprobs"]["content"].as_array().unwrap();
        let logprobs: Vec<u32> = content
            .iter()
            .map(|e| (e["logprob"].as_f64().unwrap() as f32).to_bits())
            .collect();
        assert_eq!(
            logprobs,
            bits(&t["logprobs"]["token_logprobs"]),
            "sample {k}"
        );
        for (e, token) in content
            .iter()
            .zip(t["logprobs"]["tokens"].as_array().unwrap())
        {
            assert_eq!(&e["token"], token);
            let bytes: Vec<u64> = ids(&e["bytes"]);
            let utf8: Vec<u64> = token.as_str().unwrap().bytes().map(u64::from).collect();
            assert_eq!(bytes, utf8);
            assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 2, "{e}");
        }
    }
    assert_eq!(chat["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(
        chat["usage"]["completion_tokens"],
        completion["usage"]["completion_tokens"]
    );

    // Streamed, with and without log-probs.
    for logprobs in [true, false] {
        let mut body = request.clone();
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        body["logprobs"] = json!(logprobs);
        if !logprobs {
            body["top_logprobs"] = Value::Null;
        }
        let reply = post_to(port, "/v1/chat/completions", &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let first: Value = serde_json::from_str(&events(&reply.body)[0]).unwrap();
        assert_eq!(ids(&first["prompt_token_ids"]), prompt, "{first}");
        let (streamed, usage) = gather_chat_stream(&reply.body, 3);
        for (s, c) in streamed.iter().zip(chat_choices) {
            assert_eq!(s.role.as_deref(), Some("assistant"));
            assert_eq!(s.content, c["message"]["content"].as_str().unwrap());
            assert_eq!(s.token_ids, ids(&c["token_ids"]));
            assert_eq!(s.finish_reason.as_deref(), c["finish_reason"].as_str());
            if logprobs {
                assert_eq!(s.logprobs, bits(&c["sprout"]["logprobs"]));
            }
        }
        assert_eq!(
            usage.unwrap()["completion_tokens"],
            chat["usage"]["completion_tokens"]
        );
    }

    // Without max_tokens a chat sample may run to the end of the context; past it, a 400.
    let mut long = request.clone();
    long["max_tokens"] = json!(1_000_000_000u64);
    let reply = post_to(port, "/v1/chat/completions", &long);
    assert_error(&reply, 400, Some("max_tokens"), "maximum context length");
}

/// A server's chat template is a program from a flag: a bomb ends each chat request in a
/// 400 naming the bound it hit, at once, and the server goes on serving; a template file
/// past the size sprout compiles is refused at start, without being read whole.
#[test]
fn a_chat_template_bomb_is_a_400_naming_its_bound_and_a_huge_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("sprout-bombs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bomb = dir.join("bomb.jinja");
    std::fs::write(&bomb, "{{ ((1,) * 100000000) | length }}").unwrap();
    let server = Server::start(&["--chat-template", bomb.to_str().unwrap()]);
    let request = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let started = Instant::now();
    let reply = post_to(server.port, "/v1/chat/completions", &request);
    eprintln!(
        "a bomb template's request answered in {:?}",
        started.elapsed()
    );
    assert_error(&reply, 400, Some("messages"), "fuel");
    let fine = post(server.port, &json!({"prompt": "Hello", "max_tokens": 2}));
    assert_eq!(fine.status, 200, "{}", fine.body);
    drop(server);

    let huge = dir.join("huge.jinja");
    std::fs::write(&huge, "x".repeat(1 << 20)).unwrap();
    let out = serve_output(&["--chat-template", huge.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("262144 bytes"), "{stderr}");
}

/// Bodies made of the fields both APIs read, each set to a value picked from a list of
/// awkward ones (wrong types, edges, huge numbers), sent to both routes: every reply is a
/// success or a refusal in OpenAI's error body, and the server stays up with nothing held.
#[test]
fn hostile_bodies_get_an_answer_and_leave_nothing_behind() {
    let template = std::env::temp_dir().join(format!("sprout-fuzz-{}.jinja", std::process::id()));
    std::fs::write(&template, CHATML).unwrap();
    let server = Server::start(&[
        "--chat-template",
        template.to_str().unwrap(),
        "--max-model-len",
        "24",
        "--max-queued-requests",
        "4",
    ]);
    let _ = std::fs::remove_file(&template);
    let port = server.port;
    let values: Vec<Value> = [
        "null",
        "true",
        "false",
        "0",
        "1",
        "2",
        "-1",
        "0.5",
        "-0.0",
        "1e308",
        "-1e308",
        "18446744073709551615",
        "4294967296",
        "340282366920938463463374607431768211456",
        "\"\"",
        "\"hi\"",
        "\"\\u0000\"",
        "[]",
        "{}",
        "[1, 2]",
        "[[1], [2]]",
        "[\"a\", \"\"]",
        "[{\"role\": \"user\", \"content\": \"hi\"}]",
        "[{\"role\": \"\"}]",
        "{\"include_usage\": true}",
        "{\"include_usage\": 3}",
        "[99999]",
        "[-1]",
        "[{\"type\": \"text\", \"text\": 5}]",
    ]
    .iter()
    .map(|v| serde_json::from_str(v).unwrap())
    .collect();
    let fields = [
        "model",
        "prompt",
        "messages",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "stop_token_ids",
        "min_tokens",
        "ignore_eos",
        "logprobs",
        "top_logprobs",
        "return_token_ids",
        "stream",
        "stream_options",
        "logit_bias",
        "allowed_token_ids",
        "bad_words",
        "repetition_penalty",
        "echo",
        "truncate_prompt_tokens",
        "best_of",
        "tools",
    ];
    // SplitMix64: a fixed, reproducible sequence of bodies.
    let mut state = 0x5eed_u64;
    let mut next = move |below: usize| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % below as u64) as usize
    };
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..400 {
        let mut body = match i % 2 {
            0 => json!({"prompt": "hi", "max_tokens": 2}),
            _ => json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        };
        for _ in 0..1 + next(3) {
            body[fields[next(fields.len())]] = values[next(values.len())].clone();
        }
        // Mostly the route the body was made for; now and then the other.
        let path = ["/v1/completions", "/v1/chat/completions"][(i + usize::from(next(4) == 0)) % 2];
        let reply = post_to(port, path, &body);
        *statuses.entry(reply.status).or_insert(0) += 1;
        match reply.status {
            200 if body["stream"] == true => {
                assert_eq!(
                    events(&reply.body).last().map(String::as_str),
                    Some("[DONE]")
                );
                assert!(
                    !reply.body.contains("\"error\""),
                    "{body} -> {}",
                    reply.body
                );
            }
            200 => {
                let n = body["n"].as_u64().unwrap_or(1) as usize;
                let choices = reply.json()["choices"].as_array().unwrap().len();
                assert!(choices >= n, "{body} -> {}", reply.body);
            }
            400 | 404 | 503 => {
                let error = &reply.json()["error"];
                assert_eq!(error["code"], reply.status, "{body} -> {}", reply.body);
                assert!(!error["message"].as_str().unwrap().is_empty());
            }
            other => panic!("{body} -> {other}: {}", reply.body),
        }
    }
    eprintln!("replies by status: {statuses:?}");
    assert!(statuses.get(&200).is_some_and(|&n| n >= 10), "{statuses:?}");
    assert!(statuses.get(&400).is_some_and(|&n| n >= 20), "{statuses:?}");
    await_idle(port, 0, "length");
    assert_eq!(http(port, "GET", "/health", &[], b"").status, 200);
}

#[test]
fn models_and_health_describe_the_server() {
    let server = Server::start(&["--served-model-name", "tiny", "--max-model-len", "64"]);
    let models = http(server.port, "GET", "/v1/models", &[], b"");
    assert_eq!(models.status, 200, "{}", models.body);
    let data = &models.json()["data"][0];
    assert_eq!(data["id"], "tiny");
    assert_eq!(data["max_model_len"], 64);
    let health = http(server.port, "GET", "/health", &[], b"");
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    let reply = post(
        server.port,
        &json!({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 2}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Checks `reply` is an OpenAI error with `status` naming `param` (if given) and saying
/// `says`.
fn assert_error(reply: &Reply, status: u16, param: Option<&str>, says: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let body = reply.json();
    let error = &body["error"];
    for key in ["message", "type", "param", "code"] {
        assert!(error.get(key).is_some(), "no {key} in {body}");
    }
    assert_eq!(error["code"], status, "{body}");
    if let Some(param) = param {
        assert_eq!(error["param"], param, "{body}");
    }
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(says), "{message:?} does not say {says:?}");
}

#[test]
fn bad_requests_get_their_status_and_an_openai_error() {
    let server = Server::start(&[
        "--api-key",
        "secret",
        "--max-queued-requests",
        "8",
        "--max-model-len",
        "64",
    ]);
    let port = server.port;
    let auth = "Authorization: Bearer secret";
    let send = |body: &str| http(port, "POST", "/v1/completions", &[auth], body.as_bytes());

    let cases: Vec<(&str, u16, Option<&str>, &str)> = vec![
        ("{\"prompt\": ", 400, None, "not valid JSON"),
        ("[1, 2]", 400, None, "JSON object"),
        (
            r#"{"prompt": "hi", "n": "two"}"#,
            400,
            Some("n"),
            "n must be",
        ),
        (r#"{"prompt": "hi", "n": 0}"#, 400, Some("n"), "at least 1"),
        (
            r#"{"prompt": "hi", "temperature": -1}"#,
            400,
            Some("temperature"),
            "-1",
        ),
        (
            r#"{"prompt": "hi", "top_p": 0}"#,
            400,
            Some("top_p"),
            "(0, 1]",
        ),
        (
            r#"{"prompt": "hi", "max_tokens": 0}"#,
            400,
            Some("max_tokens"),
            "at least 1",
        ),
        (
            r#"{"prompt": "hi", "min_tokens": 9, "max_tokens": 4}"#,
            400,
            Some("min_tokens"),
            "9",
        ),
        (
            r#"{"prompt": "hi", "stop": [""]}"#,
            400,
            Some("stop"),
            "non-empty",
        ),
        (
            r#"{"prompt": "hi", "logprobs": 21}"#,
            400,
            Some("logprobs"),
            "at most 20",
        ),
        (r#"{"prompt": ""}"#, 400, Some("prompt"), "empty"),
        (r#"{"prompt": []}"#, 400, Some("prompt"), "empty"),
        (
            r#"{"prompt": [1, 384]}"#,
            400,
            Some("prompt"),
            "outside the vocabulary",
        ),
        (
            r#"{"prompt": "hi", "stop_token_ids": [999]}"#,
            400,
            Some("stop_token_ids"),
            "999",
        ),
        (
            r#"{"prompt": [1, 2, 3, 4], "max_tokens": 61}"#,
            400,
            Some("max_tokens"),
            "maximum context length is 64",
        ),
        (
            r#"{"prompt": "hi", "stream_options": {"include_usage": true}}"#,
            400,
            Some("stream_options"),
            "stream",
        ),
        (
            r#"{"model": "other", "prompt": "hi"}"#,
            404,
            Some("model"),
            "other",
        ),
        (
            r#"{"prompt": "hi", "n": 9}"#,
            400,
            Some("n"),
            "--max-samples-per-request",
        ),
        (
            r#"{"prompt": ["a", "b"], "n": 18446744073709551615}"#,
            400,
            Some("n"),
            "--max-n",
        ),
        (
            r#"{"prompt": "hi", "frequency_penalty": 0.5, "best_of": 2}"#,
            400,
            Some("best_of"),
            "best_of",
        ),
        (
            r#"{"prompt": "hi", "suffix": "x"}"#,
            400,
            Some("suffix"),
            "suffix",
        ),
        (
            r#"{"prompt": "hi", "max_tokens": 18446744073709551615}"#,
            400,
            Some("max_tokens"),
            "maximum context length is 64",
        ),
    ];
    for (body, status, param, says) in cases {
        let reply = send(body);
        assert_error(&reply, status, param, says);
        if status == 503 {
            assert_eq!(reply.header("retry-after").as_deref(), Some("1"));
        }
    }
    // Chat: the body is read as the chat API's, and this model has no template.
    let chat = |body: &str| {
        let path = "/v1/chat/completions";
        http(port, "POST", path, &[auth], body.as_bytes())
    };
    let user = r#"[{"role": "user", "content": "hi"}]"#;
    let chat_cases: Vec<(String, u16, &str, &str)> = vec![
        ("{}".into(), 400, "messages", "required"),
        (r#"{"messages": []}"#.into(), 400, "messages", "empty"),
        (
            format!(r#"{{"messages": {user}, "top_logprobs": 2}}"#),
            400,
            "top_logprobs",
            "logprobs",
        ),
        (
            format!(r#"{{"messages": {user}, "model": "other"}}"#),
            404,
            "model",
            "other",
        ),
        (
            format!(r#"{{"messages": {user}}}"#),
            400,
            "messages",
            "--chat-template",
        ),
    ];
    for (body, status, param, says) in chat_cases {
        assert_error(&chat(&body), status, Some(param), says);
    }

    // The most a request may ask is still served.
    let fits = send(r#"{"prompt": [1, 2, 3, 4], "max_tokens": 60, "n": 8}"#);
    assert_eq!(fits.status, 200, "{}", fits.body);

    // The key: missing or wrong.
    let body = br#"{"prompt": "hi"}"#;
    let none = http(port, "POST", "/v1/completions", &[], body);
    assert_error(&none, 401, None, "API key");
    let wrong = http(
        port,
        "POST",
        "/v1/completions",
        &["Authorization: Bearer nope"],
        body,
    );
    assert_error(&wrong, 401, None, "API key");
    assert_error(
        &http(port, "GET", "/v1/models", &[], b""),
        401,
        None,
        "API key",
    );

    // A body over the limit is refused from its length alone.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"prompt\": \"",
        17 << 20
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    assert_error(&parse_reply(&raw), 413, None, "over the limit");

    // The server is still healthy after all of that.
    assert_eq!(http(port, "GET", "/health", &[], b"").status, 200);
}

/// `/metrics`: each series (name and labels) with its value.
fn metrics(port: u16) -> Vec<(String, f64)> {
    let reply = http(port, "GET", "/metrics", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
        .body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a series and its value");
            (series.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// The value of the series `name` whose labels include each of `labels` (`key="value"`);
/// panics when there is not exactly one.
fn metric(all: &[(String, f64)], name: &str, labels: &[&str]) -> f64 {
    let found: Vec<f64> = all
        .iter()
        .filter(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name && labels.iter().all(|l| rest.contains(l))
        })
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?} in\n{}", brief(all));
    found[0]
}

/// The metrics without the histograms' buckets, for a failure message.
fn brief(m: &[(String, f64)]) -> String {
    m.iter()
        .filter(|(series, _)| !series.contains("_bucket"))
        .map(|(series, value)| format!("{series} {value}\n"))
        .collect()
}

/// Samples finished with `reason`.
fn finished(m: &[(String, f64)], reason: &str) -> usize {
    let label = format!("finished_reason=\"{reason}\"");
    metric(m, "vllm:request_success_total", &[&label]) as usize
}

/// Waits (60 s at most) until `samples` samples have finished with `reason` and the server
/// runs no request and holds no KV block; the metrics then.
fn await_idle(port: u16, samples: usize, reason: &str) -> Vec<(String, f64)> {
    let start = Instant::now();
    loop {
        let m = metrics(port);
        let running = metric(&m, "vllm:num_requests_running", &[]);
        let waiting = metric(&m, "vllm:num_requests_waiting", &[]);
        let blocks = metric(&m, "sprout:kv_blocks_in_use", &[]);
        if finished(&m, reason) >= samples && running == 0.0 && waiting == 0.0 && blocks == 0.0 {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not idle:\n{}",
            brief(&m)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends a completion request and returns the connection, its response unread.
fn send_completion(port: u16, body: &Value) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let bytes = request_bytes(
        port,
        "POST",
        "/v1/completions",
        &[],
        body.to_string().as_bytes(),
    );
    stream.write_all(&bytes).unwrap();
    stream
}

/// Waits (60 s at most) until the server runs a request.
fn await_running(port: u16) {
    let start = Instant::now();
    while metric(&metrics(port), "vllm:num_requests_running", &[]) != 1.0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the request never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn metrics_have_vllm_s_names_and_count_the_work() {
    let server = Server::start(&["--served-model-name", "tiny"]);
    let port = server.port;
    let before = metrics(port);
    for (series, _) in &before {
        assert!(series.contains("model_name=\"tiny\""), "{series}");
    }
    let (n, max_tokens) = (4, 8);
    // Long enough for full blocks, so that the second request finds them cached.
    let prompt = PROMPT.repeat(8);
    let body = json!({"prompt": prompt, "n": n, "max_tokens": max_tokens, "ignore_eos": true,
                      "return_token_ids": true});
    let first = post(port, &body);
    assert_eq!(first.status, 200, "{}", first.body);
    let prompt_len = first.json()["choices"][0]["prompt_token_ids"]
        .as_array()
        .unwrap()
        .len();
    let m = await_idle(port, n, "length");
    let count = |m: &[(String, f64)], name: &str| metric(m, name, &[]) as usize;
    assert_eq!(count(&m, "vllm:prompt_tokens_total"), prompt_len);
    assert_eq!(count(&m, "vllm:generation_tokens_total"), n * max_tokens);
    let length = r#"finished_reason="length""#;
    assert_eq!(
        metric(&m, "vllm:request_success_total", &[length]),
        n as f64
    );
    assert_eq!(count(&m, "vllm:time_to_first_token_seconds_count"), n);
    assert_eq!(
        count(&m, "vllm:inter_token_latency_seconds_count"),
        n * (max_tokens - 1)
    );
    assert_eq!(count(&m, "vllm:e2e_request_latency_seconds_count"), n);
    assert_eq!(count(&m, "vllm:request_queue_time_seconds_count"), 1);
    assert_eq!(metric(&m, "vllm:kv_cache_usage_perc", &[]), 0.0);
    assert_eq!(count(&m, "vllm:prefix_cache_queries_total"), prompt_len);
    assert_eq!(count(&m, "vllm:prefix_cache_hits_total"), 0);
    assert_eq!(count(&m, "vllm:num_preemptions_total"), 0);
    let first_cached = &first.json()["usage"]["prompt_tokens_details"]["cached_tokens"];
    assert_eq!(first_cached, 0);

    // The same prompt again: its full blocks come from the cache, and usage says so.
    let second = post(port, &body);
    assert_eq!(second.status, 200, "{}", second.body);
    let m = await_idle(port, 2 * n, "length");
    let hits = count(&m, "vllm:prefix_cache_hits_total");
    assert!(hits > 0 && hits < prompt_len, "{hits} of {prompt_len}");
    let cached = &second.json()["usage"]["prompt_tokens_details"]["cached_tokens"];
    assert_eq!(cached.as_u64(), Some(hits as u64), "{}", second.body);
}

/// Every one of the `n` samples was aborted before it made `max_tokens`.
fn assert_aborted_early(m: &[(String, f64)], n: usize, max_tokens: usize) {
    let abort = r#"finished_reason="abort""#;
    let aborted = metric(m, "vllm:request_success_total", &[abort]);
    assert_eq!(aborted, n as f64, "{}", brief(m));
    let generated = metric(m, "vllm:generation_tokens_total", &[]) as usize;
    assert!(
        generated < n * max_tokens,
        "it ran to the end:\n{}",
        brief(m)
    );
}

#[test]
fn a_client_that_leaves_before_a_whole_response_is_aborted() {
    let server = Server::start(&[]);
    let port = server.port;
    let (n, max_tokens) = (16, 240);
    let body = json!({"prompt": PROMPT, "n": n, "max_tokens": max_tokens, "ignore_eos": true});
    let stream = send_completion(port, &body);
    await_running(port);
    drop(stream);
    let m = await_idle(port, n, "abort");
    assert_aborted_early(&m, n, max_tokens);
}

#[test]
fn a_client_that_leaves_mid_stream_is_aborted_and_sigterm_exits_0() {
    let server = Server::start(&[]);
    let port = server.port;
    let (n, max_tokens) = (16, 240);
    let body = json!({"prompt": PROMPT, "n": n, "max_tokens": max_tokens, "ignore_eos": true,
                      "stream": true});
    let stream = send_completion(port, &body);
    // Read until the first token arrives, then leave.
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the stream ended early"
        );
    }
    drop(reader);

    let m = await_idle(port, n, "abort");
    assert_aborted_early(&m, n, max_tokens);
    let after = post(port, &json!({"prompt": PROMPT, "max_tokens": 4}));
    assert_eq!(after.status, 200, "{}", after.body);

    // SIGTERM with a request in flight: its client gets what it had, then the exit is 0.
    let body = json!({"prompt": PROMPT, "n": n, "max_tokens": max_tokens, "ignore_eos": true,
                      "stream": true});
    let in_flight = std::thread::spawn(move || post(port, &body));
    await_running(port);
    assert_eq!(server.terminate(), Some(0));
    let reply = in_flight.join().unwrap();
    assert_eq!(reply.status, 200);
    let (streamed, _) = gather_stream(&reply.body, n);
    assert!(
        streamed.iter().all(|s| s.finish_reason.is_some()),
        "{}",
        reply.body
    );
    assert!(
        streamed
            .iter()
            .any(|s| s.finish_reason.as_deref() == Some("abort")),
        "{}",
        reply.body
    );
}

fn admin(port: u16, method: &str, path: &str, body: &str) -> Reply {
    http(port, method, path, &[], body.as_bytes())
}

#[test]
fn a_trainer_pauses_resumes_aborts_and_resets_the_prefix_cache() {
    let server = Server::start(&[]);
    let port = server.port;
    let long = json!({"prompt": PROMPT, "n": 2, "max_tokens": 240, "ignore_eos": true,
                      "stream": true, "request_id": "long-1"});
    let streaming = std::thread::spawn(move || post(port, &long));
    await_running(port);
    // The id is taken while the request is in flight.
    let same = post(port, &json!({"prompt": PROMPT, "request_id": "long-1"}));
    assert_error(&same, 400, Some("request_id"), "already in flight");

    // keep: stepping stops at once, and a new request waits.
    let paused = admin(port, "POST", "/pause?mode=keep", "");
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(
        admin(port, "GET", "/is_paused", "").json()["is_paused"],
        true
    );
    let before = generated(port);
    let short = std::thread::spawn(move || post(port, &json!({"prompt": PROMPT, "max_tokens": 4})));
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        generated(port),
        before,
        "tokens were generated while paused"
    );
    assert!(!short.is_finished(), "a request ran while paused");
    let m = metrics(port);
    assert_eq!(
        metric(&m, "vllm:num_requests_waiting", &[]),
        1.0,
        "{}",
        brief(&m)
    );

    // resume: the held request runs, the long one goes on.
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);
    assert_eq!(
        admin(port, "GET", "/is_paused", "").json()["is_paused"],
        false
    );
    let short = short.join().unwrap();
    assert_eq!(short.status, 200, "{}", short.body);
    assert!(generated(port) > before);

    // abort by id: the client gets its samples so far, ended by "abort".
    let unknown = admin(
        port,
        "POST",
        "/abort_requests",
        r#"{"request_ids": ["long-1", "nope"]}"#,
    );
    assert_eq!(unknown.status, 200, "{}", unknown.body);
    assert_eq!(unknown.json()["aborted_prompts"], 1);
    assert_eq!(unknown.json()["not_found"], json!(["nope"]));
    let reply = streaming.join().unwrap();
    let (streamed, _) = gather_stream(&reply.body, 2);
    for s in &streamed {
        assert_eq!(s.finish_reason.as_deref(), Some("abort"), "{}", reply.body);
        assert!(!s.text.is_empty(), "{}", reply.body);
    }

    // wait: the pause comes once the request in flight has finished, whole.
    let body = json!({"prompt": PROMPT, "max_tokens": 30, "ignore_eos": true});
    let running = std::thread::spawn(move || post(port, &body));
    await_running(port);
    let paused = admin(port, "POST", "/pause?mode=wait", "");
    assert_eq!(paused.status, 200, "{}", paused.body);
    let finished = running.join().unwrap().json();
    assert_eq!(finished["choices"][0]["finish_reason"], "length");
    assert_eq!(finished["usage"]["completion_tokens"], 30);
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);

    // abort: the request in flight ends at once.
    let body = json!({"prompt": PROMPT, "max_tokens": 240, "ignore_eos": true});
    let running = std::thread::spawn(move || post(port, &body));
    await_running(port);
    assert_eq!(admin(port, "POST", "/pause", "").json()["mode"], "abort");
    let cut = running.join().unwrap().json();
    assert_eq!(cut["choices"][0]["finish_reason"], "abort", "{cut}");
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);
    assert_error(
        &admin(port, "POST", "/pause?mode=later", ""),
        400,
        Some("mode"),
        "later",
    );
    assert_error(
        &admin(
            port,
            "POST",
            "/pause?mode=keep&wait_for_inflight_requests=true",
            "",
        ),
        400,
        Some("wait_for_inflight_requests"),
        "contradicts mode=keep",
    );
    assert_error(
        &admin(port, "POST", "/pause?clear_kv=true", ""),
        400,
        None,
        "clear_kv",
    );

    // clear_cache (vLLM's default: true): an abort or wait pause forgets the prefix
    // cache; clear_cache=false and keep pauses do not.
    let long_prompt = json!({"prompt": PROMPT.repeat(8), "max_tokens": 2});
    let cached = |port| {
        post(port, &long_prompt).json()["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64()
    };
    for (query, kept) in [
        ("wait_for_inflight_requests=true&clear_cache=false", true),
        ("mode=keep", true),
        ("mode=wait", false),
    ] {
        assert_eq!(post(port, &long_prompt).status, 200);
        let paused = admin(port, "POST", &format!("/pause?{query}"), "");
        assert_eq!(paused.status, 200, "{query}: {}", paused.body);
        assert_eq!(
            paused.json()["forgotten_blocks"].as_u64() > Some(0),
            !kept,
            "{query}"
        );
        assert_eq!(admin(port, "POST", "/resume", "").status, 200);
        assert_eq!(cached(port) > Some(0), kept, "{query}");
    }

    // reset: a prompt whose blocks were cached is computed again.
    let long_prompt = json!({"prompt": PROMPT.repeat(8), "max_tokens": 2});
    assert_eq!(post(port, &long_prompt).status, 200);
    let again = post(port, &long_prompt).json();
    assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0));
    assert_error(
        &admin(
            port,
            "POST",
            "/reset_prefix_cache?reset_running_requests=true",
            "",
        ),
        400,
        Some("reset_running_requests"),
        "not supported",
    );
    assert_error(
        &admin(port, "POST", "/reset_prefix_cache?everything=1", ""),
        400,
        None,
        "everything",
    );
    let reset = admin(port, "POST", "/reset_prefix_cache?reset_external=false", "").json();
    assert!(reset["forgotten_blocks"].as_u64() > Some(0), "{reset}");
    let after = post(port, &long_prompt).json();
    assert_eq!(
        after["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{after}"
    );
    await_idle(port, 0, "length");
}

#[test]
fn with_an_admin_key_the_admin_routes_need_it() {
    let server = Server::start(&["--admin-api-key", "root"]);
    let port = server.port;
    for (method, path) in [
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("GET", "/is_paused"),
        ("POST", "/abort_requests"),
        ("POST", "/reset_prefix_cache"),
    ] {
        let none = http(port, method, path, &[], b"");
        assert_error(&none, 401, None, "admin key");
        let wrong = http(port, method, path, &["Authorization: Bearer nope"], b"");
        assert_error(&wrong, 401, None, "admin key");
    }
    let with = http(
        port,
        "GET",
        "/is_paused",
        &["Authorization: Bearer root"],
        b"",
    );
    assert_eq!(with.status, 200, "{}", with.body);
    assert_eq!(with.json()["is_paused"], false);
}

/// A copy of the tiny model's directory whose final norm is scaled by `scale` (new logits
/// everywhere); with `nan`, one of its values is not a number.
fn checkpoint(name: &str, scale: f32, nan: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sprout-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(tiny_llama().join(file), dir.join(file)).unwrap();
    }
    let bytes = std::fs::read(tiny_llama().join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
    for (tensor_name, view) in tensors.tensors() {
        let mut data = view.data().to_vec();
        if tensor_name == "model.norm.weight" {
            for (i, chunk) in data.chunks_exact_mut(4).enumerate() {
                let mut v = f32::from_le_bytes(chunk.try_into().unwrap()) * scale;
                if nan && i == 3 {
                    v = f32::NAN;
                }
                chunk.copy_from_slice(&v.to_le_bytes());
            }
        }
        out.push((tensor_name, data, view.shape().to_vec()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = out
        .iter()
        .map(|(n, data, shape)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .unwrap();
            (n.clone(), view)
        })
        .collect();
    let file = safetensors::serialize(views, None).unwrap();
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    dir
}

fn update(port: u16, body: &Value) -> Reply {
    post_to(port, "/update_weights", body)
}

/// Each token's weights version of a finished choice (the one version when it did not
/// change).
fn versions(choice: &Value) -> Vec<u64> {
    let sprout = &choice["sprout"];
    match sprout.get("weights_versions") {
        Some(all) => ids(all),
        None => vec![sprout["weights_version"].as_u64().unwrap()],
    }
}

#[test]
fn a_trainer_updates_the_weights_between_steps() {
    let server = Server::start(&[]);
    let port = server.port;
    let scaled = checkpoint("scaled", 1.5, false);
    let probe = json!({"prompt": PROMPT, "n": 2, "seed": 5, "max_tokens": 8,
                       "return_token_ids": true});
    let before = post(port, &probe).json();
    assert_eq!(versions(&before["choices"][0]), vec![0]);

    // keep: the request in flight spans the update, and says where it changed.
    let long = json!({"prompt": PROMPT, "max_tokens": 120, "ignore_eos": true});
    let running = std::thread::spawn(move || post(port, &long));
    await_running(port);
    assert_eq!(admin(port, "POST", "/pause?mode=keep", "").status, 200);
    let done = update(port, &json!({"weight_dir": scaled, "weights_version": 7}));
    assert_eq!(done.status, 200, "{}", done.body);
    let done = done.json();
    assert_eq!(
        (done["success"].clone(), done["weights_version"].clone()),
        (json!(true), json!(7))
    );
    assert!(done["load_s"].as_f64().unwrap() >= 0.0);
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);
    let spanned = running.join().unwrap().json();
    let v = versions(&spanned["choices"][0]);
    assert_eq!(v.len(), 120, "{spanned}");
    let switch = v
        .iter()
        .position(|&x| x == 7)
        .expect("no token under version 7");
    assert!(
        switch > 0 && v[..switch].iter().all(|&x| x == 0) && v[switch..].iter().all(|&x| x == 7)
    );
    assert_eq!(spanned["choices"][0]["sprout"]["weights_version"], 7);

    // wait: the request in flight finishes under the old weights first.
    let short = json!({"prompt": PROMPT, "max_tokens": 30, "ignore_eos": true});
    let running = std::thread::spawn(move || post(port, &short));
    await_running(port);
    assert_eq!(admin(port, "POST", "/pause?mode=wait", "").status, 200);
    let same = update(port, &json!({"weight_dir": scaled, "weights_version": 8}));
    assert_eq!(same.status, 200, "{}", same.body);
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);
    let finished = running.join().unwrap().json();
    assert_eq!(versions(&finished["choices"][0]), vec![7], "{finished}");

    // abort: the request in flight ends; the next version needs no number.
    let long = json!({"prompt": PROMPT, "max_tokens": 240, "ignore_eos": true});
    let running = std::thread::spawn(move || post(port, &long));
    await_running(port);
    assert_eq!(admin(port, "POST", "/pause?mode=abort", "").status, 200);
    let next = update(port, &json!({"weight_dir": scaled}));
    assert_eq!(next.json()["weights_version"], 9, "{}", next.body);
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);
    let cut = running.join().unwrap().json();
    assert_eq!(cut["choices"][0]["finish_reason"], "abort");

    // Later requests report the new version and the new weights' log-probs: those of a
    // server started on the new checkpoint.
    let after = post(port, &probe).json();
    let fresh_server = Server::start_on(&scaled, &[]);
    let fresh = post(fresh_server.port, &probe).json();
    for ((a, f), b) in after["choices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(fresh["choices"].as_array().unwrap())
        .zip(before["choices"].as_array().unwrap())
    {
        assert_eq!(versions(a), vec![9]);
        assert_eq!(ids(&a["token_ids"]), ids(&f["token_ids"]));
        assert_eq!(
            bits(&a["sprout"]["logprobs"]),
            bits(&f["sprout"]["logprobs"])
        );
        assert_ne!(
            bits(&a["sprout"]["logprobs"]),
            bits(&b["sprout"]["logprobs"])
        );
    }

    // Updates that do not fit are refused, naming the problem; version 9 serves on.
    let broken = checkpoint("nan", 1.5, true);
    let missing = std::env::temp_dir().join("sprout-no-such-checkpoint");
    // The right weights with another model's tokenizer: another vocabulary.
    let other_vocab = checkpoint("vocab", 1.5, false);
    let qwen = tiny_llama().with_file_name("tiny-qwen2");
    std::fs::copy(
        qwen.join("tokenizer.json"),
        other_vocab.join("tokenizer.json"),
    )
    .unwrap();
    let cases = [
        (
            json!({"weight_dir": broken, "weights_version": 10}),
            "weight_dir",
            "not finite",
        ),
        (
            json!({"weight_dir": missing, "weights_version": 10}),
            "weight_dir",
            "no such file",
        ),
        (
            json!({"weight_dir": other_vocab, "weights_version": 10}),
            "weight_dir",
            "vocabulary",
        ),
        (
            json!({"weight_dir": scaled, "weights_version": 9}),
            "weights_version",
            "already",
        ),
        (
            json!({"weights_version": 10}),
            "weight_dir",
            "weight_dir must be",
        ),
        (
            json!({"weight_dir": scaled, "weights_version": -1}),
            "weights_version",
            "-1",
        ),
    ];
    for (body, param, says) in cases {
        assert_error(&update(port, &body), 400, Some(param), says);
    }
    let still = post(port, &probe).json();
    assert_eq!(still["choices"], after["choices"]);
    let bad_format = json!({"weight_dir": scaled, "weights_version": 10, "quantize": "q5"});
    assert_error(&update(port, &bad_format), 400, Some("quantize"), "q5");

    // Quantized on load, as `--quantize` quantizes at start: bitwise the same samples.
    let q8 = json!({"weight_dir": scaled, "weights_version": 10, "quantize": "q8_0"});
    assert_eq!(update(port, &q8).status, 200);
    let updated = post(port, &probe).json();
    let q8_server = Server::start_on(&scaled, &["--quantize", "q8_0"]);
    let started = post(q8_server.port, &probe).json();
    for (u, s) in updated["choices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(started["choices"].as_array().unwrap())
    {
        assert_eq!(versions(u), vec![10]);
        assert_eq!(ids(&u["token_ids"]), ids(&s["token_ids"]));
        assert_eq!(
            bits(&u["sprout"]["logprobs"]),
            bits(&s["sprout"]["logprobs"])
        );
    }
    assert_ne!(
        updated["choices"], after["choices"],
        "q8_0 rounds the weights"
    );
    let _ = std::fs::remove_dir_all(&scaled);
    let _ = std::fs::remove_dir_all(&broken);
    let _ = std::fs::remove_dir_all(&other_vocab);
}

#[test]
fn trl_s_generate_route_gives_what_the_completions_route_gives() {
    let server = Server::start(&[]);
    let port = server.port;
    // The body TRL's VLLMClient.generate sends.
    let trl = json!({"prompts": [PROMPT, "Another prompt"], "images": null, "n": 2,
                     "repetition_penalty": 1.0, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                     "min_p": 0.0, "max_tokens": 8, "logprobs": 2,
                     "structured_outputs_regex": null, "generation_kwargs": {"seed": 3}});
    let reply = post_to(port, "/generate/", &trl);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let out = reply.json();
    let same = json!({"prompt": [PROMPT, "Another prompt"], "n": 2, "max_tokens": 8, "seed": 3,
                      "logprobs": 2, "return_token_ids": true});
    let completions = post(port, &same).json();
    let choices = completions["choices"].as_array().unwrap();
    assert_eq!(out["prompt_ids"].as_array().unwrap().len(), 2);
    assert_eq!(
        ids(&out["prompt_ids"][0]),
        ids(&choices[0]["prompt_token_ids"])
    );
    assert_eq!(
        ids(&out["prompt_ids"][1]),
        ids(&choices[2]["prompt_token_ids"])
    );
    assert_eq!(out["completion_ids"].as_array().unwrap().len(), 4);
    for (k, c) in choices.iter().enumerate() {
        let tokens = ids(&c["token_ids"]);
        assert_eq!(ids(&out["completion_ids"][k]), tokens, "sample {k}");
        let sampled = bits(&c["logprobs"]["token_logprobs"]);
        for (i, &token) in tokens.iter().enumerate() {
            let lps = out["logprobs"][k][i].as_array().unwrap();
            let tids = ids(&out["logprob_token_ids"][k][i]);
            assert!(lps.len() <= 3 && lps.len() == tids.len(), "{lps:?}");
            let at = tids
                .iter()
                .position(|&t| t == token)
                .expect("the sampled token");
            assert_eq!((lps[at].as_f64().unwrap() as f32).to_bits(), sampled[i]);
            let values: Vec<f64> = lps.iter().map(|v| v.as_f64().unwrap()).collect();
            assert!(values.windows(2).all(|w| w[0] >= w[1]), "{values:?}");
        }
    }
    assert_eq!(out["weights_versions"], json!([0, 0, 0, 0]));

    // logprobs 0: the sampled token's only; null: none.
    let mut zero = trl.clone();
    zero["logprobs"] = json!(0);
    let out = post_to(port, "/generate/", &zero).json();
    for (k, c) in choices.iter().enumerate() {
        let tokens = ids(&c["token_ids"]);
        let per_token: Vec<u64> = (0..tokens.len())
            .map(|i| ids(&out["logprob_token_ids"][k][i])[0])
            .collect();
        assert_eq!(per_token, tokens);
        assert!(
            out["logprobs"][k]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l.as_array().unwrap().len() == 1)
        );
    }
    let mut none = trl.clone();
    none["logprobs"] = Value::Null;
    let out = post_to(port, "/generate", &none).json();
    assert!(
        out["logprobs"].is_null() && out["logprob_token_ids"].is_null(),
        "{out}"
    );

    // What sprout cannot do is refused by name.
    let refused = [
        ("images", json!([["aGVsbG8="], null]), "images"),
        (
            "structured_outputs_regex",
            json!("[0-9]+"),
            "structured_outputs_regex",
        ),
        (
            "generation_kwargs",
            json!({"frequency_penalty": 0.5}),
            "frequency_penalty",
        ),
        ("prompts", Value::Null, "prompts is required"),
    ];
    for (key, value, says) in refused {
        let mut body = trl.clone();
        body[key] = value;
        let param = key;
        assert_error(&post_to(port, "/generate/", &body), 400, Some(param), says);
    }
    // TRL's newer client asks /v1/completions for tokens named by id.
    let mut by_id = same.clone();
    by_id["return_tokens_as_token_ids"] = json!(true);
    let named = post(port, &by_id).json();
    for (c, plain) in named["choices"].as_array().unwrap().iter().zip(choices) {
        let names: Vec<String> = ids(&plain["token_ids"])
            .iter()
            .map(|id| format!("token_id:{id}"))
            .collect();
        assert_eq!(c["logprobs"]["tokens"], json!(names), "{c}");
        for top in c["logprobs"]["top_logprobs"].as_array().unwrap() {
            let keys = top.as_object().unwrap().keys();
            assert!(
                keys.into_iter().all(|k| k.starts_with("token_id:")),
                "{top}"
            );
        }
    }
    // The other paths TRL's client calls.
    assert_eq!(http(port, "GET", "/health/", &[], b"").status, 200);
    assert_eq!(admin(port, "POST", "/reset_prefix_cache/", "").status, 200);
}
