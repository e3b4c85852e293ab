//! The one way the commands turn data into the JSON they print or write.
//!
//! `serde_json` writes a NaN or an infinity as `null`, so a broken log-prob would reach a
//! trainer as a missing value. Everything the commands print goes through here instead:
//! the value is first captured with its floats as they are (`serde_value`), any non-finite
//! one is an error naming where it is (`"logprobs"[3] is NaN`), and only then is it
//! written, by `serde_json` from the value itself (so a struct keeps its field order). f32
//! values keep their shortest text (`-2.1097965`, not the f64 widening).

use anyhow::{Result, bail};
use serde::Serialize;
use serde_value::Value as Captured;

/// `value` as a JSON value, or an error if it holds a non-finite number.
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<serde_json::Value> {
    Ok(serde_json::from_str(&to_line(value)?)?)
}

/// `value` as one line of JSON, or an error if it holds a non-finite number.
pub fn to_line<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    check_finite(value)?;
    Ok(serde_json::to_string(value)?)
}

/// `value` as indented JSON, or an error if it holds a non-finite number.
pub fn to_pretty<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    check_finite(value)?;
    Ok(serde_json::to_string_pretty(value)?)
}

/// `x` if it is finite; `name` says what it is in the error.
pub fn finite(name: &str, x: f64) -> Result<f64> {
    if !x.is_finite() {
        bail!("{name} is {x}, and JSON has no such number");
    }
    Ok(x)
}

fn check_finite<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    check(&serde_value::to_value(value)?, &mut String::new())
}

/// Fails on the first non-finite float in `value`, naming its path.
fn check(value: &Captured, path: &mut String) -> Result<()> {
    let bad = match value {
        Captured::F32(x) if !x.is_finite() => Some(*x as f64),
        Captured::F64(x) if !x.is_finite() => Some(*x),
        _ => None,
    };
    if let Some(x) = bad {
        let at = if path.is_empty() { "the value" } else { path };
        bail!("{at} is {x}, and JSON has no such number");
    }
    let mark = path.len();
    match value {
        Captured::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                check(item, path)?;
                path.truncate(mark);
            }
        }
        Captured::Map(map) => {
            for (key, item) in map {
                match key {
                    Captured::String(k) => path.push_str(&format!("\"{k}\"")),
                    _ => path.push_str("[key]"),
                }
                check(key, path)?;
                check(item, path)?;
                path.truncate(mark);
            }
        }
        Captured::Option(Some(inner)) | Captured::Newtype(inner) => check(inner, path)?,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Record {
        logprobs: Vec<f32>,
        nested: Option<Vec<Vec<f64>>>,
    }

    #[test]
    fn a_struct_keeps_its_field_order() {
        #[derive(Serialize)]
        struct Ordered {
            z: u32,
            a: u32,
        }
        assert_eq!(
            to_line(&Ordered { z: 1, a: 2 }).unwrap(),
            r#"{"z":1,"a":2}"#
        );
    }

    #[test]
    fn finite_values_keep_their_shortest_text() {
        let r = Record {
            logprobs: vec![-2.1097965, -0.00015640259],
            nested: None,
        };
        assert_eq!(
            to_line(&r).unwrap(),
            r#"{"logprobs":[-2.1097965,-0.00015640259],"nested":null}"#
        );
        assert_eq!(
            to_value(&r).unwrap().to_string(),
            r#"{"logprobs":[-2.1097965,-0.00015640259],"nested":null}"#
        );
    }

    #[test]
    fn a_non_finite_number_is_an_error_naming_where_it_is() {
        let r = Record {
            logprobs: vec![-1.0, -2.0, -3.0, f32::NAN],
            nested: None,
        };
        let e = to_line(&r).unwrap_err().to_string();
        assert!(e.contains("\"logprobs\"[3] is NaN"), "{e}");
        let r = Record {
            logprobs: vec![],
            nested: Some(vec![vec![0.0], vec![1.0, f64::NEG_INFINITY]]),
        };
        let e = to_pretty(&r).unwrap_err().to_string();
        assert!(e.contains("\"nested\"[1][1] is -inf"), "{e}");
        assert!(to_value(&f32::INFINITY).is_err());
        let v = serde_json::json!({"x": 1.5});
        assert_eq!(to_line(&v).unwrap(), r#"{"x":1.5}"#);
    }

    #[test]
    fn finite_refuses_nan_and_infinities() {
        assert_eq!(finite("rate", 2.0).unwrap(), 2.0);
        assert!(
            finite("rate", f64::NAN)
                .unwrap_err()
                .to_string()
                .contains("rate")
        );
        assert!(finite("rate", f64::INFINITY).is_err());
    }
}
