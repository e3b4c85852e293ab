//! LoRA adapters in `sprout serve`, end to end over HTTP on the tiny Llama fixture and its
//! PEFT adapter (tests/fixtures/lora/tiny-llama):
//! - a request whose `model` names the adapter draws bitwise what `sprout rollout --lora`
//!   draws (token ids and log-prob bits), greedy PEFT's tokens, and not the base's; the
//!   other routes that take `model` run it too;
//! - `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` in vLLM's shapes: in-place
//!   loads bump the version and change the tokens, so does a weights update (a version
//!   names the adapter over one base), a request in flight records per token the version
//!   that drew it, `/v1/models` lists the adapter with its parent;
//! - hostile and bad inputs get their status and a message naming the problem, and the
//!   adapter in force stays.
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
use http::{Reply, await_generated, generated, http, post_json};
use server::Server;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tiny_llama() -> PathBuf {
    root().join("tests/fixtures/tiny-llama")
}

fn fixture_adapter(model: &str) -> PathBuf {
    root().join("tests/fixtures/lora").join(model)
}

/// A directory of this test process's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("sprout-serve-lora-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A copy of the tiny Llama adapter under `name`, its config edited by `edit`.
    fn adapter(&self, name: &str, edit: impl Fn(&mut Value)) -> PathBuf {
        let from = fixture_adapter("tiny-llama");
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let text = std::fs::read_to_string(from.join("adapter_config.json")).unwrap();
        let mut config: Value = serde_json::from_str(&text).unwrap();
        edit(&mut config);
        std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
        std::fs::copy(
            from.join("adapter_model.safetensors"),
            dir.join("adapter_model.safetensors"),
        )
        .unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn complete(port: u16, body: &Value) -> Reply {
    post_json(port, "/v1/completions", body)
}

fn load(port: u16, body: &Value) -> Reply {
    post_json(port, "/v1/load_lora_adapter", body)
}

fn unload(port: u16, name: &str) -> Reply {
    post_json(
        port,
        "/v1/unload_lora_adapter",
        &json!({ "lora_name": name }),
    )
}

fn pause_keep(port: u16) {
    let reply = http(port, "POST", "/pause?mode=keep", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.body);
}

fn resume(port: u16) {
    let reply = http(port, "POST", "/resume", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.body);
}

fn models(port: u16) -> Vec<Value> {
    let reply = http(port, "GET", "/v1/models", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["data"].as_array().unwrap().clone()
}

fn ids(v: &Value) -> Vec<u64> {
    let list = v.as_array().unwrap_or_else(|| panic!("not a list: {v}"));
    list.iter().map(|x| x.as_u64().unwrap()).collect()
}

/// A list of JSON numbers as f32 bits (for bitwise comparison).
fn bits(v: &Value) -> Vec<u32> {
    let list = v.as_array().unwrap_or_else(|| panic!("not a list: {v}"));
    list.iter()
        .map(|x| (x.as_f64().unwrap() as f32).to_bits())
        .collect()
}

/// Each token's version of a finished choice (the one version when it did not change).
fn versions(choice: &Value) -> Vec<u64> {
    let sprout = &choice["sprout"];
    match sprout.get("weights_versions") {
        Some(all) => ids(all),
        None => vec![sprout["weights_version"].as_u64().unwrap()],
    }
}

/// Asserts `reply` is an error with `status` whose message contains `words`.
fn refused(reply: &Reply, status: u16, words: &str) -> Value {
    assert_eq!(reply.status, status, "{}", reply.body);
    let error = reply.json()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(words),
        "`{words}` is not in the message: {message}"
    );
    error
}

/// The tiny Llama reference's prompt ids (PEFT's greedy prompt) and greedy tokens.
fn reference() -> (Vec<u64>, Vec<u64>) {
    let path = fixture_adapter("tiny-llama").join("reference.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let g = &reference["greedy"];
    (ids(&g["prompt_ids"]), ids(&g["token_ids"]))
}

/// `sprout rollout` of `prompt` (n 2, seed 3, 8 tokens) with `--lora adapter`: its records.
fn rollout_with_lora(prompt: &[u64], adapter: &Path, scratch: &Scratch) -> Vec<Value> {
    let prompts = scratch.0.join("prompts.jsonl");
    let out = scratch.0.join("out.jsonl");
    let line = json!({ "prompt_token_ids": prompt });
    std::fs::write(&prompts, format!("{line}\n")).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["rollout", "--model", path_str(&tiny_llama()), "--lora"])
        .arg(adapter)
        .arg("--prompts")
        .arg(&prompts)
        .args(["-n", "2", "--seed", "3", "--max-tokens", "8", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_request_naming_the_adapter_draws_what_rollout_with_lora_draws() {
    let scratch = Scratch::new("cli");
    let adapter = scratch.adapter("tl-adapter", |_| {});
    let server = Server::tiny(&["--lora", path_str(&adapter)]);
    let port = server.port;
    let (prompt, greedy) = reference();

    // The base request first: had the adapter's prompt reused its blocks, its bits
    // would differ from the rollout's.
    let asked = |model: &str| {
        json!({"model": model, "prompt": prompt, "n": 2, "seed": 3, "max_tokens": 8,
               "logprobs": 1, "return_token_ids": true})
    };
    let base = complete(port, &asked("tiny-llama"));
    assert_eq!(base.status, 200, "{}", base.body);
    let reply = complete(port, &asked("tl-adapter"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let whole = reply.json();
    assert_eq!(whole["model"], "tl-adapter");
    let choices = whole["choices"].as_array().unwrap();
    let records = rollout_with_lora(&prompt, &fixture_adapter("tiny-llama"), &scratch);
    assert_eq!((choices.len(), records.len()), (2, 2));
    for (k, (c, r)) in choices.iter().zip(&records).enumerate() {
        assert_eq!(ids(&c["token_ids"]), ids(&r["token_ids"]), "sample {k}");
        assert_eq!(
            bits(&c["sprout"]["logprobs"]),
            bits(&r["logprobs"]),
            "sample {k}"
        );
        let token_logprobs = &c["logprobs"]["token_logprobs"];
        assert_eq!(bits(token_logprobs), bits(&r["logprobs"]), "sample {k}");
        assert_eq!(versions(c), vec![1], "sample {k}");
        assert_eq!(r["provenance"]["lora"]["version"], 1);
    }
    let base_choices = base.json()["choices"].as_array().unwrap().clone();
    for (k, (b, c)) in base_choices.iter().zip(choices).enumerate() {
        assert_ne!(
            (ids(&b["token_ids"]), bits(&b["sprout"]["logprobs"])),
            (ids(&c["token_ids"]), bits(&c["sprout"]["logprobs"])),
            "sample {k}: the adapter changes nothing"
        );
    }

    // Greedy: PEFT's own tokens with the adapter, others without it.
    let greedy_of = |model: &str| {
        let body = json!({"model": model, "prompt": prompt, "temperature": 0,
                          "max_tokens": greedy.len(), "return_token_ids": true,
                          "ignore_eos": true});
        let reply = complete(port, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        ids(&reply.json()["choices"][0]["token_ids"])
    };
    assert_eq!(greedy_of("tl-adapter"), greedy);
    assert_ne!(greedy_of("tiny-llama"), greedy);

    // /inference/v1/generate runs it too: the same first sample as completions'.
    let body = json!({"model": "tl-adapter", "token_ids": prompt,
                      "sampling_params": {"seed": 3, "max_tokens": 8}});
    let reply = post_json(port, "/inference/v1/generate", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let generated = reply.json();
    assert_eq!(
        ids(&generated["choices"][0]["token_ids"]),
        ids(&choices[0]["token_ids"])
    );
    // Chat, the render route and /tokenize take its name.
    let chat = json!({"model": "tl-adapter", "max_tokens": 2,
                      "messages": [{"role": "user", "content": "hi"}]});
    let reply = post_json(port, "/v1/chat/completions", &chat);
    // (The tiny model has no chat template: a 400 saying so, not a 404 for the name.)
    assert_ne!(reply.status, 404, "{}", reply.body);
    let render = json!({"model": "tl-adapter", "prompt": "hello"});
    let reply = post_json(port, "/v1/completions/render", &render);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = post_json(
        port,
        "/tokenize",
        &json!({"model": "tl-adapter", "prompt": "hi"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);

    // /v1/models lists it under the base, /health and /metrics name it.
    let listed = models(port);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["id"], "tiny-llama");
    assert_eq!(listed[1]["id"], "tl-adapter");
    assert_eq!(listed[1]["parent"], "tiny-llama");
    assert_eq!(listed[1]["root"], path_str(&adapter));
    assert_eq!(listed[1]["object"], "model");
    let health = http(port, "GET", "/health", &[], b"").json();
    assert_eq!(health["lora_adapter"]["name"], "tl-adapter", "{health}");
    let metrics = http(port, "GET", "/metrics", &[], b"").body;
    let line = "sprout:lora_adapter_loaded{model_name=\"tiny-llama\"} 1";
    assert!(metrics.lines().any(|l| l == line), "{metrics}");
}

#[test]
fn an_adapter_named_as_the_served_model_is_refused_at_start() {
    // The fixture's directory is named as the model's: the names would collide.
    let output = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args([
            "serve",
            "--model",
            path_str(&tiny_llama()),
            "--port",
            "0",
            "--lora",
        ])
        .arg(fixture_adapter("tiny-llama"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is the served model's"), "{stderr}");
}

/// Streams a long request with the adapter `name`; its choice's `sprout` fields once
/// finished.
fn long_stream(port: u16, name: &str) -> std::thread::JoinHandle<Value> {
    let body = json!({"model": name, "prompt": "Once upon a time", "max_tokens": 200,
                      "ignore_eos": true, "stream": true});
    std::thread::spawn(move || {
        let reply = complete(port, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let finished: Vec<Value> = reply
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .filter_map(|chunk| {
                let choice = chunk["choices"].as_array()?.first()?.clone();
                choice.get("sprout").is_some().then_some(choice)
            })
            .collect();
        assert_eq!(finished.len(), 1, "{}", reply.body);
        finished[0].clone()
    })
}

#[test]
fn in_place_loads_bump_the_version_and_each_token_records_its_own() {
    let scratch = Scratch::new("inplace");
    let a = scratch.adapter("a", |_| {});
    // Four times the scale: other contents, other tokens.
    let b = scratch.adapter("b", |c| c["lora_alpha"] = json!(64));
    let server = Server::tiny(&[]);
    let port = server.port;
    assert_eq!(models(port).len(), 1);
    let loaded = load(port, &json!({"lora_name": "ad", "lora_path": a}));
    assert_eq!(loaded.status, 200, "{}", loaded.body);
    assert_eq!(
        loaded.body,
        "Success: LoRA adapter 'ad' added successfully."
    );
    let listed = models(port);
    assert_eq!(
        (listed.len(), &listed[1]["parent"]),
        (2, &json!("tiny-llama"))
    );

    let probe = json!({"model": "ad", "prompt": "The quick brown fox", "seed": 5,
                       "max_tokens": 12, "ignore_eos": true, "return_token_ids": true});
    let sample = |port| {
        let reply = complete(port, &probe);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let choice = reply.json()["choices"][0].clone();
        let drawn = (
            ids(&choice["token_ids"]),
            bits(&choice["sprout"]["logprobs"]),
        );
        (drawn, versions(&choice))
    };
    let (first, v) = sample(port);
    assert_eq!(v, vec![1]);

    // The same name again: only in place.
    let again = load(port, &json!({"lora_name": "ad", "lora_path": a}));
    refused(&again, 400, "set 'load_inplace'");
    let inplace = json!({"lora_name": "ad", "lora_path": b, "load_inplace": true});
    assert_eq!(load(port, &inplace).status, 200);
    let (second, v) = sample(port);
    assert_eq!(v, vec![2]);
    assert_ne!(second.0, first.0, "other contents, the same tokens");
    // Back to the first contents: its bits again (no block of the other version reused).
    let back = json!({"lora_name": "ad", "lora_path": a, "load_inplace": true});
    assert_eq!(load(port, &back).status, 200);
    let (third, v) = sample(port);
    assert_eq!((third, v), (first.clone(), vec![3]));
    assert_eq!(models(port)[1]["lora_version"], 3);

    // A weights update relabels the adapter one version up, so that an adapter version
    // names its base too; with the same base weights, the same bits.
    let base_dir = json!({"weight_dir": path_str(&tiny_llama())});
    let updated = post_json(port, "/update_weights", &base_dir);
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(updated.json()["lora_version"], 4, "{}", updated.body);
    assert_eq!(models(port)[1]["lora_version"], 4);
    let (fourth, v) = sample(port);
    assert_eq!((fourth, v), (first, vec![4]));

    // In flight across an in-place load: each token says which version drew it.
    let before = generated(port);
    let running = long_stream(port, "ad");
    await_generated(port, before);
    pause_keep(port);
    assert_eq!(load(port, &inplace).status, 200);
    resume(port);
    let finished = running.join().unwrap();
    let per_token = versions(&finished);
    assert_eq!(per_token.len(), 200, "{finished}");
    assert!(per_token.windows(2).all(|w| w[0] <= w[1]), "{per_token:?}");
    assert_eq!(per_token.first(), Some(&4), "{per_token:?}");
    assert_eq!(per_token.last(), Some(&5), "{per_token:?}");

    // Unloading while a request with it runs: a 409 saying how many, then it finishes.
    let before = generated(port);
    let running = long_stream(port, "ad");
    await_generated(port, before);
    pause_keep(port);
    refused(&unload(port, "ad"), 409, "has 1 unfinished requests");
    resume(port);
    assert_eq!(versions(&running.join().unwrap()), vec![5]);
    let unloaded = unload(port, "ad");
    assert_eq!(unloaded.status, 200, "{}", unloaded.body);
    assert_eq!(
        unloaded.body,
        "Success: LoRA adapter 'ad' removed successfully."
    );

    // Gone: from the list, for requests, for a second unload.
    assert_eq!(models(port).len(), 1);
    let error = refused(&complete(port, &probe), 404, "`ad` does not exist");
    assert_eq!(error["param"], "model");
    refused(&unload(port, "ad"), 404, "cannot be found");
    // The base still serves, and another name may come now.
    let base = json!({"prompt": "The quick brown fox", "max_tokens": 2});
    assert_eq!(complete(port, &base).status, 200);
    let other = load(port, &json!({"lora_name": "other", "lora_path": b}));
    assert_eq!(other.status, 200, "{}", other.body);
    assert_eq!(models(port)[1]["lora_version"], 1);
}

#[test]
fn bad_loads_and_unloads_are_refused_and_the_adapter_in_force_stays() {
    let scratch = Scratch::new("bad");
    let good = scratch.adapter("good", |_| {});
    let wide = scratch.adapter("wide", |c| c["r"] = json!(16));
    let server = Server::tiny(&["--max-lora-rank", "8"]);
    let port = server.port;
    let body = |v: Value| load(port, &v);
    let param = |reply: Reply, status, field: &str, words: &str| {
        let error = refused(&reply, status, words);
        assert_eq!(error["param"], field, "{error}");
    };
    let good_path = path_str(&good);

    param(
        body(json!({"lora_path": good_path})),
        400,
        "lora_name",
        "lora_name is required",
    );
    param(
        body(json!({"lora_name": "x"})),
        400,
        "lora_path",
        "lora_path is required",
    );
    param(
        body(json!({"lora_name": 7, "lora_path": good_path})),
        400,
        "lora_name",
        "a string",
    );
    param(
        body(json!({"lora_name": "x", "lora_path": ["p"]})),
        400,
        "lora_path",
        "a string",
    );
    let inplace_text = json!({"lora_name": "x", "lora_path": good_path, "load_inplace": "yes"});
    param(body(inplace_text), 400, "load_inplace", "a boolean");
    let unknown = json!({"lora_name": "x", "lora_path": good_path, "lora_int_id": 1});
    param(
        body(unknown),
        400,
        "lora_int_id",
        "unknown fields: lora_int_id",
    );
    param(
        body(json!({"lora_name": "", "lora_path": good_path})),
        400,
        "lora_name",
        "empty",
    );
    let long = "n".repeat(257);
    param(
        body(json!({"lora_name": long, "lora_path": good_path})),
        400,
        "lora_name",
        "257 bytes",
    );
    let base_name = json!({"lora_name": "tiny-llama", "lora_path": good_path});
    param(body(base_name), 400, "lora_name", "served model's name");
    let missing = scratch.0.join("missing");
    let nowhere = json!({"lora_name": "x", "lora_path": missing});
    param(body(nowhere), 400, "lora_path", "is not a directory");
    param(
        body(json!({"lora_name": "x", "lora_path": ""})),
        400,
        "lora_path",
        "empty",
    );
    let wide_load = json!({"lora_name": "x", "lora_path": wide});
    param(
        body(wide_load),
        400,
        "lora_path",
        "rank 16, above the largest LoRA rank allowed, 8",
    );
    // Another family's adapter: other layers or shapes than the model's.
    let gemma = json!({"lora_name": "x", "lora_path": fixture_adapter("tiny-gemma3")});
    assert_eq!(body(gemma).status, 400);
    let reply = http(port, "POST", "/v1/load_lora_adapter", &[], b"{not json");
    refused(&reply, 400, "not valid JSON");
    let reply = http(port, "POST", "/v1/load_lora_adapter", &[], b"[1]");
    refused(&reply, 400, "a JSON object");
    // Nothing was loaded by any of them.
    assert_eq!(models(port).len(), 1);
    let probe = json!({"model": "x", "prompt": "The quick brown fox", "max_tokens": 2});
    refused(&complete(port, &probe), 404, "does not exist");

    // One adapter at a time.
    assert_eq!(
        body(json!({"lora_name": "x", "lora_path": good_path})).status,
        200
    );
    let second = body(json!({"lora_name": "y", "lora_path": good_path}));
    param(second, 409, "lora_name", "'x' is loaded");
    // A bad in-place load leaves the adapter in force as it was.
    let bad_inplace = json!({"lora_name": "x", "lora_path": wide, "load_inplace": true});
    assert_eq!(body(bad_inplace).status, 400);
    let reply = complete(port, &probe);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(versions(&reply.json()["choices"][0]), vec![1]);
    assert_eq!(models(port)[1]["lora_version"], 1);

    // Unload: unknown names, bad bodies.
    refused(
        &unload(port, "y"),
        404,
        "The lora adapter 'y' cannot be found.",
    );
    let reply = post_json(port, "/v1/unload_lora_adapter", &json!({}));
    param(reply, 400, "lora_name", "lora_name is required");
    let reply = post_json(
        port,
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "x", "z": 1}),
    );
    param(reply, 400, "z", "unknown fields: z");
    assert_eq!(models(port).len(), 2);

    // A request held by a pause counts as unfinished: unloading would strand it.
    pause_keep(port);
    let held = std::thread::spawn(move || complete(port, &probe));
    await_waiting(port);
    refused(&unload(port, "x"), 409, "has 1 unfinished requests");
    resume(port);
    let reply = held.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(unload(port, "x").status, 200);
}

/// Waits (60 s at most) until `/metrics` counts a request waiting.
fn await_waiting(port: u16) {
    let start = std::time::Instant::now();
    loop {
        let text = http(port, "GET", "/metrics", &[], b"").body;
        let waiting = text
            .lines()
            .filter(|l| l.starts_with("vllm:num_requests_waiting"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        if waiting >= 1.0 {
            return;
        }
        assert!(start.elapsed().as_secs() < 60, "no request came to wait");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
