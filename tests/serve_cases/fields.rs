//! The request-field table (README's "Every request field") against a running server, on
//! the completions, chat and generate routes: each
//! neutral-only field accepted at its neutral values and refused by name at another, each
//! refused field and each field of the other route refused by name, a sample of the
//! implemented fields accepted and their bad values refused by name; what `echo`,
//! `truncate_prompt_tokens` and `include_stop_str_in_output` do to the text;
//! `--logprobs-mode`; and the limits that make a request a 400 rather than a 503.

use super::*;

/// A row of the README's field table: the field and its treatment on each route
/// (`-`: not a field of that route), with its neutral values.
struct Row {
    field: String,
    completions: String,
    chat: String,
    generate: String,
    neutral: Vec<Value>,
}

fn field_table() -> Vec<Row> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("<!-- serve-fields:begin -->")
        .expect("no field table");
    let end = readme
        .find("<!-- serve-fields:end -->")
        .expect("no field table end");
    let rows: Vec<Row> = readme[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
            let unquote = |c: &str| {
                c.trim_start_matches('|')
                    .trim()
                    .trim_matches('`')
                    .to_string()
            };
            let neutral = cells[4]
                .split(", `")
                .map(|v| v.trim_matches('`'))
                .filter(|v| !v.is_empty())
                .map(|v| serde_json::from_str(v).unwrap_or_else(|e| panic!("{v}: {e}")))
                .collect();
            Row {
                field: unquote(cells[0]),
                completions: cells[1].to_string(),
                chat: cells[2].to_string(),
                generate: cells[3].to_string(),
                neutral,
            }
        })
        .collect();
    assert!(rows.len() > 50, "only {} rows read", rows.len());
    rows
}

const ROUTES: [&str; 2] = ["/v1/completions", "/v1/chat/completions"];
const GENERATE: &str = "/inference/v1/generate";

/// The smallest body of `route`, one token long.
fn base(route: &str) -> Value {
    match route {
        "/v1/completions" => json!({"prompt": PROMPT, "max_tokens": 1}),
        GENERATE => json!({"token_ids": [0, 72], "sampling_params": {"max_tokens": 1}}),
        _ => json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
    }
}

/// The fields of a generate body's top level, as the README's table names them (the
/// others go in `sampling_params`).
fn generate_top() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let from = "the fields of `GenerateRequest` (";
    let start = readme
        .find(from)
        .expect("the table names no top-level fields")
        + from.len();
    let end = readme[start..].find(')').unwrap() + start;
    readme[start..end]
        .split(',')
        .map(|name| name.trim().trim_matches('`').to_string())
        .collect()
}

/// `body` with `field` set to `value`: on generate, the fields of vLLM's `SamplingParams`
/// go in `sampling_params`.
fn set(route: &str, body: &mut Value, field: &str, value: Value) {
    match route == GENERATE && !generate_top().iter().any(|top| top == field) {
        true => body["sampling_params"][field] = value,
        false => body[field] = value,
    }
}

fn start_with_template(extra: &[&str]) -> Server {
    let template = std::env::temp_dir().join(format!(
        "sprout-fields-{}-{}.jinja",
        std::process::id(),
        extra.len()
    ));
    std::fs::write(&template, CHATML).unwrap();
    let mut args = vec!["--chat-template", template.to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let _ = std::fs::remove_file(&template);
    server
}

#[test]
fn every_field_of_the_table_is_treated_as_it_says() {
    let server = start_with_template(&[]);
    let port = server.port;
    // Equal to no neutral value of any field.
    let odd = json!({"not": "neutral"});
    let mut checked = 0;
    for row in field_table() {
        let treatments = [&row.completions, &row.chat, &row.generate];
        for (route, treatment) in ROUTES.iter().chain([&GENERATE]).zip(treatments) {
            let mut body = base(route);
            let why = format!("{} on {route} ({treatment})", row.field);
            match treatment.as_str() {
                "implemented" => continue,
                "neutral only" => {
                    assert!(!row.neutral.is_empty(), "{why}");
                    for value in &row.neutral {
                        set(route, &mut body, &row.field, value.clone());
                        let reply = post_to(port, route, &body);
                        assert_eq!(reply.status, 200, "{why} = {value}: {}", reply.body);
                    }
                }
                "refused" | "-" => {}
                other => panic!("{why}: unknown treatment {other}"),
            }
            set(route, &mut body, &row.field, odd.clone());
            let reply = post_to(port, route, &body);
            assert_error(&reply, 400, Some(&row.field), &row.field);
            checked += 1;
        }
    }
    assert!(checked > 120, "{checked}");

    // A sample of the implemented fields: accepted at values that ask for something.
    let table = field_table();
    let accepted = [
        ("logit_bias", json!({"5": -100, "6": 2.5})),
        ("allowed_token_ids", json!([5, 6, 7])),
        ("bad_words", json!(["fox", " brown"])),
        ("repetition_penalty", json!(1.3)),
        ("presence_penalty", json!(0.5)),
        ("frequency_penalty", json!(-0.5)),
        ("truncate_prompt_tokens", json!(2)),
        ("add_special_tokens", json!(false)),
        ("skip_special_tokens", json!(false)),
        ("include_stop_str_in_output", json!(true)),
        ("user", json!("alice")),
        ("session_id", json!("s1")),
    ];
    for (field, value) in accepted {
        let row = table.iter().find(|r| r.field == field).unwrap();
        for (route, treatment) in ROUTES.iter().zip([&row.completions, &row.chat]) {
            assert_eq!(treatment, "implemented", "{field} on {route}");
            let mut body = base(route);
            body[field] = value.clone();
            let reply = post_to(port, route, &body);
            assert_eq!(
                reply.status, 200,
                "{field} = {value} on {route}: {}",
                reply.body
            );
        }
    }
    // ... and refused by name at values no rule allows.
    let refused = [
        ("logit_bias", json!({"fox": 1}), "token ids"),
        ("logit_bias", json!({"999": 1}), "vocabulary"),
        ("logit_bias", json!({"5": 101}), "[-100, 100]"),
        ("logit_bias", json!([1, 2]), "object"),
        ("allowed_token_ids", json!([999]), "vocabulary"),
        ("allowed_token_ids", json!([]), "non-empty"),
        ("bad_words", json!([" "]), "blank"),
        ("bad_words", json!("fox"), "list of strings"),
        ("repetition_penalty", json!(0), "> 0"),
        ("presence_penalty", json!(2.5), "[-2, 2]"),
        ("frequency_penalty", json!(-3), "[-2, 2]"),
        ("truncate_prompt_tokens", json!(0), "-1 or at least 1"),
        (
            "truncate_prompt_tokens",
            json!(1_000_000),
            "maximum context length",
        ),
        ("user", json!(5), "string"),
    ];
    for (field, value, says) in refused {
        for route in ROUTES {
            let mut body = base(route);
            body[field] = value.clone();
            let reply = post_to(port, route, &body);
            assert_eq!(reply.status, 400, "{field} = {value} on {route}");
            assert_error(&reply, 400, Some(field), says);
        }
    }
}

#[test]
fn echo_truncation_and_stop_strings_shape_the_text() {
    let server = Server::start(&[]);
    let port = server.port;
    let plain = json!({"prompt": PROMPT, "n": 2, "seed": 4, "max_tokens": 6,
                       "return_token_ids": true});
    let reply = post(port, &plain).json();
    let texts: Vec<&str> = reply["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();

    // echo: the prompt's text, then the same completion; whole and streamed.
    let mut echo = plain.clone();
    echo["echo"] = json!(true);
    let whole = post(port, &echo).json();
    for (c, text) in whole["choices"].as_array().unwrap().iter().zip(&texts) {
        assert_eq!(c["text"], format!("{PROMPT}{text}"), "{whole}");
    }
    echo["stream"] = json!(true);
    let (streamed, _) = gather_stream(&post(port, &echo).body, 2);
    for (s, text) in streamed.iter().zip(&texts) {
        assert_eq!(s.text, format!("{PROMPT}{text}"));
    }
    // A token prompt echoes the text of its tokens.
    let prompt_ids = ids(&reply["choices"][0]["prompt_token_ids"]);
    let by_ids = json!({"prompt": prompt_ids, "max_tokens": 1, "echo": true, "seed": 4});
    let text = post(port, &by_ids).json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains(PROMPT), "{text:?}");

    // truncate_prompt_tokens: the last k prompt tokens, and the samples of that prompt.
    let k = 2;
    let mut cut = plain.clone();
    cut["truncate_prompt_tokens"] = json!(k);
    let truncated = post(port, &cut).json();
    let tail = prompt_ids[prompt_ids.len() - k..].to_vec();
    let choice = &truncated["choices"][0];
    assert_eq!(ids(&choice["prompt_token_ids"]), tail, "{truncated}");
    let mut same = plain.clone();
    same["prompt"] = json!(tail);
    let direct = post(port, &same).json();
    for (a, b) in truncated["choices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(direct["choices"].as_array().unwrap())
    {
        assert_eq!(a["token_ids"], b["token_ids"]);
    }
    // -1 keeps the whole context's worth: this prompt whole.
    cut["truncate_prompt_tokens"] = json!(-1);
    let whole_prompt = post(port, &cut).json();
    assert_eq!(
        ids(&whole_prompt["choices"][0]["prompt_token_ids"]),
        prompt_ids
    );

    // include_stop_str_in_output: the stop string stays at the end of the text.
    let (k, stop) = stop_string_of(&texts);
    let cut_text = &texts[k][..texts[k].find(&stop).unwrap()];
    let mut stopped = plain.clone();
    stopped["stop"] = json!(stop);
    stopped["include_stop_str_in_output"] = json!(true);
    let out = post(port, &stopped).json();
    assert_eq!(
        out["choices"][k]["text"],
        format!("{cut_text}{stop}"),
        "{out}"
    );
    assert_eq!(out["choices"][k]["finish_reason"], "stop");
}

#[test]
fn processed_logprobs_report_the_distribution_sampled_from() {
    let refused = serve_output(&["--logprobs-mode", "raw_logits"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("raw_logits is not supported"), "{stderr}");

    let server = Server::start(&["--logprobs-mode", "processed_logprobs"]);
    let port = server.port;
    let body = json!({"prompt": PROMPT, "n": 2, "seed": 9, "max_tokens": 6,
                      "temperature": 0.6, "top_k": 20, "logprobs": 0});
    let out = post(port, &body).json();
    for c in out["choices"].as_array().unwrap() {
        let reported = bits(&c["logprobs"]["token_logprobs"]);
        assert_eq!(reported, bits(&c["sprout"]["sampling_logprobs"]), "{out}");
        assert_ne!(reported, bits(&c["sprout"]["logprobs"]), "{out}");
    }
    let mut top = body.clone();
    top["logprobs"] = json!(2);
    assert_error(
        &post(port, &top),
        400,
        Some("logprobs"),
        "processed_logprobs",
    );
    // TRL's route reports the same.
    let trl = json!({"prompts": [PROMPT], "n": 2, "temperature": 0.6, "top_k": 20,
                     "max_tokens": 6, "logprobs": 0, "generation_kwargs": {"seed": 9}});
    let generated = post_to(port, "/generate/", &trl).json();
    for (k, c) in out["choices"].as_array().unwrap().iter().enumerate() {
        let per_token: Vec<Value> = generated["logprobs"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|lps| lps[0].clone())
            .collect();
        assert_eq!(
            bits(&json!(per_token)),
            bits(&c["sprout"]["sampling_logprobs"])
        );
    }
}

#[test]
fn a_request_that_can_never_be_served_is_a_400_and_busy_is_a_503() {
    let server = Server::start(&[
        "--max-queued-requests",
        "8",
        "--max-samples-per-request",
        "6",
        "--max-n",
        "4",
    ]);
    let port = server.port;
    let cases = [
        (json!({"prompt": "hi", "n": 5}), "--max-n"),
        (json!({"prompt": "hi", "n": 1_000_000_000u64}), "--max-n"),
        (
            json!({"prompt": ["a", "b"], "n": 4}),
            "--max-samples-per-request",
        ),
    ];
    for (body, says) in cases {
        let reply = post(port, &body);
        assert_error(&reply, 400, Some("n"), says);
        assert_eq!(reply.header("retry-after"), None);
    }
    // Busy: paused, a request holds 6 of the 8 queued samples; 3 more must wait.
    assert_eq!(admin(port, "POST", "/pause?mode=keep", "").status, 200);
    let held = send_completion(
        port,
        &json!({"prompt": ["a", "b"], "n": 3, "max_tokens": 2}),
    );
    let start = Instant::now();
    while http(port, "GET", "/health", &[], b"").json()["queued_samples"] != 6 {
        assert!(start.elapsed() < Duration::from_secs(60), "never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let busy = post(port, &json!({"prompt": "hi", "n": 3}));
    assert_error(&busy, 503, None, "busy");
    assert_eq!(busy.header("retry-after").as_deref(), Some("1"));
    assert_eq!(admin(port, "POST", "/resume", "").status, 200);
    let mut raw = Vec::new();
    let mut held = held;
    held.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let _ = held.read_to_end(&mut raw);
    assert_eq!(parse_reply(&raw).status, 200);
    assert_eq!(post(port, &json!({"prompt": "hi", "n": 3})).status, 200);
}

/// The logit processors change what is drawn, through the server: allowed tokens only,
/// a +100 bias taking every greedy token, a bad word never drawn in either spelling, and
/// penalties that turn
/// greedy decoding away from its plain path; with `sampling_logprobs` then differing from
/// the raw `logprobs`.
#[test]
fn the_logit_processors_change_what_is_drawn() {
    let server = Server::start(&[]);
    let port = server.port;
    let draw = |extra: Value| {
        let mut body = json!({"prompt": PROMPT, "n": 4, "seed": 3, "max_tokens": 8,
                              "return_token_ids": true, "ignore_eos": true});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let out = post(port, &body);
        assert_eq!(out.status, 200, "{}", out.body);
        let out = out.json();
        let choices = out["choices"].as_array().unwrap().clone();
        choices
            .iter()
            .map(|c| (ids(&c["token_ids"]), c["sprout"].clone()))
            .collect::<Vec<_>>()
    };
    for (tokens, _) in draw(json!({"allowed_token_ids": [10, 11, 12]})) {
        assert!(tokens.iter().all(|t| (10..=12).contains(t)), "{tokens:?}");
    }
    for (tokens, _) in draw(json!({"temperature": 0, "logit_bias": {"77": 100}})) {
        assert_eq!(tokens, [77; 8]);
    }
    // "x" and " x" are the tiny tokenizer's tokens 90 and 375: both spellings are banned.
    let biased = json!({"temperature": 0, "allowed_token_ids": [5, 90, 375],
                        "logit_bias": {"90": 50, "375": 50}});
    for (tokens, _) in draw(biased.clone()) {
        assert!(tokens.iter().all(|t| [90, 375].contains(t)), "{tokens:?}");
    }
    let mut banned = biased;
    banned["bad_words"] = json!(["x"]);
    for (tokens, _) in draw(banned) {
        assert_eq!(tokens, [5; 8]);
    }
    let plain = draw(json!({"temperature": 0}));
    let penalised = draw(json!({"temperature": 0, "repetition_penalty": 1.8,
                                "frequency_penalty": 1.5, "presence_penalty": 1.0}));
    assert_ne!(penalised[0].0, plain[0].0);
    for (_, sprout) in &penalised {
        assert_ne!(
            bits(&sprout["sampling_logprobs"]),
            bits(&sprout["logprobs"])
        );
    }
}
