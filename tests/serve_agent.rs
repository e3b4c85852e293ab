//! Multi-turn agent episodes through `sprout serve` on the tiny Qwen3 fixture, whose
//! `chat_template.jinja` is Qwen3's own (thinking, tools, tool responses), with a tool in
//! every request, thinking on, and the server parsing Hermes calls and Qwen3 reasoning.
//! With NeMo Gym's token fields carried back on each assistant message (beside its
//! reasoning and tool call), every turn's prompt starts with the previous turn's prompt
//! and sampled tokens exactly, the final trajectory is the concatenation of each turn's
//! prompt delta and sampled ids, and each turn finds all earlier tokens in the prefix
//! cache (down to a whole KV block). Without the fields, the re-rendered prompt does not
//! hold what was sampled (the drift the fields prevent), and Qwen3's template drops an
//! earlier turn's `<think>` block, which the fields keep. `/tokenize` splices the fields
//! as the chat route does. A chat with tools samples bitwise what `sprout rollout` samples
//! from the same prompt ids, with other traffic in the batch. Bad token fields are 400s
//! naming them.
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

/// The server's KV block size (its default).
const BLOCK: usize = 16;
/// The tiny Qwen3's `<|im_end|>`, its EOS and end of every turn.
const IM_END: u64 = 351;
const TURNS: usize = 4;

fn start() -> Server {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3");
    let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
    command.args(["serve", "--model", model.to_str().unwrap(), "--port", "0"]);
    command.args(["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]);
    command.args(["--reasoning-parser", "qwen3"]);
    Server::spawn(command)
}

/// The episode's one tool, in OpenAI's shape.
fn calculator() -> Value {
    json!({"type": "function", "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression.",
        "parameters": {"type": "object",
                       "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}})
}

/// The assistant message the environment sends back for turn `k`: the reply's content
/// and reasoning, and the call it read from it (a random model writes no well-formed
/// call, so the environment reads every reply as a call to the calculator).
fn assistant_turn(message: &Value, k: usize) -> Value {
    json!({"role": "assistant", "content": message["content"],
           "reasoning_content": message["reasoning_content"],
           "tool_calls": [{"id": format!("call_{k}"), "type": "function",
                           "function": {"name": "calculator",
                                        "arguments": format!("{{\"expression\": \"{k}+5\"}}")}}]})
}

fn ids(v: &Value) -> Vec<u64> {
    let list = v.as_array().unwrap_or_else(|| panic!("not a list: {v}"));
    list.iter().map(|x| x.as_u64().unwrap()).collect()
}

fn bits(v: &Value) -> Vec<u32> {
    let list = v.as_array().unwrap_or_else(|| panic!("not a list: {v}"));
    list.iter()
        .map(|x| (x.as_f64().unwrap() as f32).to_bits())
        .collect()
}

/// One turn as the client saw it.
struct Turn {
    prompt: Vec<u64>,
    generated: Vec<u64>,
    cached: usize,
}

/// A 4-turn episode: a task, then per turn the model's reply and a tool's answer.
/// `carry`: each assistant message goes back with the response's token fields.
fn episode(port: u16, carry: bool) -> Vec<Turn> {
    let mut messages = vec![json!({"role": "user", "content": "What is 2+3? Use the calculator."})];
    let mut turns = Vec::new();
    for k in 0..TURNS {
        let body = json!({"messages": messages, "tools": [calculator()], "max_tokens": 12,
                          "seed": 40 + k, "return_token_ids": true,
                          "chat_template_kwargs": {"enable_thinking": true}});
        let r = ok_json(port, "/v1/chat/completions", &body);
        if carry {
            // `/tokenize` splices the carried tokens as the chat route does.
            let mut tokenize = body.clone();
            for name in ["max_tokens", "seed", "return_token_ids"] {
                tokenize.as_object_mut().unwrap().remove(name);
            }
            let t = ok_json(port, "/tokenize", &tokenize);
            assert_eq!(t["tokens"], r["prompt_token_ids"], "turn {k}");
        }
        let choice = &r["choices"][0];
        let message = &choice["message"];
        // The message's fields are the response's own ids and log-probs.
        assert_eq!(message["prompt_token_ids"], r["prompt_token_ids"], "{r}");
        assert_eq!(message["generation_token_ids"], choice["token_ids"], "{r}");
        assert_eq!(
            bits(&message["generation_log_probs"]),
            bits(&choice["sprout"]["logprobs"]),
            "{r}"
        );
        let mut reply = assistant_turn(message, k);
        if carry {
            for name in [
                "prompt_token_ids",
                "generation_token_ids",
                "generation_log_probs",
            ] {
                reply[name] = message[name].clone();
            }
        }
        messages.push(reply);
        let answer = format!("{}", k + 5);
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{k}"),
                             "content": answer}));
        turns.push(Turn {
            prompt: ids(&message["prompt_token_ids"]),
            generated: ids(&message["generation_token_ids"]),
            cached: r["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap() as usize,
        });
    }
    turns
}

/// What turn `k + 1`'s prompt must start with: turn `k`'s prompt and sampled ids.
fn seen(turn: &Turn) -> Vec<u64> {
    [turn.prompt.as_slice(), &turn.generated].concat()
}

#[test]
fn an_episode_with_token_fields_never_drifts_and_hits_the_prefix_cache() {
    let server = start();
    let turns = episode(server.port, true);
    let mut trajectory: Vec<u64> = Vec::new();
    for (k, turn) in turns.iter().enumerate() {
        assert!(
            turn.prompt.starts_with(&trajectory),
            "turn {k}: the prompt does not extend the trajectory"
        );
        let delta = &turn.prompt[trajectory.len()..];
        if k > 0 {
            let earlier = seen(&turns[k - 1]);
            assert!(turn.prompt.starts_with(&earlier), "turn {k}");
            // Everything the model computed before (all but the last sampled token, which
            // was never fed back) came from the cache, whole blocks of it.
            let computed = earlier.len() - 1;
            let floor = computed / BLOCK * BLOCK;
            assert!(
                turn.cached >= floor && turn.cached <= turn.prompt.len(),
                "turn {k}: {} cached tokens, {computed} computed before",
                turn.cached
            );
        }
        eprintln!(
            "turn {k}: prompt {} (delta {}), sampled {}, cached {}",
            turn.prompt.len(),
            delta.len(),
            turn.generated.len(),
            turn.cached
        );
        trajectory.extend_from_slice(delta);
        trajectory.extend_from_slice(&turn.generated);
    }
    assert_eq!(trajectory, seen(&turns[TURNS - 1]));
    // The trajectory holds the template's tools block and each tool's answer but the
    // last's (the episode ends on the model's turn).
    let text = ok_json(server.port, "/detokenize", &json!({ "tokens": trajectory }));
    let text = text["prompt"].as_str().unwrap();
    assert!(
        text.contains("<tools>") && text.contains("\"calculator\""),
        "{text}"
    );
    assert_eq!(text.matches("<tool_response>").count(), TURNS - 1, "{text}");
}

#[test]
fn a_chat_with_tools_samples_bitwise_what_the_rollout_command_samples() {
    let server = start();
    let port = server.port;
    // Other traffic shares the batch with the request below.
    let busy = std::thread::spawn(move || {
        let body = json!({"messages": [{"role": "user", "content": "Count to ten."}],
                          "n": 3, "max_tokens": 40, "ignore_eos": true});
        post_json(port, "/v1/chat/completions", &body)
    });
    let messages = json!([{"role": "system", "content": "You are terse."},
                          {"role": "user", "content": "What is 7*6? Use the calculator."}]);
    let body = json!({"messages": messages, "tools": [calculator()], "n": 4, "seed": 9,
                      "max_tokens": 16, "return_token_ids": true});
    let r = ok_json(port, "/v1/chat/completions", &body);
    assert_eq!(busy.join().unwrap().status, 200);
    let prompt = ids(&r["prompt_token_ids"]);

    let dir = std::env::temp_dir().join(format!("sprout-agent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prompts = dir.join("prompts.jsonl");
    let out = dir.join("out.jsonl");
    std::fs::write(
        &prompts,
        format!("{}\n", json!({ "prompt_token_ids": prompt })),
    )
    .unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3");
    let status = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["rollout", "--model", model.to_str().unwrap(), "--prompts"])
        .arg(&prompts)
        .args(["-n", "4", "--seed", "9", "--max-tokens", "16", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let records: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let choices = r["choices"].as_array().unwrap();
    assert_eq!((choices.len(), records.len()), (4, 4));
    for (k, (c, record)) in choices.iter().zip(&records).enumerate() {
        assert_eq!(ids(&record["prompt_token_ids"]), prompt, "sample {k}");
        assert_eq!(
            ids(&c["token_ids"]),
            ids(&record["token_ids"]),
            "sample {k}"
        );
        assert_eq!(
            bits(&c["sprout"]["logprobs"]),
            bits(&record["logprobs"]),
            "sample {k}"
        );
    }
}

#[test]
fn without_token_fields_the_re_rendered_prompt_drifts() {
    let server = start();
    let turns = episode(server.port, false);
    // The model's text, re-tokenized inside the template (replacement characters for
    // bytes that were not whole characters, special tokens left out of the text), is not
    // the ids it sampled: some later prompt does not start with what came before.
    let drifted: Vec<usize> = (1..TURNS)
        .filter(|&k| !turns[k].prompt.starts_with(&seen(&turns[k - 1])))
        .collect();
    eprintln!("re-rendered prompts that drifted: turns {drifted:?}");
    assert!(
        !drifted.is_empty(),
        "every re-rendered prompt held the sampled ids: no drift to show"
    );
}

/// The tokens of `text` as the server's tokenizer gives them.
fn tokens(port: u16, text: &str) -> Vec<u64> {
    let r = ok_json(
        port,
        "/tokenize",
        &json!({"prompt": text, "add_special_tokens": false}),
    );
    ids(&r["tokens"])
}

#[test]
fn an_earlier_thinking_turn_is_kept_although_qwen3_s_template_drops_it() {
    let server = start();
    let port = server.port;
    let render = |body: Value| ok_json(port, "/v1/chat/completions/render", &body);
    let task = json!({"role": "user", "content": "What is 2+3?"});
    let first = ids(&render(json!({"messages": [task]}))["token_ids"]);
    let text = "<think>\nadd them\n</think>\n\nfive";
    let sampled = [tokens(port, text), vec![IM_END]].concat();
    let prefix = [first.clone(), sampled.clone()].concat();
    let reply = json!({"role": "assistant", "content": text});
    let follow_up = json!({"role": "user", "content": "And times 4?"});

    // Plain: a user message follows, so the template drops the reasoning.
    let plain = render(json!({"messages": [task, reply, follow_up]}));
    assert!(!plain["prompt"].as_str().unwrap().contains("<think>"));
    let plain = ids(&plain["token_ids"]);
    assert!(!plain.starts_with(&prefix));
    // The template's tokens after the first reply's end: the follow-up and the
    // generation prompt.
    let ends: Vec<usize> = (0..plain.len()).filter(|&i| plain[i] == IM_END).collect();
    let tail = plain[ends[1] + 1..].to_vec();

    let mut carried = reply.clone();
    carried["prompt_token_ids"] = json!(first);
    carried["generation_token_ids"] = json!(sampled);
    let kept = ids(&render(json!({"messages": [task, carried, follow_up]}))["token_ids"]);
    assert_eq!(kept, [prefix.clone(), tail.clone()].concat());

    // The same prefix named explicitly.
    let named = render(json!({"messages": [task, reply, follow_up],
                              "required_prefix_token_ids": prefix}));
    assert_eq!(ids(&named["token_ids"]), kept);
}

#[test]
fn bad_token_fields_are_400s_naming_them() {
    let server = start();
    let task = json!({"role": "user", "content": "hi"});
    let assistant = |extra: Value| {
        let mut m = json!({"role": "assistant", "content": "x"});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        m
    };
    let long: Vec<u64> = vec![5; 3000];
    let cases = [
        (
            json!({"messages": [task, assistant(json!({"prompt_token_ids": [1],
                   "generation_token_ids": [400]}))]}),
            "messages[1].generation_token_ids",
        ),
        (
            json!({"messages": [task, assistant(json!({"prompt_token_ids": [1]}))]}),
            "messages[1].generation_token_ids",
        ),
        (
            json!({"messages": [task, assistant(json!({"prompt_token_ids": [1],
                   "generation_token_ids": [2], "generation_log_probs": []}))]}),
            "messages[1].generation_log_probs",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi", "prompt_token_ids": [1],
                                 "generation_token_ids": [2]}]}),
            "messages[0].prompt_token_ids",
        ),
        (
            json!({"messages": [task], "required_prefix_token_ids": long}),
            "required_prefix_token_ids",
        ),
        (
            json!({"messages": [task], "required_prefix_token_ids": [1, -2]}),
            "required_prefix_token_ids",
        ),
    ];
    for (body, name) in cases {
        let reply = post_json(server.port, "/v1/chat/completions", &body);
        assert_eq!(reply.status, 400, "{name}: {}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(error["param"], name, "{}", reply.body);
        assert!(
            error["message"].as_str().unwrap().contains(name),
            "{}",
            reply.body
        );
    }
}
