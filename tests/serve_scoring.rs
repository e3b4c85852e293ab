//! Scoring through `sprout serve` and what aborts return, on the tiny Llama fixture over
//! real HTTP: the prompt's log-probs (`prompt_logprobs`, and completions' `echo` with
//! `logprobs` and `max_tokens` 0) equal bit for bit the log-probs a rollout drew the same
//! tokens with and those `sprout score` gives; their alternatives and ranks agree; and a
//! request cut short by `/abort_requests` or `/pause?mode=abort` returns, on every route,
//! its partial tokens and their log-probs with finish reason "abort", a prefix of what the
//! same seed draws unaborted.
//!
//! The ranks come from the engine's teacher-forced pass (`FinishedSample::ranks`); the
//! tests that read them are `scoring_equals_the_rollout_and_sprout_score_bitwise` and
//! `prompt_logprobs_come_per_prompt_with_n_a_batch_and_chat`.
//!
//! The server runs the model on the GPU: with no adapter it cannot start, and these
//! tests fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;
use http::{await_generated, generated, http, ok_json, post_json};
use server::Server;

const PROMPT: &str = "The quick brown fox";

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + \
                      message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}\
                      {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

/// A server on the tiny model with the ChatML template.
fn start() -> Server {
    Server::tiny_with_template(CHATML, &[])
}

fn completion(port: u16, body: &Value) -> Value {
    ok_json(port, "/v1/completions", body)
}

/// A JSON number as f32 bits.
fn bit(x: &Value) -> u32 {
    (x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")) as f32).to_bits()
}

fn bits(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(bit).collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Per position of a `prompt_logprobs` list (the first `null`): the bits of the log-prob of
/// the prompt's own token, read from its entry.
fn own_bits(list: &Value, prompt: &[u32]) -> Vec<u32> {
    let list = list
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"));
    assert_eq!(list.len(), prompt.len(), "{list:?}");
    assert!(list[0].is_null(), "{:?}", list[0]);
    prompt[1..]
        .iter()
        .zip(&list[1..])
        .map(|(id, position)| bit(&position[id.to_string()]["logprob"]))
        .collect()
}

/// Checks one position of a `prompt_logprobs` list with `k` alternatives: the prompt's own
/// token first (as written), the alternatives ranked 1..k, most likely first, the own
/// token's rank its place among them when it is one; returns the rank-1 alternative's
/// log-prob bits.
fn check_position(position: &Value, own: u32, k: usize, written: &str) -> u32 {
    let map = position.as_object().unwrap();
    let own_entry = &map[&own.to_string()];
    let own_rank = own_entry["rank"]
        .as_u64()
        .unwrap_or_else(|| panic!("no rank for the prompt's token: {position}"));
    assert!(own_rank >= 1, "{position}");
    // The first key as written (serde_json's map sorts its keys).
    let first_key = written.split('"').nth(1).unwrap();
    assert_eq!(first_key, own.to_string(), "{written}");
    let mut ranked: Vec<(u64, u32, &str)> = map
        .iter()
        .map(|(id, e)| (e["rank"].as_u64().unwrap(), bit(&e["logprob"]), id.as_str()))
        .collect();
    ranked.sort();
    let ranks: Vec<u64> = ranked.iter().map(|r| r.0).collect();
    let mut expected: Vec<u64> = (1..=k as u64).collect();
    if own_rank as usize > k {
        expected.push(own_rank);
    }
    assert_eq!(ranks, expected, "{position}");
    let logprobs: Vec<f32> = ranked.iter().map(|r| f32::from_bits(r.1)).collect();
    assert!(
        logprobs.windows(2).all(|w| w[0] >= w[1]),
        "ranks out of log-prob order: {position}"
    );
    ranked[0].1
}

/// The `prompt_logprobs` positions as written, one text per position (after the `null`).
fn written_positions(body: &str) -> Vec<String> {
    let start =
        body.find("\"prompt_logprobs\":[null").expect(body) + "\"prompt_logprobs\":[null".len();
    let mut out = Vec::new();
    let (mut depth, mut begin) = (0, 0);
    for (i, c) in body[start..].char_indices() {
        match c {
            '{' => {
                if depth == 0 {
                    begin = start + i;
                }
                depth += 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    out.push(body[begin..=start + i].to_string());
                }
            }
            ']' if depth == 0 => return out,
            _ => {}
        }
    }
    out
}

/// Writes rollout-style records and scores them with `sprout score`; each line's
/// `scored_logprobs` as bits.
fn sprout_score(records: &[(Vec<u32>, Vec<u32>)]) -> Vec<Vec<u32>> {
    let dir = std::env::temp_dir().join(format!("sprout-serve-scoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, out) = (dir.join("in.jsonl"), dir.join("out.jsonl"));
    let lines: Vec<String> = records
        .iter()
        .map(|(p, c)| json!({"prompt_token_ids": p, "token_ids": c}).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["score", "--model", tiny_llama().to_str().unwrap(), "--in"])
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let scored: Vec<Vec<u32>> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| bits(&serde_json::from_str::<Value>(l).unwrap()["scored_logprobs"]))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    scored
}

#[test]
fn scoring_equals_the_rollout_and_sprout_score_bitwise() {
    let server = start();
    let port = server.port;
    // A rollout in the default raw log-probs mode, one alternative per token.
    let rollout = completion(
        port,
        &json!({"prompt": PROMPT, "max_tokens": 10, "seed": 7, "ignore_eos": true,
                "logprobs": 1, "return_token_ids": true}),
    );
    let choice = &rollout["choices"][0];
    let prompt = ids(&choice["prompt_token_ids"]);
    let drawn = ids(&choice["token_ids"]);
    let drawn_bits = bits(&choice["logprobs"]["token_logprobs"]);
    assert_eq!(drawn.len(), 10);
    let whole: Vec<u32> = prompt.iter().chain(&drawn).copied().collect();
    let tail = |v: &[u32]| v[prompt.len() - 1..].to_vec();

    // echo + logprobs + max_tokens 0: the prompt's log-probs, nothing generated.
    let echoed = completion(
        port,
        &json!({"prompt": whole, "echo": true, "logprobs": 1, "max_tokens": 0}),
    );
    let e = &echoed["choices"][0];
    assert_eq!(e["finish_reason"], "length", "{echoed}");
    assert_eq!(echoed["usage"]["completion_tokens"], 0, "{echoed}");
    assert_eq!(
        e["logprobs"]["tokens"].as_array().unwrap().len(),
        whole.len()
    );
    assert!(e["logprobs"]["token_logprobs"][0].is_null(), "{e}");
    assert!(e["logprobs"]["top_logprobs"][0].is_null(), "{e}");
    let echo_bits = bits(&Value::Array(
        e["logprobs"]["token_logprobs"].as_array().unwrap()[1..].to_vec(),
    ));
    assert_eq!(tail(&echo_bits), drawn_bits, "echo vs the rollout");
    // The text is the prompt's: the tokens' text in order, as their offsets say.
    let text = e["text"].as_str().unwrap();
    let rollout_text = format!("{PROMPT}{}", choice["text"].as_str().unwrap());
    assert_eq!(text, rollout_text);

    // prompt_logprobs: the same bits, with their ranks and alternatives.
    let reply = post_json(
        port,
        "/v1/completions",
        &json!({"prompt": whole, "prompt_logprobs": 2, "max_tokens": 1}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let scored = reply.json();
    let list = &scored["choices"][0]["prompt_logprobs"];
    let prompt_bits = own_bits(list, &whole);
    assert_eq!(prompt_bits, echo_bits, "prompt_logprobs vs echo");
    let written = written_positions(&reply.body);
    assert_eq!(written.len(), whole.len() - 1);
    for (i, position) in list.as_array().unwrap()[1..].iter().enumerate() {
        let best = check_position(position, whole[i + 1], 2, &written[i]);
        // The rollout's one alternative is the most likely token of the same position.
        if i + 1 >= prompt.len() {
            let top = &choice["logprobs"]["top_logprobs"][i + 1 - prompt.len()];
            let (_, lp) = top.as_object().unwrap().iter().next().unwrap();
            assert_eq!(best, bit(lp), "position {}", i + 1);
        }
    }

    // sprout score, on the completion and on the whole as one forced completion.
    let cli = sprout_score(&[
        (prompt.clone(), drawn.clone()),
        (whole[..1].to_vec(), whole[1..].to_vec()),
    ]);
    assert_eq!(cli[0], drawn_bits, "sprout score vs the rollout");
    assert_eq!(cli[1], prompt_bits, "sprout score vs prompt_logprobs");

    // echo + logprobs with tokens to draw: the prompt's entries, then the completion's.
    let both = completion(
        port,
        &json!({"prompt": prompt, "echo": true, "logprobs": 1, "max_tokens": 10,
                "seed": 7, "ignore_eos": true}),
    );
    let b = &both["choices"][0]["logprobs"];
    let lps = b["token_logprobs"].as_array().unwrap();
    assert_eq!(lps.len(), whole.len());
    assert_eq!(bits(&Value::Array(lps[1..].to_vec())), echo_bits);
    assert_eq!(both["choices"][0]["text"].as_str().unwrap(), rollout_text);
}

#[test]
fn prompt_logprobs_come_per_prompt_with_n_a_batch_and_chat() {
    let server = start();
    let port = server.port;
    let alone = |text: &str| {
        let out = completion(
            port,
            &json!({"prompt": text, "prompt_logprobs": 1, "max_tokens": 1,
                    "return_token_ids": true}),
        );
        let c = &out["choices"][0];
        let prompt = ids(&c["prompt_token_ids"]);
        (own_bits(&c["prompt_logprobs"], &prompt), prompt)
    };
    let (first, first_ids) = alone(PROMPT);
    let (second, second_ids) = alone("A different, longer prompt to score");

    // A batch of prompts, n samples each, and a one-token prompt.
    let batch = completion(
        port,
        &json!({"prompt": [first_ids, second_ids, [first_ids[0]]], "n": 2,
                "prompt_logprobs": 1, "max_tokens": 3, "seed": 1}),
    );
    let choices = batch["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 6);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i, "{c}");
        match i / 2 {
            0 => assert_eq!(own_bits(&c["prompt_logprobs"], &first_ids), first),
            1 => assert_eq!(own_bits(&c["prompt_logprobs"], &second_ids), second),
            _ => assert_eq!(c["prompt_logprobs"], json!([null]), "{c}"),
        }
    }

    // Generate: at the top of the body, the completions route's entries exactly; with
    // max_tokens 0 nothing is drawn.
    let body = json!({"prompt": first_ids, "prompt_logprobs": 3, "max_tokens": 0, "echo": true,
                      "return_tokens_as_token_ids": true});
    let from_completions = completion(port, &body)["choices"][0]["prompt_logprobs"].clone();
    let generated = ok_json(
        port,
        "/inference/v1/generate",
        &json!({"token_ids": first_ids,
                "sampling_params": {"prompt_logprobs": 3, "max_tokens": 0}}),
    );
    assert_eq!(
        generated["prompt_logprobs"], from_completions,
        "{generated}"
    );
    assert_eq!(own_bits(&generated["prompt_logprobs"], &first_ids), first);
    assert_eq!(
        generated["choices"][0]["token_ids"],
        json!([]),
        "{generated}"
    );

    // Chat: at the top of the body, once, of the rendered prompt.
    let messages = json!([{"role": "user", "content": "Score this"}]);
    let reply = post_json(
        port,
        "/v1/chat/completions",
        &json!({"messages": messages, "prompt_logprobs": 2, "max_tokens": 2, "n": 2,
                "return_token_ids": true, "return_tokens_as_token_ids": true}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let chat = reply.json();
    let chat_ids = ids(&chat["prompt_token_ids"]);
    let list = &chat["prompt_logprobs"];
    assert!(
        chat["choices"][0].get("prompt_logprobs").is_none(),
        "{chat}"
    );
    let same = completion(
        port,
        &json!({"prompt": chat_ids, "prompt_logprobs": 2, "max_tokens": 1}),
    );
    assert_eq!(
        own_bits(list, &chat_ids),
        own_bits(&same["choices"][0]["prompt_logprobs"], &chat_ids)
    );
    let written = written_positions(&reply.body);
    for (i, position) in list.as_array().unwrap()[1..].iter().enumerate() {
        check_position(position, chat_ids[i + 1], 2, &written[i]);
        for (id, entry) in position.as_object().unwrap() {
            assert_eq!(
                entry["decoded_token"],
                format!("token_id:{id}"),
                "{position}"
            );
        }
    }

    // A streamed echo with logprobs and nothing to draw: the prompt's entries.
    let reply = post_json(
        port,
        "/v1/completions",
        &json!({"prompt": first_ids, "echo": true, "logprobs": 0, "max_tokens": 0,
                "stream": true}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let chunk: Value = reply
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .find(|l| l.contains("token_logprobs"))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect(&reply.body);
    let lps = chunk["choices"][0]["logprobs"]["token_logprobs"]
        .as_array()
        .unwrap();
    assert_eq!(bits(&Value::Array(lps[1..].to_vec())), first);
    assert_eq!(chunk["choices"][0]["finish_reason"], "length");

    // What cannot be answered is a 400 naming the field.
    let refused = [
        (json!({"prompt": PROMPT, "max_tokens": 0}), "max_tokens"),
        (
            json!({"prompt": PROMPT, "prompt_logprobs": 1, "stream": true}),
            "prompt_logprobs",
        ),
        (
            json!({"prompt": PROMPT, "prompt_logprobs": 21}),
            "prompt_logprobs",
        ),
    ];
    for (body, param) in refused {
        let reply = post_json(port, "/v1/completions", &body);
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.json()["error"]["param"], param, "{}", reply.body);
    }
}

/// How a request is cut short.
#[derive(Clone, Copy, Debug)]
enum Cut {
    ById,
    All,
    Pause,
}

fn cut(port: u16, how: Cut, id: &str) {
    let (path, body) = match how {
        Cut::ById => ("/abort_requests", json!({"request_ids": [id]}).to_string()),
        Cut::All => ("/abort_requests", "{}".to_string()),
        Cut::Pause => ("/pause?mode=abort", String::new()),
    };
    let reply = http(port, "POST", path, &[], body.as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    if let Cut::Pause = how {
        assert_eq!(http(port, "POST", "/resume", &[], b"").status, 200);
    }
}

/// A sample as a route returns it: its token ids, their log-prob bits, its finish reason.
type Drawn = (Vec<u32>, Vec<u32>, String);

/// The completions or chat sample of a whole body or an event stream.
fn read_choice(body: &str, chat: bool) -> Drawn {
    let whole = |c: &Value| {
        let lps: Vec<u32> = match chat {
            true => c["logprobs"]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| bit(&t["logprob"]))
                .collect(),
            false => bits(&c["logprobs"]["token_logprobs"]),
        };
        (
            ids(&c["token_ids"]),
            lps,
            c["finish_reason"].as_str().unwrap_or("").to_string(),
        )
    };
    if !body.starts_with("data: ") {
        let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{body}"));
        return whole(&v["choices"][0]);
    }
    let mut out: Drawn = (Vec::new(), Vec::new(), String::new());
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(line).unwrap();
        assert!(chunk.get("error").is_none(), "{line}");
        for c in chunk["choices"].as_array().unwrap() {
            let (t, l, r) = whole(c);
            out.0.extend(t);
            out.1.extend(l);
            if !r.is_empty() {
                out.2 = r;
            }
        }
    }
    out
}

/// Runs `body` on `path`, cuts it short once tokens were drawn, and returns its sample.
fn aborted(port: u16, path: &'static str, body: Value, how: Cut, read: fn(&str) -> Drawn) -> Drawn {
    let before = generated(port);
    let id = body["request_id"].as_str().unwrap_or("").to_string();
    let running = std::thread::spawn(move || post_json(port, path, &body));
    await_generated(port, before);
    cut(port, how, &id);
    let reply = running.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    read(&reply.body)
}

fn read_text(body: &str) -> Drawn {
    read_choice(body, false)
}

fn read_chat(body: &str) -> Drawn {
    read_choice(body, true)
}

fn read_trl(body: &str) -> Drawn {
    let v: Value = serde_json::from_str(body).unwrap();
    let lps = v["logprobs"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|per_token| bit(&per_token[0]))
        .collect();
    let reason = v["finish_reasons"][0].as_str().unwrap().to_string();
    (ids(&v["completion_ids"][0]), lps, reason)
}

#[test]
fn aborts_return_what_was_drawn_on_every_route() {
    let server = start();
    let port = server.port;
    let messages = json!([{"role": "user", "content": "Go on"}]);
    let long = 200;
    let text = |stream: bool, id: &str| {
        json!({"prompt": PROMPT, "max_tokens": long, "ignore_eos": true, "seed": 5,
               "logprobs": 0, "return_token_ids": true, "stream": stream, "request_id": id})
    };
    let chat = |stream: bool, id: &str| {
        json!({"messages": messages, "max_tokens": long, "ignore_eos": true, "seed": 5,
               "logprobs": true, "return_token_ids": true, "stream": stream,
               "request_id": id})
    };
    let trl = |max_tokens: usize| {
        json!({"prompts": [PROMPT], "n": 1, "max_tokens": max_tokens,
               "generation_kwargs": {"seed": 5, "ignore_eos": true}})
    };
    type Case = (&'static str, Value, Cut, fn(&str) -> Drawn);
    let cases: Vec<Case> = vec![
        ("/v1/completions", text(false, "t-1"), Cut::ById, read_text),
        ("/v1/completions", text(true, "t-2"), Cut::ById, read_text),
        ("/v1/completions", text(false, "t-3"), Cut::Pause, read_text),
        (
            "/v1/chat/completions",
            chat(false, "c-1"),
            Cut::ById,
            read_chat,
        ),
        (
            "/v1/chat/completions",
            chat(true, "c-2"),
            Cut::Pause,
            read_chat,
        ),
        (
            "/v1/chat/completions",
            chat(true, "c-3"),
            Cut::All,
            read_chat,
        ),
        ("/generate/", trl(long), Cut::All, read_trl),
        ("/generate/", trl(long), Cut::Pause, read_trl),
    ];
    for (path, body, how, read) in cases {
        let why = format!("{path} {how:?} {body}");
        let (tokens, logprobs, reason) = aborted(port, path, body.clone(), how, read);
        assert_eq!(reason, "abort", "{why}");
        assert!(!tokens.is_empty(), "{why}: no tokens");
        assert!(tokens.len() < long, "{why}: not cut short");
        assert_eq!(tokens.len(), logprobs.len(), "{why}");
        // The same request unaborted, as long as what was drawn: the same tokens and bits.
        let mut again = body.clone();
        match path {
            "/generate/" => again["max_tokens"] = json!(tokens.len()),
            _ => {
                again["max_tokens"] = json!(tokens.len());
                again["stream"] = json!(false);
                again["request_id"] = Value::Null;
            }
        }
        let reply = post_json(port, path, &again);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let (full, full_logprobs, full_reason) = read(&reply.body);
        assert_eq!(full_reason, "length", "{why}");
        assert_eq!(
            tokens, full,
            "{why}: the partial is not what the seed draws"
        );
        assert_eq!(logprobs, full_logprobs, "{why}");
    }
}
