//! The field table walked through the parsers: each field treated as the table says, the
//! parsers reading exactly the implemented fields, and the README's table the code's.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::*;
use crate::cli::serve::request::{ChatRequest, CompletionRequest};

const APIS: [Api; 2] = [Api::Completions, Api::Chat];

/// The smallest body `api` accepts.
fn base(api: Api) -> Map<String, Value> {
    let body = match api {
        Api::Completions => json!({"prompt": "x"}),
        Api::Chat => json!({"messages": [{"role": "user", "content": "x"}]}),
    };
    body.as_object().unwrap().clone()
}

/// Parses `body` as `api`'s request.
fn parse(api: Api, body: &Map<String, Value>) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(body).unwrap();
    match api {
        Api::Completions => CompletionRequest::parse(&bytes).map(|_| ()),
        Api::Chat => ChatRequest::parse(&bytes).map(|_| ()),
    }
}

/// `base` with `name` set to `value`, and what an implemented field needs beside it.
fn with(api: Api, name: &str, value: Value) -> Map<String, Value> {
    let mut body = base(api);
    match name {
        "top_logprobs" => body.insert("logprobs".into(), json!(true)),
        "stream_options" => body.insert("stream".into(), json!(true)),
        _ => None,
    };
    body.insert(name.to_string(), value);
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
            let mut null = base(api);
            null.insert(rule.name.to_string(), Value::Null);
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
        assert!(
            rule.completions.is_some() || rule.chat.is_some(),
            "{}: on no route",
            rule.name
        );
        let neutral_somewhere = [rule.completions, rule.chat].contains(&Some(Treatment::Neutral));
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
        parse(api, &with(api, "length_penalty", json!(1.0))).unwrap();
        let text = parse(api, &with(api, "length_penalty", json!("1")));
        refused_naming(text, "length_penalty", "a string 1");
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
