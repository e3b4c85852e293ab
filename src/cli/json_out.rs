//! The one way the commands turn data into the JSON they print or write.
//!
//! `serde_json` writes a NaN or an infinity as `null`, so a broken log-prob would reach a
//! trainer as a missing value. Everything the commands print goes through here instead:
//! a non-finite number is an error naming where it is (`"logprobs"[3] is NaN`, see
//! [`sprout::trajectory::check_finite`]), and only a value without one is written, by
//! `serde_json` from the value itself (so a struct keeps its field order). f32 values keep
//! their shortest text (`-2.1097965`, not the f64 widening).

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use sprout::trajectory::check_finite;

/// `value` as a JSON value, or an error if it holds a non-finite number.
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<serde_json::Value> {
    Ok(sprout::trajectory::to_json_value(value)?)
}

/// `value` as one line of JSON, or an error if it holds a non-finite number.
pub fn to_line<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    check_finite(value).map_err(|e| anyhow!(e))?;
    Ok(serde_json::to_string(value)?)
}

/// `value` as indented JSON, or an error if it holds a non-finite number.
pub fn to_pretty<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    check_finite(value).map_err(|e| anyhow!(e))?;
    Ok(serde_json::to_string_pretty(value)?)
}

/// `x` if it is finite; `name` says what it is in the error.
pub fn finite(name: &str, x: f64) -> Result<f64> {
    if !x.is_finite() {
        bail!("{name} is {x}, and JSON has no such number");
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Ordered {
        z: f32,
        a: Vec<f32>,
    }

    #[test]
    fn a_struct_keeps_its_field_order_and_f32_its_shortest_text() {
        let r = Ordered {
            z: 1.0,
            a: vec![-2.1097965, -0.00015640259],
        };
        assert_eq!(
            to_line(&r).unwrap(),
            r#"{"z":1.0,"a":[-2.1097965,-0.00015640259]}"#
        );
        // serde_json keeps insertion order (`preserve_order`, which chat templates need).
        assert_eq!(
            to_value(&r).unwrap().to_string(),
            r#"{"z":1.0,"a":[-2.1097965,-0.00015640259]}"#
        );
    }

    #[test]
    fn every_writer_refuses_a_non_finite_number() {
        let r = Ordered {
            z: 0.0,
            a: vec![1.0, f32::NAN],
        };
        assert!(
            to_line(&r)
                .unwrap_err()
                .to_string()
                .contains("\"a\"[1] is NaN")
        );
        assert!(to_pretty(&r).is_err());
        assert!(to_value(&r).is_err());
        assert_eq!(finite("rate", 2.0).unwrap(), 2.0);
        assert!(
            finite("rate", f64::NAN)
                .unwrap_err()
                .to_string()
                .contains("rate")
        );
        for bad in [f64::INFINITY, f64::NEG_INFINITY] {
            assert!(
                finite("rate", bad)
                    .unwrap_err()
                    .to_string()
                    .contains("rate")
            );
        }
    }
}
