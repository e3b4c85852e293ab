//! `sprout serve`'s sleep and wake over HTTP on the tiny Llama fixture: each level frees
//! the device memory the server reports (under 5% of it left) and wakes to bitwise the
//! samples it drew before (level 2 after the same weights come back as an update); the
//! requests in flight when a sleep comes wait, abort or are kept as `mode` says; requests
//! that come while it sleeps get 503 with Retry-After, or wait with
//! `--queue-while-asleep`; and bad sequences of calls (waking what is awake, sleeping
//! twice, an update while the weights sleep, unknown levels, modes and tags) are
//! answered, naming the problem, without breaking what follows.
//!
//! The server runs the model on the GPU: with no adapter it cannot start, and these
//! tests fail.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "common/http.rs"]
mod http;
#[path = "common/server.rs"]
mod server;
use http::{Reply, http, ok_json, post_json};
use server::Server;

const PROMPT: &str = "The quick brown fox";

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

fn post(port: u16, path: &str) -> Reply {
    http(port, "POST", path, &[], b"")
}

fn get(port: u16, path: &str) -> Value {
    let reply = http(port, "GET", path, &[], b"");
    assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    reply.json()
}

/// POSTs `path` with no body and expects a 200; its JSON.
fn ok(port: u16, path: &str) -> Value {
    let reply = post(port, path);
    assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    reply.json()
}

fn complete(port: u16, body: &Value) -> Reply {
    post_json(port, "/v1/completions", body)
}

fn update(port: u16, version: u64) -> Reply {
    let body = json!({"weight_dir": tiny_llama(), "weights_version": version});
    post_json(port, "/update_weights", &body)
}

/// Each choice's token ids and log-probs (as bits).
fn samples(reply: &Value) -> Vec<(Value, Vec<u32>)> {
    let choices = reply["choices"].as_array().expect("choices");
    choices
        .iter()
        .map(|c| {
            let logprobs = c["sprout"]["logprobs"].as_array().expect("log-probs");
            let bits = logprobs
                .iter()
                .map(|x| (x.as_f64().unwrap() as f32).to_bits());
            (c["token_ids"].clone(), bits.collect())
        })
        .collect()
}

fn probe() -> Value {
    json!({"prompt": PROMPT, "n": 2, "seed": 11, "max_tokens": 12, "return_token_ids": true})
}

fn memory(port: u16) -> u64 {
    get(port, "/health")["gpu_memory_bytes"].as_u64().unwrap()
}

/// A metric's value (the first line of that name).
fn metric(port: u16, name: &str) -> f64 {
    let text = http(port, "GET", "/metrics", &[], b"").body;
    let line = text.lines().find(|l| l.starts_with(name));
    let line = line.unwrap_or_else(|| panic!("no {name} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn await_metric(port: u16, name: &str, value: f64) {
    let start = Instant::now();
    while metric(port, name) != value {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name} never reached {value}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A request while asleep: 503, Retry-After, and a message naming `why`.
fn assert_refused(port: u16, why: &str) {
    let refused = complete(port, &probe());
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused.header("retry-after").is_some(),
        "{}",
        refused.headers
    );
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(why), "{message}");
}

#[test]
fn each_level_frees_the_device_memory_and_wakes_to_bitwise_the_same_samples() {
    let server = Server::tiny(&[]);
    let port = server.port;
    let before = samples(&ok_json(port, "/v1/completions", &probe()));
    for level in [1, 2] {
        let held = memory(port);
        let slept = ok(port, &format!("/sleep?level={level}"));
        assert_eq!(slept["level"], level);
        assert_eq!(slept["gpu_memory_bytes_before"], held);
        let asleep = get(port, "/health");
        let left = asleep["gpu_memory_bytes"].as_u64().unwrap();
        assert!(
            left * 20 < held,
            "level {level}: {left} bytes held asleep, {held} awake ({asleep})"
        );
        assert_eq!(slept["gpu_memory_bytes"], left);
        // What live buffers take is part of what the device gave, and goes with it.
        let allocated = asleep["gpu_memory_allocated_bytes"].as_u64().unwrap();
        assert!(
            allocated <= left,
            "{allocated} allocated of {left} ({asleep})"
        );
        let weights = if level == 1 { "host" } else { "discarded" };
        assert_eq!(asleep["weights"], weights);
        assert_eq!(get(port, "/is_sleeping")["is_sleeping"], true);
        assert_eq!(metric(port, "sprout:is_sleeping"), 1.0);
        assert_refused(port, "asleep");

        if level == 1 {
            let woke = ok(port, "/wake_up");
            assert_eq!(woke["woken"], json!(["weights", "kv_cache", "scheduling"]));
        } else {
            // vLLM's level-2 order: the weights, an update into them, then the KV cache.
            let woke = ok(port, "/wake_up?tags=weights");
            assert_eq!(
                (&woke["woken"], &woke["is_sleeping"], &woke["weights"]),
                (&json!(["weights"]), &json!(true), &json!("discarded"))
            );
            assert_refused(port, "asleep");
            let updated = update(port, 1);
            assert_eq!(updated.status, 200, "{}", updated.body);
            let woke = ok(port, "/wake_up?tags=kv_cache");
            assert_eq!(woke["woken"], json!(["kv_cache", "scheduling"]));
        }
        assert_eq!(get(port, "/is_sleeping")["is_sleeping"], false);
        assert_eq!(get(port, "/health")["weights"], "device");
        assert!(memory(port) * 2 > held, "the memory came back");
        let after = samples(&ok_json(port, "/v1/completions", &probe()));
        assert_eq!(after, before, "after a level-{level} sleep");
    }
}

#[test]
fn requests_in_flight_when_a_sleep_comes_wait_abort_or_are_kept_as_mode_says() {
    let server = Server::tiny(&[]);
    let port = server.port;
    let long = |max_tokens: u32| {
        json!({"prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": true, "seed": 3,
               "return_token_ids": true})
    };

    // wait (the default): the request finishes whole, then the server sleeps.
    let body = long(240);
    let running = std::thread::spawn(move || complete(port, &body));
    await_metric(port, "vllm:num_requests_running", 1.0);
    assert_eq!(ok(port, "/sleep")["mode"], "wait");
    let done = running.join().unwrap().json();
    assert_eq!(done["choices"][0]["finish_reason"], "length", "{done}");
    ok(port, "/wake_up");

    // abort: the request ends at once with what it had.
    let body = long(240);
    let running = std::thread::spawn(move || complete(port, &body));
    await_metric(port, "vllm:num_requests_running", 1.0);
    ok(port, "/sleep?mode=abort");
    let cut = running.join().unwrap().json();
    assert_eq!(cut["choices"][0]["finish_reason"], "abort", "{cut}");
    ok(port, "/wake_up");

    // keep: the request is preempted, waits through a level-2 sleep and an update to the
    // same weights, and finishes bitwise as a request never interrupted.
    let straight = samples(&ok_json(port, "/v1/completions", &long(200)));
    let body = long(200);
    let running = std::thread::spawn(move || complete(port, &body));
    await_metric(port, "vllm:num_requests_running", 1.0);
    // Paused first, so the request is surely in flight when the sleep comes.
    assert_eq!(post(port, "/pause?mode=keep").status, 200);
    let slept = ok(port, "/sleep?level=2&mode=keep");
    assert_eq!(slept["preempted"], 1, "{slept}");
    ok(port, "/wake_up?tags=weights");
    assert_eq!(update(port, 1).status, 200);
    ok(port, "/wake_up?tags=kv_cache");
    assert_eq!(ok(port, "/resume")["paused"], false);
    let kept = running.join().unwrap().json();
    assert_eq!(samples(&kept), straight, "{kept}");
}

#[test]
fn with_queue_while_asleep_a_request_waits_for_the_wake() {
    let server = Server::tiny(&["--queue-while-asleep"]);
    let port = server.port;
    let before = samples(&ok_json(port, "/v1/completions", &probe()));
    ok(port, "/sleep");
    let waiting = std::thread::spawn(move || complete(port, &probe()));
    await_metric(port, "vllm:num_requests_waiting", 1.0);
    assert!(!waiting.is_finished());
    ok(port, "/wake_up");
    let reply = waiting.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(samples(&reply.json()), before);
}

#[test]
fn bad_sequences_of_calls_are_answered_naming_the_problem() {
    let server = Server::tiny(&[]);
    let port = server.port;
    let before = samples(&ok_json(port, "/v1/completions", &probe()));

    // Waking what is awake wakes nothing.
    let woke = ok(port, "/wake_up");
    assert_eq!(
        (&woke["woken"], &woke["is_sleeping"]),
        (&json!([]), &json!(false))
    );

    // Unknown levels, modes, tags and keys: 400 naming them, and nothing sleeps.
    for (path, param) in [
        ("/sleep?level=3", "level"),
        ("/sleep?level=one", "level"),
        ("/sleep?mode=later", "mode"),
        ("/wake_up?tags=memory", "tags"),
        ("/wake_up?tag=weights", "tag"),
    ] {
        let refused = post(port, path);
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
        let error = &refused.json()["error"];
        assert_eq!(error["param"], param, "{path}: {error}");
    }
    let refused = post(port, "/sleep?lvl=1");
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("lvl"), "{}", refused.body);
    assert_eq!(get(port, "/is_sleeping")["is_sleeping"], false);

    // Level 0 stops stepping only; `scheduling` wakes it.
    ok(port, "/sleep?level=0");
    assert_eq!(get(port, "/health")["weights"], "device");
    assert_refused(port, "asleep");
    assert_eq!(
        ok(port, "/wake_up?tags=scheduling")["woken"],
        json!(["scheduling"])
    );

    // Sleeping twice: the second does nothing more.
    ok(port, "/sleep?level=1");
    let again = ok(port, "/sleep?level=1");
    assert_eq!(again["gpu_memory_bytes"], again["gpu_memory_bytes_before"]);
    let state = get(port, "/is_sleeping");
    assert_eq!(
        (&state["level"], &state["weights"]),
        (&json!(1), &json!("host"))
    );

    // An update while the weights sleep would put them back on the device: refused.
    let refused = update(port, 1);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains("/wake_up?tags=weights"),
        "{}",
        refused.body
    );

    // Level 2 after level 1 discards the weights kept in host memory; waking everything
    // without an update leaves the server awake but unable to serve until one comes.
    ok(port, "/sleep?level=2");
    assert_eq!(get(port, "/is_sleeping")["weights"], "discarded");
    let woke = ok(port, "/wake_up");
    assert_eq!(
        (&woke["is_sleeping"], &woke["weights"]),
        (&json!(false), &json!("discarded"))
    );
    assert_refused(port, "update_weights");
    let updated = update(port, 1);
    assert_eq!(updated.status, 200, "{}", updated.body);
    let after = samples(&ok_json(port, "/v1/completions", &probe()));
    assert_eq!(after, before);
    assert_eq!(metric(port, "sprout:is_sleeping"), 0.0);
}
