//! The tool-call parsers on the formats' documented shapes, on hostile text, and streamed
//! against whole.

use proptest::prelude::*;

use crate::cli::serve::tags::cut;

use super::{
    MAX_CALL_BYTES, MAX_GAP_BYTES, ParsedCall, Part, ToolCallParser, ToolCallStream, extract,
};
use ToolCallParser::{Hermes, Llama3Json};

fn call(name: &str, arguments: &str) -> Part {
    Part::Call(ParsedCall {
        name: name.into(),
        arguments: arguments.into(),
    })
}

fn text(t: &str) -> Part {
    Part::Content(t.into())
}

/// The parts of `t` fed in pieces cut at `cuts`, with consecutive content merged.
fn streamed(parser: ToolCallParser, t: &str, cuts: &[usize]) -> Vec<Part> {
    let mut stream = ToolCallStream::new(parser);
    let mut out = Vec::new();
    for piece in cut(t, cuts) {
        stream.push(piece, &mut out);
    }
    stream.finish(&mut out);
    merged(out)
}

fn merged(parts: Vec<Part>) -> Vec<Part> {
    let mut out: Vec<Part> = Vec::new();
    for p in parts {
        match (out.last_mut(), p) {
            (Some(Part::Content(a)), Part::Content(b)) => a.push_str(&b),
            (_, p) => out.push(p),
        }
    }
    out
}

fn whole(parser: ToolCallParser, t: &str) -> Vec<Part> {
    merged(extract(parser, t))
}

#[test]
fn hermes_reads_the_blocks_and_keeps_the_text_before_them() {
    let t = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
    assert_eq!(
        whole(Hermes, t),
        [
            text("Let me look.\n"),
            call("get_weather", r#"{"city": "Paris", "unit": "c"}"#)
        ]
    );
    // Several calls: the whitespace between and after them separates them.
    let two = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": null}]}}\n</tool_call>\n";
    assert_eq!(
        whole(Hermes, two),
        [call("a", "{}"), call("b", r#"{"x": [1, {"y": null}]}"#)]
    );
    // Text after a call that is not whitespace is content.
    let after = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then";
    assert_eq!(whole(Hermes, after), [call("a", "{}"), text(" and then")]);
    // A block a stop string cut before its closing tag is a call if its JSON is one.
    let open = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}\n";
    assert_eq!(whole(Hermes, open), [call("a", r#"{"k": "v"}"#)]);
    // Non-ASCII arguments are kept as the model wrote them.
    let utf8 = "<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"h\u{e9}\u{e9} \\u00e9\"}}</tool_call>";
    assert_eq!(
        whole(Hermes, utf8),
        [call("say", "{\"text\": \"h\u{e9}\u{e9} \\u00e9\"}")]
    );
}

#[test]
fn hermes_blocks_that_are_not_calls_are_content() {
    for bad in [
        "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>",
        "<tool_call>not json</tool_call>",
        "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"name\": \"a\"}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {}} trailing</tool_call>",
        "<tool_call>{\"name\": \"a\", \"name\": \"b\", \"arguments\": {}}</tool_call>",
        "<tool_call>[{\"name\": \"a\", \"arguments\": {}}]</tool_call>",
        "<tool_call><tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}",
        "</tool_call>{\"name\": \"a\", \"arguments\": {}}",
        "<tool_call",
        "<tool_call>",
    ] {
        assert_eq!(whole(Hermes, bad), [text(bad)], "{bad}");
    }
    // A bad block between good ones stays where it was, as content.
    let mixed = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    assert_eq!(
        whole(Hermes, mixed),
        [
            call("a", "{}"),
            text("<tool_call>oops</tool_call>"),
            call("b", "{}")
        ]
    );
    // Whitespace is a separator only next to a call: between two blocks that are content,
    // and after the last of them, it stays.
    let two_bad = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> <tool_call></tool_call> <tool_call>{</tool_call>\n";
    assert_eq!(
        whole(Hermes, two_bad),
        [
            call("a", "{}"),
            text("<tool_call></tool_call> <tool_call>{</tool_call>\n")
        ]
    );
}

#[test]
fn a_call_past_the_bound_is_content_and_nothing_waits_for_it() {
    let huge = format!(
        "<tool_call>{{\"name\": \"a\", \"arguments\": {{\"x\": \"{}\"}}}}</tool_call>",
        "y".repeat(MAX_CALL_BYTES)
    );
    assert_eq!(whole(Hermes, &huge), [text(&huge)]);
    // Fed a piece at a time, the block goes out as content once it passes the bound.
    let mut stream = ToolCallStream::new(Hermes);
    let mut out = Vec::new();
    let cut = huge.len() - 20;
    stream.push(&huge[..cut], &mut out);
    let sent: usize = out
        .iter()
        .map(|p| match p {
            Part::Content(t) => t.len(),
            Part::Call(_) => 0,
        })
        .sum();
    assert!(sent > MAX_CALL_BYTES, "{sent} bytes out of {cut}");
    let huge = format!(
        "{{\"name\": \"a\", \"parameters\": {{\"x\": \"{}\"}}}}",
        "y".repeat(MAX_CALL_BYTES)
    );
    assert_eq!(whole(Llama3Json, &huge), [text(&huge)]);
    // So is a separator past its bound.
    let gap = format!(
        "<tool_call>{{\"name\": \"a\", \"arguments\": {{}}}}</tool_call>{}",
        " ".repeat(MAX_GAP_BYTES + 1)
    );
    assert_eq!(
        whole(Hermes, &gap),
        [call("a", "{}"), text(&" ".repeat(MAX_GAP_BYTES + 1))]
    );
}

#[test]
fn llama3_json_reads_calls_from_the_start_of_the_reply() {
    let one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    assert_eq!(
        whole(Llama3Json, one),
        [call("get_weather", r#"{"city": "Paris"}"#)]
    );
    let tagged = "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": {\"c\": 1}}}}";
    assert_eq!(
        whole(Llama3Json, tagged),
        [call("f", r#"{"a": {"b": {"c": 1}}}"#)]
    );
    let several = " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"s\": \"};{\"}} ;\n";
    assert_eq!(
        whole(Llama3Json, several),
        [call("a", "{}"), call("b", r#"{"s": "};{"}"#)]
    );
    // What follows the calls and is not one is content.
    let rest = "{\"name\": \"a\", \"parameters\": {}} that was it";
    assert_eq!(
        whole(Llama3Json, rest),
        [call("a", "{}"), text(" that was it")]
    );
    let broken = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": 1, \"parameters\": {}}";
    assert_eq!(
        whole(Llama3Json, broken),
        [call("a", "{}"), text("; {\"name\": 1, \"parameters\": {}}")]
    );
}

#[test]
fn llama3_json_text_that_is_not_a_call_is_content() {
    for plain in [
        "The answer is 4.",
        "Here: {\"name\": \"a\", \"parameters\": {}}",
        "{\"name\": \"a\", \"parameters\": {}, \"arguments\": {}}",
        "{\"name\": \"a\", \"parameters\": 3}",
        "{\"name\": \"a\"}",
        "{\"name\": \"a\", \"parameters\": {}",
        "{\"name\": \"a\", \"parameters\": {}]",
        "<|python_tag|>print(1)",
        "<|python_tag|>",
        "  \n",
        "{",
        "}",
    ] {
        assert_eq!(whole(Llama3Json, plain), [text(plain)], "{plain}");
    }
}

#[test]
fn a_stream_holds_back_only_what_may_still_be_a_call() {
    let mut stream = ToolCallStream::new(Hermes);
    let mut out = Vec::new();
    stream.push("Sure. <tool", &mut out);
    assert_eq!(out, [text("Sure. ")]);
    out.clear();
    stream.push("_call>{\"name\": \"a\", \"arguments\": {\"x\"", &mut out);
    assert_eq!(out, []);
    stream.push(": 1}}</tool_call>", &mut out);
    assert_eq!(out, [call("a", r#"{"x": 1}"#)]);
    out.clear();
    stream.push("\n\n", &mut out);
    assert_eq!(out, [], "whitespace after a call waits");
    stream.push("Done", &mut out);
    assert_eq!(out, [text("\n\nDone")]);
    out.clear();
    stream.finish(&mut out);
    assert_eq!(out, []);

    let mut stream = ToolCallStream::new(Llama3Json);
    let mut out = Vec::new();
    stream.push("The", &mut out);
    assert_eq!(out, [text("The")], "prose goes out at once");
    let mut stream = ToolCallStream::new(Llama3Json);
    let mut out = Vec::new();
    stream.push("{\"name\": \"a\", \"parameters\": {}}", &mut out);
    assert_eq!(out, [call("a", "{}")], "a call goes out once it is whole");
}

/// Checks that `parts` account for `t`: the content parts appear in order, and what lies
/// between them is separators and the calls emitted there (counted independently with
/// serde_json's own reader for llama3_json, and by their tags for hermes).
fn assert_accounted(parser: ToolCallParser, t: &str, parts: &[Part]) {
    let gap_holds = |gap: &str, calls: usize| {
        // Only the reply's end may leave a block open.
        let at_end = gap.len() + (gap.as_ptr() as usize - t.as_ptr() as usize) == t.len();
        let found = match parser {
            Hermes => hermes_blocks(gap, at_end),
            Llama3Json => llama_objects(gap),
        };
        found == Some(calls)
    };
    let mut cursor = 0;
    let mut calls_since = 0;
    for p in parts {
        match p {
            Part::Content(c) => {
                // The first place for it after the calls before it.
                let rest = &t[cursor..];
                let at = rest
                    .char_indices()
                    .map(|(at, _)| at)
                    .filter(|&at| rest[at..].starts_with(c.as_str()))
                    .find(|&at| gap_holds(&t[cursor..cursor + at], calls_since))
                    .unwrap_or_else(|| {
                        panic!(
                            "content {c:?} not found after {calls_since} calls in {t:?}: {parts:?}"
                        )
                    });
                cursor += at + c.len();
                calls_since = 0;
            }
            Part::Call(call) => {
                let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
                assert!(args.is_object(), "{call:?}");
                assert!(t.contains(&call.arguments), "{call:?} in {t:?}");
                calls_since += 1;
            }
        }
    }
    assert!(
        gap_holds(&t[cursor..], calls_since),
        "the end {:?} of {t:?} is not {calls_since} calls: {parts:?}",
        &t[cursor..]
    );
}

/// The number of `<tool_call>` blocks `gap` is made of, with whitespace around them (the
/// last left open only `at_end` of the reply).
fn hermes_blocks(gap: &str, at_end: bool) -> Option<usize> {
    let mut rest = gap.trim_start();
    let mut n = 0;
    while !rest.is_empty() {
        rest = rest.strip_prefix("<tool_call>")?;
        rest = match rest.find("</tool_call>") {
            Some(end) => &rest[end + "</tool_call>".len()..],
            None if at_end => "",
            None => return None,
        };
        rest = rest.trim_start();
        n += 1;
    }
    Some(n)
}

/// The number of JSON objects `gap` is made of, with whitespace, `;` and the python tag
/// around them.
fn llama_objects(gap: &str) -> Option<usize> {
    let mut rest = gap;
    let mut n = 0;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        rest = rest.strip_prefix("<|python_tag|>").unwrap_or(rest);
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if rest.is_empty() {
            return Some(n);
        }
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
        values.next()?.ok()?.as_object()?;
        rest = &rest[values.byte_offset()..];
        n += 1;
    }
}

/// Text built from the pieces replies are made of: calls good and bad, tags, separators,
/// prose.
fn replies() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<tool_call>".to_string()),
        Just("</tool_call>".to_string()),
        Just("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>".to_string()),
        Just("{\"name\": \"g\", \"parameters\": {\"s\": \"}{;\\\"\"}}".to_string()),
        Just("{\"name\": \"h\", \"arguments\": {}}".to_string()),
        Just("<|python_tag|>".to_string()),
        Just("; ".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("\"".to_string()),
        "[ \n\t]{0,3}",
        "[a-z<>/{}\\[\\]\":;_ é\n]{0,12}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_parses_the_same_streamed_or_whole(
        t in "\\PC{0,80}",
        cuts in prop::collection::vec(0usize..200, 0..12),
    ) {
        for parser in [Hermes, Llama3Json] {
            let parts = whole(parser, &t);
            prop_assert_eq!(&streamed(parser, &t, &cuts), &parts);
            assert_accounted(parser, &t, &parts);
        }
    }

    #[test]
    fn replies_parse_the_same_streamed_or_whole_and_lose_nothing(
        t in replies(),
        cuts in prop::collection::vec(0usize..400, 0..16),
    ) {
        for parser in [Hermes, Llama3Json] {
            let parts = whole(parser, &t);
            prop_assert_eq!(&streamed(parser, &t, &cuts), &parts);
            assert_accounted(parser, &t, &parts);
        }
    }
}
