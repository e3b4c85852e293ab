//! The reasoning parsers' shapes, reasoning before tool calls, the server's choice of
//! parsers and its refusal, streamed against whole, and a parsed reply as the chat API
//! sends it (token ids and log-probs as the sample's).

use proptest::prelude::*;
use serde_json::{Value, json};
use sprout::sched::{FinishReason, FinishedSample, RequestId};
use sprout::tokenizer::{IncrementalDecoder, Tokenizer};

use super::*;
use crate::cli::serve::reasoning::split;
use crate::cli::serve::response::{self, Api, Asked, Piece};
use crate::cli::serve::tags::cut;

fn reasoning(t: &str) -> Split {
    Split::Reasoning(t.into())
}

fn content(t: &str) -> Split {
    Split::Content(t.into())
}

#[test]
fn the_reasoning_is_what_comes_before_the_closing_tag() {
    assert_eq!(
        split("<think>\nLet me see.\n</think>\n\nIt is 4."),
        [reasoning("\nLet me see.\n"), content("\n\nIt is 4.")]
    );
    // The template opened the block in the prompt.
    assert_eq!(
        split("Let me see.</think>It is 4."),
        [reasoning("Let me see."), content("It is 4.")]
    );
    // Cut short while thinking: all reasoning.
    assert_eq!(split("\n<think>Hmm, so"), [reasoning("Hmm, so")]);
    assert_eq!(split("no tags at all"), [reasoning("no tags at all")]);
    // An empty block, and a reply that ends with it.
    assert_eq!(
        split("<think>\n\n</think>\n\nHi"),
        [reasoning("\n\n"), content("\n\nHi")]
    );
    assert_eq!(split("<think>x</think>"), [reasoning("x")]);
    // Only the first closing tag ends the reasoning; a later opening tag is content.
    assert_eq!(
        split("a</think>b<think>c</think>d"),
        [reasoning("a"), content("b<think>c</think>d")]
    );
    // An opening tag not at the start is reasoning text.
    assert_eq!(split("x<think>y"), [reasoning("x<think>y")]);
}

fn hermes(name: &str, arguments: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {arguments}}}\n</tool_call>")
}

const ALL: Parsing = Parsing {
    reasoning: Some(ReasoningParser::Qwen3),
    tool_calls: Some(ToolCallParser::Hermes),
};

#[test]
fn tool_calls_are_read_from_the_content_after_the_reasoning() {
    let text = format!(
        "<think>\nI should call {}.\n</think>\n\nChecking.\n{}",
        hermes("a", "{}"),
        hermes("weather", r#"{"city": "Oslo"}"#)
    );
    let shaped = shape(ALL, &text);
    // The call written inside the reasoning is reasoning text.
    assert_eq!(
        shaped.reasoning,
        format!("\nI should call {}.\n", hermes("a", "{}"))
    );
    assert_eq!(shaped.content, "\n\nChecking.\n");
    assert_eq!(
        shaped.calls,
        [ParsedCall {
            name: "weather".into(),
            arguments: r#"{"city": "Oslo"}"#.into()
        }]
    );
    // Without parsers the text is the content.
    assert_eq!(shape(Parsing::default(), &text).content, text);
}

#[test]
fn the_server_picks_parsers_per_request_and_refuses_tools_it_cannot_parse() {
    let none = ServerParsers::default();
    let refused = none.check_tool_choice(true, true).unwrap_err();
    assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST);
    assert_eq!(refused.message, AUTO_TOOL_CHOICE_REFUSED);
    assert_eq!(refused.param.as_deref(), Some("tool_choice"));
    // No tools, or a tool_choice other than auto ("none"): nothing to parse, no refusal.
    assert!(none.check_tool_choice(false, true).is_ok());
    assert!(none.check_tool_choice(true, false).is_ok());
    // A parser without --enable-auto-tool-choice still refuses auto.
    let parser_only = ServerParsers {
        tool_call_parser: Some(ToolCallParser::Hermes),
        ..ServerParsers::default()
    };
    assert!(parser_only.check_tool_choice(true, true).is_err());
    let both = ServerParsers {
        enable_auto_tool_choice: true,
        tool_call_parser: Some(ToolCallParser::Llama3Json),
        reasoning_parser: Some(ReasoningParser::Qwen3),
    };
    assert!(both.check_tool_choice(true, true).is_ok());
    assert_eq!(
        both.reply_parsing(true, true, true),
        Parsing {
            reasoning: Some(ReasoningParser::Qwen3),
            tool_calls: Some(ToolCallParser::Llama3Json)
        }
    );
    // tool_choice "none", or no tools: the calls stay content.
    assert_eq!(both.reply_parsing(true, false, true).tool_calls, None);
    assert_eq!(both.reply_parsing(false, true, true).tool_calls, None);
    // qwen3 with thinking off does not split; deepseek_r1 always does.
    assert_eq!(both.reply_parsing(false, false, false).reasoning, None);
    let r1 = ServerParsers {
        reasoning_parser: Some(ReasoningParser::DeepseekR1),
        ..both
    };
    assert_eq!(
        r1.reply_parsing(false, false, false).reasoning,
        Some(ReasoningParser::DeepseekR1)
    );
}

#[test]
fn thinking_is_on_unless_the_kwargs_turn_it_off_as_python_reads_them() {
    let kwargs = |v: Value| v.as_object().unwrap().clone();
    assert!(thinking_enabled(&kwargs(json!({}))));
    assert!(thinking_enabled(&kwargs(json!({"enable_thinking": true}))));
    assert!(thinking_enabled(&kwargs(json!({"enable_thinking": "no"}))));
    for off in [json!(false), json!(null), json!(0), json!(""), json!([])] {
        assert!(!thinking_enabled(&kwargs(json!({"enable_thinking": off}))));
    }
}

/// Every combination of parsers.
fn parsings() -> Vec<Parsing> {
    let mut out = Vec::new();
    for reasoning in [None, Some(ReasoningParser::Qwen3)] {
        for tool_calls in [
            None,
            Some(ToolCallParser::Hermes),
            Some(ToolCallParser::Llama3Json),
        ] {
            out.push(Parsing {
                reasoning,
                tool_calls,
            });
        }
    }
    out
}

/// `t` through a reply stream in pieces cut at `cuts`.
fn streamed(parsing: Parsing, t: &str, cuts: &[usize]) -> Shaped {
    let mut stream = ReplyStream::new(parsing);
    let mut out = Shaped::default();
    for piece in cut(t, cuts) {
        out.extend(stream.push(piece));
    }
    out.extend(stream.finish());
    out
}

fn replies() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<think>".to_string()),
        Just("</think>".to_string()),
        Just("<tool_call>".to_string()),
        Just("</tool_call>".to_string()),
        Just(hermes("f", r#"{"x": "</think>"}"#)),
        Just(r#"{"name": "g", "parameters": {}}"#.to_string()),
        Just("; ".to_string()),
        "[ \n]{0,3}",
        "[a-z<>/{}\":;_ é\n]{0,10}",
    ];
    prop::collection::vec(piece, 0..10).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_reply_splits_the_same_streamed_or_whole(
        t in prop_oneof![replies(), "\\PC{0,60}"],
        cuts in prop::collection::vec(0usize..300, 0..12),
    ) {
        for parsing in parsings() {
            let whole = shape(parsing, &t);
            prop_assert_eq!(&streamed(parsing, &t, &cuts), &whole, "{:?}", parsing);
            // Reasoning and content are the text's, in order, tags aside.
            if parsing.tool_calls.is_none() {
                let kept = format!("{}{}", whole.reasoning, whole.content);
                prop_assert!(kept.len() <= t.len());
            }
        }
    }
}

fn tiny_tokenizer() -> Tokenizer {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tiny-llama/tokenizer.json"
    );
    Tokenizer::from_file(path).unwrap()
}

/// A finished sample of `text`'s tokens, each with its own log-prob.
fn sample_of(tokenizer: &Tokenizer, text: &str, reason: FinishReason) -> FinishedSample {
    let token_ids = tokenizer.encode_with(text, false).unwrap();
    let logprobs: Vec<f32> = (0..token_ids.len()).map(|i| -0.25 - i as f32).collect();
    FinishedSample {
        request: RequestId(0),
        request_index: 0,
        sample_index: 0,
        prompt_token_ids: vec![1, 2],
        sampling_logprobs: logprobs.clone(),
        logprobs,
        weights_versions: vec![0; token_ids.len()],
        token_ids,
        top_logprobs: Vec::new(),
        ranks: Vec::new(),
        finish_reason: reason,
        stopped_by: None,
        cached_prompt_tokens: 0,
    }
}

fn asked(stream: bool) -> Asked<'static> {
    Asked {
        api: Api::Chat,
        stream,
        logprobs: true,
        return_token_ids: true,
        tokens_as_ids: false,
        prompt: &[],
        score: None,
        prompt_logprobs: None,
        echo_logprobs: None,
        weights_version: 0,
    }
}

/// The whole chat choice of `s` under `parsing`, as JSON.
fn whole_choice(tokenizer: &Tokenizer, parsing: Parsing, s: &FinishedSample) -> Value {
    let text = tokenizer.decode_with(&s.token_ids, true).unwrap();
    let (text, parsed) = ReplyStream::new(parsing).piece(&text, true);
    let piece = Piece {
        index: 0,
        text,
        tokens: &s.token_ids,
        logprobs: &s.logprobs,
        top: &[],
        text_offset: 0,
        first: true,
        finished: Some(s),
        // As the reply sends it: without parsers, a plain piece.
        parsed: parsing.is_active().then_some(parsed),
    };
    serde_json::to_value(response::choice(tokenizer, &asked(false), piece)).unwrap()
}

/// The chunks of `s` streamed a token at a time under `parsing`, as JSON.
fn streamed_choices(tokenizer: &Tokenizer, parsing: Parsing, s: &FinishedSample) -> Vec<Value> {
    let mut decoder = IncrementalDecoder::new(true);
    let mut parser = ReplyStream::new(parsing);
    let mut out = Vec::new();
    let last = s.token_ids.len() - 1;
    for (i, &id) in s.token_ids.iter().enumerate() {
        let mut text = decoder.push(tokenizer, id).unwrap().unwrap_or_default();
        if i == last {
            text.push_str(&decoder.finish(tokenizer).unwrap());
        }
        let (text, parsed) = parser.piece(&text, i == last);
        let piece = Piece {
            index: 0,
            text,
            tokens: &s.token_ids[i..=i],
            logprobs: &s.logprobs[i..=i],
            top: &[],
            text_offset: 0,
            first: i == 0,
            finished: (i == last).then_some(s),
            parsed: Some(parsed),
        };
        let choice = response::choice(tokenizer, &asked(true), piece);
        out.push(serde_json::to_value(choice).unwrap());
    }
    out
}

fn bits(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| (e["logprob"].as_f64().unwrap() as f32).to_bits())
        .collect()
}

#[test]
fn a_parsed_reply_keeps_its_tokens_and_streams_what_the_whole_reply_holds() {
    let tokenizer = tiny_tokenizer();
    let text = format!(
        "<think>\nThe user wants the weather.\n</think>\n\nOne moment.\n{}\n{}",
        hermes("get_weather", r#"{"city": "Paris"}"#),
        hermes("get_time", r#"{"zone": "CET"}"#)
    );
    let s = sample_of(&tokenizer, &text, FinishReason::Stop);
    assert_eq!(
        tokenizer.decode_with(&s.token_ids, true).unwrap(),
        text,
        "the fixture round-trips"
    );
    let plain = whole_choice(&tokenizer, Parsing::default(), &s);
    let parsed = whole_choice(&tokenizer, ALL, &s);
    let message = &parsed["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["content"], "\n\nOne moment.\n");
    assert_eq!(
        message["reasoning_content"],
        "\nThe user wants the weather.\n"
    );
    assert_eq!(message["reasoning"], message["reasoning_content"]);
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    for (call, (name, arguments)) in calls.iter().zip([
        ("get_weather", r#"{"city": "Paris"}"#),
        ("get_time", r#"{"zone": "CET"}"#),
    ]) {
        assert!(
            call["id"].as_str().unwrap().starts_with("chatcmpl-tool-"),
            "{call}"
        );
        assert_eq!(
            call["id"].as_str().unwrap().len(),
            "chatcmpl-tool-".len() + 32
        );
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], name);
        assert_eq!(call["function"]["arguments"], arguments);
    }
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    assert_eq!(parsed["finish_reason"], "tool_calls");
    assert_eq!(plain["finish_reason"], "stop");
    assert_eq!(plain["message"]["content"], text.as_str());
    assert!(plain["message"].get("tool_calls").is_none(), "{plain}");
    // The parser shapes text only.
    assert_eq!(parsed["token_ids"], plain["token_ids"]);
    assert_eq!(parsed["logprobs"], plain["logprobs"]);
    assert_eq!(parsed["sprout"], plain["sprout"]);

    // Streamed a token at a time: the same reasoning, content and calls, each call once.
    let chunks = streamed_choices(&tokenizer, ALL, &s);
    let (mut reasoning, mut content, mut token_ids, mut logprobs) =
        (String::new(), String::new(), Vec::new(), Vec::new());
    let mut streamed_calls = Vec::new();
    for c in &chunks {
        let delta = &c["delta"];
        content.push_str(delta["content"].as_str().unwrap());
        if let Some(r) = delta["reasoning_content"].as_str() {
            assert_eq!(delta["reasoning"], r);
            reasoning.push_str(r);
        }
        streamed_calls.extend(delta["tool_calls"].as_array().cloned().unwrap_or_default());
        token_ids.extend(c["token_ids"].as_array().unwrap().clone());
        logprobs.extend(bits(&c["logprobs"]["content"]));
    }
    assert_eq!(reasoning, message["reasoning_content"].as_str().unwrap());
    assert_eq!(content, message["content"].as_str().unwrap());
    assert_eq!(Value::from(token_ids), plain["token_ids"]);
    assert_eq!(logprobs, bits(&plain["logprobs"]["content"]));
    assert_eq!(streamed_calls.len(), 2);
    for (k, (streamed, whole)) in streamed_calls.iter().zip(calls).enumerate() {
        assert_eq!(streamed["index"], k);
        assert_eq!(streamed["type"], "function");
        assert!(
            streamed["id"]
                .as_str()
                .unwrap()
                .starts_with("chatcmpl-tool-")
        );
        assert_eq!(streamed["function"], whole["function"]);
    }
    let finish: Vec<&Value> = chunks.iter().map(|c| &c["finish_reason"]).collect();
    assert!(finish[..finish.len() - 1].iter().all(|f| f.is_null()));
    assert_eq!(*finish.last().unwrap(), "tool_calls");
    assert_eq!(chunks[0]["delta"]["role"], "assistant");
}

#[test]
fn a_reply_cut_by_its_length_keeps_its_reason_and_an_empty_content_is_null() {
    let tokenizer = tiny_tokenizer();
    let text = hermes("f", "{}");
    let cut = sample_of(&tokenizer, &text, FinishReason::Length);
    let tools = Parsing {
        reasoning: None,
        ..ALL
    };
    let choice = whole_choice(&tokenizer, tools, &cut);
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(choice["message"]["tool_calls"].as_array().unwrap().len(), 1);
    assert!(choice["message"]["content"].is_null(), "{choice}");
    // With qwen3's parser the same reply, never closing its reasoning, is all reasoning.
    let choice = whole_choice(&tokenizer, ALL, &cut);
    assert_eq!(choice["message"]["reasoning_content"], text.as_str());
    // All reasoning (no closing tag): content null, as vLLM's.
    let thinking = sample_of(&tokenizer, "still thinking", FinishReason::Length);
    let choice = whole_choice(&tokenizer, ALL, &thinking);
    assert!(choice["message"]["content"].is_null(), "{choice}");
    assert_eq!(choice["message"]["reasoning_content"], "still thinking");
    assert!(choice["message"].get("tool_calls").is_none());
    // Without parsers an empty reply's content stays "".
    let empty = FinishedSample {
        token_ids: Vec::new(),
        logprobs: Vec::new(),
        ..thinking
    };
    let plain = whole_choice(&tokenizer, Parsing::default(), &empty);
    assert_eq!(plain["message"]["content"], "");
}
