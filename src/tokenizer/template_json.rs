//! Python's `json.dumps` over template values: the text a Hugging Face chat template's
//! `tojson` prints (transformers replaces Jinja's HTML-escaping filter with `json.dumps(x,
//! ensure_ascii=False, indent=..., separators=..., sort_keys=...)`), so that tools'
//! schemas and tool calls' arguments render byte for byte as transformers renders them.
//!
//! What Python does and this module does alike: keys in the order the value holds them
//! (insertion order: sprout's maps keep it), separators `", "` and `": "` (`","` between
//! items when indenting), non-ASCII text as is, only `"`, `\` and control characters
//! escaped (`\n`, `\r`, `\t`, `\b`, `\f`, else `\u00xx`), floats as Python's `repr`
//! (`1.0`, `1e-05`, `1e+16`), `NaN` and `Infinity` as Python writes them.
//!
//! Invariant: the text is bounded: at most [`MAX_JSON_BYTES`], nested at most
//! [`MAX_JSON_DEPTH`] deep, indented by at most [`MAX_INDENT`] characters a level; past a
//! bound it is an error naming it, never a partial text.

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

use crate::tokenizer::template_limits::MAX_OUTPUT_BYTES;

/// The longest text `tojson` makes: a rendered prompt's own bound.
pub const MAX_JSON_BYTES: usize = MAX_OUTPUT_BYTES;
/// The deepest nesting `tojson` writes (serde_json reads at most 128 levels).
pub const MAX_JSON_DEPTH: usize = 128;
/// The widest indentation of one level.
pub const MAX_INDENT: usize = 64;

/// How to write: `json.dumps`' arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonStyle {
    /// `None`: one line; else a newline and this text once per level before each item.
    pub indent: Option<String>,
    /// Between items, and between a key and its value.
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
    /// Write every non-ASCII character as `\uXXXX` (UTF-16, as Python does).
    pub ensure_ascii: bool,
}

impl JsonStyle {
    /// Python's defaults for `indent`: `", "` between items on one line, `","` when
    /// indenting (the newline follows).
    pub fn new(indent: Option<String>) -> JsonStyle {
        let item = if indent.is_some() { "," } else { ", " };
        JsonStyle {
            indent,
            item_separator: item.into(),
            key_separator: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        }
    }
}

fn refuse(why: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, why)
}

/// `value` as `json.dumps` writes it with `style`.
pub fn dumps(value: &Value, style: &JsonStyle) -> Result<String, Error> {
    if let Some(indent) = &style.indent
        && indent.chars().count() > MAX_INDENT
    {
        return Err(refuse(format!(
            "tojson: an indent of {} characters, more than the {MAX_INDENT} sprout writes",
            indent.chars().count()
        )));
    }
    let mut out = String::new();
    write_value(value, style, 0, &mut out)?;
    Ok(out)
}

fn write_value(
    value: &Value,
    style: &JsonStyle,
    depth: usize,
    out: &mut String,
) -> Result<(), Error> {
    if out.len() > MAX_JSON_BYTES {
        return Err(refuse(format!(
            "tojson: the text passed {MAX_JSON_BYTES} bytes, the most sprout writes"
        )));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(value, out),
        ValueKind::String => write_string(value.as_str().unwrap_or_default(), style, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(style, depth, out, ('[', ']'), items.len(), |i, out| {
                write_value(&items[i], style, depth + 1, out)
            })?;
        }
        ValueKind::Map => {
            let mut entries: Vec<(String, Value)> = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((key_text(&key)?, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(style, depth, out, ('{', '}'), entries.len(), |i, out| {
                let (key, item) = &entries[i];
                write_string(key, style, out);
                out.push_str(&style.key_separator);
                write_value(item, style, depth + 1, out)
            })?;
        }
        other => {
            return Err(refuse(format!(
                "tojson: a value of kind {other} is not JSON serializable"
            )));
        }
    }
    Ok(())
}

/// A list or an object of `len` items, each written by `item`, in `brackets`.
fn write_container(
    style: &JsonStyle,
    depth: usize,
    out: &mut String,
    brackets: (char, char),
    len: usize,
    mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    if depth >= MAX_JSON_DEPTH {
        return Err(refuse(format!(
            "tojson: values nested more than {MAX_JSON_DEPTH} deep"
        )));
    }
    out.push(brackets.0);
    if len == 0 {
        out.push(brackets.1);
        return Ok(());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(indent) = &style.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    };
    for i in 0..len {
        if i > 0 {
            out.push_str(&style.item_separator);
        }
        newline(out, depth + 1);
        item(i, out)?;
    }
    newline(out, depth);
    out.push(brackets.1);
    Ok(())
}

/// A key as Python's `json` converts it: strings as they are, numbers, booleans and
/// None as their JSON text; anything else is a `TypeError` there and an error here.
fn key_text(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => {
            let mut text = String::new();
            write_number(key, &mut text);
            Ok(text)
        }
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        other => Err(refuse(format!(
            "tojson: keys must be strings, numbers, booleans or none, not {other}"
        ))),
    }
}

fn write_number(value: &Value, out: &mut String) {
    if value.is_integer() {
        // Every integer minijinja holds (up to 128 bits) prints as its digits.
        out.push_str(&value.to_string());
        return;
    }
    let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    out.push_str(&python_float(x));
}

/// A float as Python's `repr` writes it: the shortest digits that read back to it,
/// positional for exponents from -4 to 15 (`0.0001`, `1e+16`), always with a `.0` or
/// an exponent.
pub fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` is the shortest round-trip form: `-1.25e-7`, `1e16`.
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an e");
    let exponent: i32 = exponent.parse().expect("{:e}'s exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1; // digits before the point
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if digits.len() <= point as usize {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            let (whole, fraction) = digits.split_at(point as usize);
            format!("{whole}.{fraction}")
        };
        return format!("{sign}{text}");
    }
    let exponent_sign = if exponent < 0 { '-' } else { '+' };
    format!("{sign}{mantissa}e{exponent_sign}{:02}", exponent.abs())
}

/// `text` as a JSON string.
fn write_string(text: &str, style: &JsonStyle, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if style.ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Value {
        let parsed: serde_json::Value = serde_json::from_str(text).unwrap();
        Value::from(minijinja::value::Serde(parsed))
    }

    #[test]
    fn floats_read_as_python_writes_them() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-1.25e-7, "-1.25e-07"),
            (1e100, "1e+100"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.0, "0.0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (x, want) in cases {
            assert_eq!(python_float(x), want, "{x:e}");
        }
    }

    #[test]
    fn objects_keep_their_order_and_python_s_separators() {
        let v = json(r#"{"b": 1, "a": [true, null, 2.0, "x\"y\n\u0001é"], "c": {}}"#);
        let one_line = dumps(&v, &JsonStyle::new(None)).unwrap();
        assert_eq!(
            one_line,
            r#"{"b": 1, "a": [true, null, 2.0, "x\"y\n\u0001é"], "c": {}}"#
        );
        let indented = dumps(&v, &JsonStyle::new(Some("  ".into()))).unwrap();
        assert_eq!(
            indented,
            "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null,\n    2.0,\n    \"x\\\"y\\n\\u0001é\"\n  ],\n  \"c\": {}\n}"
        );
        let sorted = JsonStyle {
            sort_keys: true,
            ..JsonStyle::new(None)
        };
        assert!(dumps(&v, &sorted).unwrap().starts_with(r#"{"a": "#));
    }

    #[test]
    fn past_a_bound_is_an_error_naming_it() {
        let mut deep = Value::from(1);
        for _ in 0..(MAX_JSON_DEPTH + 1) {
            deep = Value::from(vec![deep]);
        }
        let e = dumps(&deep, &JsonStyle::new(None)).unwrap_err();
        assert!(e.to_string().contains("nested"), "{e}");
        let wide = JsonStyle::new(Some(" ".repeat(MAX_INDENT + 1)));
        let e = dumps(&json("[1]"), &wide).unwrap_err();
        assert!(e.to_string().contains("indent"), "{e}");
        let e = dumps(&Value::UNDEFINED, &JsonStyle::new(None)).unwrap_err();
        assert!(e.to_string().contains("not JSON serializable"), "{e}");
    }
}
