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
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

/// A running `sprout serve`; killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts the server on the tiny model on a free port and waits until it listens.
    fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
            .args([
                "serve",
                "--model",
                tiny_llama().to_str().unwrap(),
                "--port",
                "0",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting sprout serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        // Reads stderr to the end (so the server never blocks on a full pipe), passing
        // the port on once it is printed.
        std::thread::spawn(move || {
            let mut seen = String::new();
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1)
                    && let Some(port) = rest.rsplit(':').next()
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(Ok(port.trim().parse::<u16>().unwrap()));
                }
                seen.push_str(&line);
                seen.push('\n');
            }
            if let Some(tx) = tx {
                let _ = tx.send(Err(seen));
            }
        });
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(Ok(port)) => Server { child, port },
            Ok(Err(stderr)) => panic!("sprout serve exited before listening:\n{stderr}"),
            Err(_) => panic!("sprout serve did not listen within 300 s"),
        }
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

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP response.
struct Reply {
    status: u16,
    headers: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// The bytes of an HTTP/1.1 request that closes its connection after the response.
fn request_bytes(port: u16, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Decodes a chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = std::str::from_utf8(&raw[..end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
}

fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let headers = String::from_utf8(raw[..split].to_vec()).unwrap();
    let status = headers.split(' ').nth(1).unwrap().parse().unwrap();
    let body = &raw[split + 4..];
    let chunked = headers.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Reply {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

fn http(port: u16, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    stream
        .write_all(&request_bytes(port, method, path, headers, body))
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse_reply(&raw)
}

fn post(port: u16, body: &Value) -> Reply {
    http(
        port,
        "POST",
        "/v1/completions",
        &[],
        body.to_string().as_bytes(),
    )
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
    let (k, stop) = records
        .iter()
        .enumerate()
        .find_map(|(k, r)| {
            let chars: Vec<char> = r["text"].as_str().unwrap().chars().collect();
            chars
                .windows(2)
                .skip(1)
                .find(|w| w.iter().all(char::is_ascii_alphanumeric))
                .map(|w| (k, w.iter().collect::<String>()))
        })
        .expect("a sample with two ASCII letters or digits in a row");
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
        (r#"{"prompt": "hi", "n": 9}"#, 503, None, "limit of 8"),
        (
            r#"{"prompt": ["a", "b"], "n": 18446744073709551615}"#,
            503,
            None,
            "limit of 8",
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
    assert_eq!(found.len(), 1, "{name} {labels:?} in {all:?}");
    found[0]
}

/// Waits (60 s at most) until the server runs no request and holds no KV block; the
/// metrics then.
fn await_idle(port: u16) -> Vec<(String, f64)> {
    let start = Instant::now();
    loop {
        let m = metrics(port);
        let running = metric(&m, "vllm:num_requests_running", &[]);
        let waiting = metric(&m, "vllm:num_requests_waiting", &[]);
        if running == 0.0 && waiting == 0.0 && metric(&m, "sprout:kv_blocks_in_use", &[]) == 0.0 {
            return m;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "not idle: {m:?}");
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
    let m = await_idle(port);
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
    let m = await_idle(port);
    let hits = count(&m, "vllm:prefix_cache_hits_total");
    assert!(hits > 0 && hits < prompt_len, "{hits} of {prompt_len}");
    let cached = &second.json()["usage"]["prompt_tokens_details"]["cached_tokens"];
    assert_eq!(cached.as_u64(), Some(hits as u64), "{}", second.body);
}

/// Every one of the `n` samples was aborted before it made `max_tokens`.
fn assert_aborted_early(m: &[(String, f64)], n: usize, max_tokens: usize) {
    let abort = r#"finished_reason="abort""#;
    let aborted = metric(m, "vllm:request_success_total", &[abort]);
    assert_eq!(aborted, n as f64, "{m:?}");
    let generated = metric(m, "vllm:generation_tokens_total", &[]) as usize;
    assert!(generated < n * max_tokens, "it ran to the end: {m:?}");
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
    let m = await_idle(port);
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

    let m = await_idle(port);
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
