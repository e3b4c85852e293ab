//! The field table walked through the parsers of its three routes: each field treated as
//! the table says, the parsers reading exactly the implemented fields, and the README's
//! table the code's.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::*;
use crate::cli::serve::generate::GenerateRequest;
use crate::cli::serve::request::{ChatRequest, CompletionRequest};

const APIS: [Api; 3] = [Api::Completions, Api::Chat, Api::Generate];

/// The smallest body `api` accepts.
fn base(api: Api) -> Map<String, Value> {
    let body = match api {
        Api::Completions => json!({"prompt": "x"}),
        Api::Chat => json!({"messages": [{"role": "user", "content": "x"}]}),
        Api::Generate => json!({"token_ids": [1, 2], "sampling_params": {}}),
    };
    body.as_object().unwrap().clone()
}

/// Parses `body` as `api`'s request.
fn parse(api: Api, body: &Map<String, Value>) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(body).unwrap();
    match api {
        Api::Completions => CompletionRequest::parse(&bytes).map(|_| ()),
        Api::Chat => ChatRequest::parse(&bytes).map(|_| ()),
        Api::Generate => GenerateRequest::parse(&bytes).map(|_| ()),
    }
}

/// `base` with `name` set to `value`, and what an implemented field needs beside it.
fn with(api: Api, name: &str, value: Value) -> Map<String, Value> {
    let body = match name {
        "top_logprobs" => placed(base(api), api, "logprobs", json!(true)),
        "stream_options" => placed(base(api), api, "stream", json!(true)),
        _ => base(api),
    };
    placed(body, api, name, value)
}

/// `body` with `name` set to `value`: on generate, a field of `SamplingParams` goes in
/// `sampling_params`.
fn placed(mut body: Map<String, Value>, api: Api, name: &str, value: Value) -> Map<String, Value> {
    match api == Api::Generate && !GENERATE_TOP.contains(&name) {
        true => {
            let params = body["sampling_params"].as_object_mut().unwrap();
            params.insert(name.to_string(), value);
        }
        false => {
            body.insert(name.to_string(), value);
        }
    }
    body
}

/// A rule's non-neutral sample for `api` (chat's `logprobs` is a boolean).
fn sample(rule: &FieldRule, api: Api) -> Value {
    match (rule.name, api) {
        ("logprobs", Api::Chat) => json!(true),
        _ => serde_json::from_str(rule.sample).unwrap(),
    }
}

fn refused_naming(result: Result<(), ApiError>, name: &str, why: &str) {
    let e = result.expect_err(why);
    assert_eq!(e.status, StatusCode::BAD_REQUEST, "{why}: {}", e.message);
    assert_eq!(e.param.as_deref(), Some(name), "{why}: {}", e.message);
    assert!(e.message.contains(name), "{why}: {}", e.message);
}

#[test]
fn every_field_is_treated_as_the_table_says() {
    for rule in FIELDS {
        for api in APIS {
            let value = sample(rule, api);
            let why = format!("{} = {value} on {api:?}", rule.name);
            let result = parse(api, &with(api, rule.name, value));
            match rule.on(api) {
                Some(Treatment::Implemented) => {
                    if let Err(e) = result {
                        panic!("{why}: refused: {}", e.message);
                    }
                }
                Some(Treatment::Neutral) => {
                    refused_naming(result, rule.name, &why);
                    assert!(!rule.neutral.is_empty(), "{why}: no neutral value");
                    for text in rule.neutral {
                        let neutral = serde_json::from_str(text).unwrap();
                        let why = format!("{} = {text} on {api:?}", rule.name);
                        if let Err(e) = parse(api, &with(api, rule.name, neutral)) {
                            panic!("{why}: refused: {}", e.message);
                        }
                    }
                }
                Some(Treatment::Refused) | None => refused_naming(result, rule.name, &why),
            }
            // Null is absence, for every field (the required ones are then missing).
            if base(api).contains_key(rule.name) {
                continue;
            }
            let null = placed(base(api), api, rule.name, Value::Null);
            let why = format!("{} = null on {api:?}", rule.name);
            assert!(parse(api, &null).is_ok(), "{why}");
        }
    }
}

#[test]
fn the_table_is_well_formed() {
    let mut names = BTreeSet::new();
    for rule in FIELDS {
        assert!(names.insert(rule.name), "{} twice", rule.name);
        let routes = [rule.completions, rule.chat, rule.generate];
        assert!(
            routes.iter().any(Option::is_some),
            "{}: on no route",
            rule.name
        );
        let neutral_somewhere = routes.contains(&Some(Treatment::Neutral));
        assert_eq!(
            neutral_somewhere,
            !rule.neutral.is_empty(),
            "{}: neutral values exactly where it is neutral only",
            rule.name
        );
        let sample: Value = serde_json::from_str(rule.sample).unwrap();
        assert!(
            !rule.is_neutral(&sample),
            "{}: sample is neutral",
            rule.name
        );
        assert!(!sample.is_null(), "{}", rule.name);
    }
}

#[test]
fn the_parsers_read_exactly_the_implemented_fields() {
    for api in APIS {
        take_read();
        parse(api, &base(api)).unwrap();
        let read = take_read();
        let implemented: BTreeSet<String> = FIELDS
            .iter()
            .filter(|r| r.on(api) == Some(Treatment::Implemented))
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(read, implemented, "{api:?}: read vs the table");
    }
}

#[test]
fn fields_no_api_defines_are_ignored_and_numbers_compare_by_value() {
    for api in APIS {
        let body = with(api, "no_such_field", json!({"anything": [1, 2]}));
        parse(api, &body).unwrap();
        // `1.0` is the neutral `1`; `"1"` is not.
        parse(api, &with(api, "priority", json!(0.0))).unwrap();
        let text = parse(api, &with(api, "priority", json!("0")));
        refused_naming(text, "priority", "a string 0");
    }
}

#[test]
fn the_readme_s_field_table_is_the_code_s() {
    let readme = include_str!("../../../README.md");
    let (begin, end) = ("<!-- serve-fields:begin -->\n", "<!-- serve-fields:end -->");
    let start = readme
        .find(begin)
        .expect("the README has no field table markers")
        + begin.len();
    let stop = readme[start..].find(end).expect("no end marker") + start;
    let expected = markdown();
    assert!(
        readme[start..stop] == expected,
        "the README's field table differs from fields::FIELDS; it should read:\n{expected}"
    );
}

#[test]
fn generate_holds_each_field_to_its_place() {
    let mut top = base(Api::Generate);
    top.insert("temperature".into(), json!(0.5));
    refused_naming(
        parse(Api::Generate, &top),
        "temperature",
        "at the top level",
    );
    let mut inside = base(Api::Generate);
    inside["sampling_params"]["cache_salt"] = json!("s");
    refused_naming(
        parse(Api::Generate, &inside),
        "cache_salt",
        "in sampling_params",
    );
}
