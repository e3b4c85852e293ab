//! RoPE frequency scaling: what a model changes in the per-pair frequencies
//! `theta^(-2i / head_dim)` (`gpu::kernels::rope::frequencies`) before the cos/sin table
//! is built. Nothing on the GPU changes: the decoder builds its `RopeTable` from
//! [`crate::model::config::ModelConfig::rope_frequencies`].
//!
//! Two forms, one per file kind:
//! - Llama 3.x's `llama3` parameters (a Hugging Face config's `rope_scaling`, or
//!   transformers 5's `rope_parameters`): with `wavelen = 2 pi / freq`, pairs whose
//!   wavelength is below `original_max_position_embeddings / high_freq_factor` keep their
//!   frequency, those above `original / low_freq_factor` are divided by `factor`, and those
//!   between blend the two with `smooth = (original / wavelen - low_freq_factor) /
//!   (high_freq_factor - low_freq_factor)`: `(1 - smooth) * freq / factor + smooth * freq`,
//!   as transformers' `_compute_llama3_parameters` does (here in f64);
//! - a GGUF's `rope_freqs.weight`: one f32 divisor per pair (`freq / divisor`), which is
//!   how llama.cpp's converter ships the same scaling. It is used as the file gives it.
//!
//! Every other scaling type (linear, dynamic, yarn, longrope, ...) is refused naming it,
//! as is a partial rotary factor: sprout never computes a model other than the one asked.
//!
//! Invariant: a [`RopeScaling`] that a reader hands out is valid for its config (finite,
//! positive parameters with `high_freq_factor > low_freq_factor`; one finite positive
//! divisor per pair), so the frequencies it gives are finite and positive.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::error::SproutError;
use crate::gpu::kernels::rope::frequencies;

/// How a model scales its RoPE frequencies (`None` in the config: not at all).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "rope_type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Llama 3.x's `rope_type: "llama3"`.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
    /// A GGUF's `rope_freqs.weight`: `freq[i] / divisors[i]`.
    GgufRopeFreqs { divisors: Vec<f32> },
}

impl RopeScaling {
    /// `freqs` (the unscaled per-pair frequencies) as this scaling changes them, in f64.
    pub fn apply(&self, freqs: &mut [f64]) {
        match self {
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original,
            } => {
                let (low_wavelen, high_wavelen) = (original / low, original / high);
                for f in freqs.iter_mut() {
                    let wavelen = 2.0 * std::f64::consts::PI / *f;
                    if wavelen < high_wavelen {
                        continue;
                    }
                    if wavelen > low_wavelen {
                        *f /= factor;
                        continue;
                    }
                    let smooth = (original / wavelen - low) / (high - low);
                    *f = (1.0 - smooth) * *f / factor + smooth * *f;
                }
            }
            RopeScaling::GgufRopeFreqs { divisors } => {
                for (f, &d) in freqs.iter_mut().zip(divisors) {
                    *f /= d as f64;
                }
            }
        }
    }

    /// An error unless `divisors` (a GGUF's `rope_freqs.weight`) holds one finite,
    /// positive value per pair of a head of `head_dim`.
    pub fn from_divisors(divisors: Vec<f32>, head_dim: usize) -> Result<RopeScaling, SproutError> {
        if divisors.len() != head_dim / 2 {
            return Err(SproutError::Model(format!(
                "rope_freqs.weight holds {} values, but a head of {head_dim} has {} pairs",
                divisors.len(),
                head_dim / 2
            )));
        }
        if let Some(i) = divisors.iter().position(|d| !(d.is_finite() && *d > 0.0)) {
            return Err(SproutError::Model(format!(
                "rope_freqs.weight value {i} is {}: each divisor must be finite and positive",
                divisors[i]
            )));
        }
        Ok(RopeScaling::GgufRopeFreqs { divisors })
    }

    /// `config.json`'s `rope_scaling` for this scaling of a head of `head_dim` at
    /// `theta` (`null`: none); an error where config.json cannot say it. A GGUF's divisors
    /// are given as the llama3 parameters that make them ([`llama3_from_divisors`]).
    pub fn to_hf_json(&self, head_dim: usize, theta: f64) -> Result<Value, SproutError> {
        let (factor, low, high, original) = match self {
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => (
                *factor,
                *low_freq_factor,
                *high_freq_factor,
                *original_max_position_embeddings,
            ),
            RopeScaling::GgufRopeFreqs { divisors } => {
                match llama3_from_divisors(divisors, head_dim, theta).map_err(|e| {
                    SproutError::Model(format!(
                        "cannot write rope_scaling to config.json: the GGUF gives its RoPE \
                         scaling only as rope_freqs.weight (a divisor per pair), and {e}"
                    ))
                })? {
                    None => return Ok(Value::Null),
                    Some(scaling) => return scaling.to_hf_json(head_dim, theta),
                }
            }
        };
        Ok(json!({
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": whole(original),
        }))
    }
}

/// The llama3 parameters that give `divisors` (a GGUF's `rope_freqs.weight`, each pair's
/// frequency divisor) for a head of `head_dim` at `theta`; `None` when every divisor is 1.
///
/// The largest divisor is `factor`. A pair between the two bands has the divisor
/// `1 / ((1 - s) / factor + s)` with `s` linear in its frequency, `(original * freq / 2pi -
/// low) / (high - low)`: two such pairs fix the band edges `low / original` and `high /
/// original`, but not the three numbers apart (scaling all three by one number changes no
/// divisor). The original context is taken as the whole number that makes
/// `low_freq_factor` 1, Llama 3.x's own value, and the factors are rounded to six
/// significant digits; the parameters must give back every divisor within 1e-5 of it (the
/// file rounded them to f32), or the error names the first pair that differs. Fewer than
/// two pairs between the bands leave the edges open: an error.
pub fn llama3_from_divisors(
    divisors: &[f32],
    head_dim: usize,
    theta: f64,
) -> Result<Option<RopeScaling>, String> {
    let base = frequencies(head_dim, theta);
    let factor = divisors.iter().fold(1.0f64, |m, &d| m.max(d as f64));
    if factor <= 1.0 + 1e-6 {
        return Ok(None);
    }
    let factor = round_significant(factor);
    let x = |i: usize| base[i] / (2.0 * std::f64::consts::PI);
    let blended: Vec<(f64, f64)> = (0..divisors.len().min(base.len()))
        .filter(|&i| {
            let d = divisors[i] as f64;
            d > 1.0 + 1e-5 && d < factor * (1.0 - 1e-5)
        })
        .map(|i| {
            let inv = 1.0 / divisors[i] as f64;
            (x(i), (inv - 1.0 / factor) / (1.0 - 1.0 / factor))
        })
        .collect();
    let (Some(&(x1, s1)), Some(&(x2, s2))) = (blended.first(), blended.last()) else {
        return Err("no pair lies between its bands to fix the llama3 parameters".into());
    };
    if blended.len() < 2 || x1 == x2 {
        return Err(
            "only one pair lies between its bands, too few to fix the llama3 parameters".into(),
        );
    }
    let slope = (s2 - s1) / (x2 - x1);
    let low_edge = x1 - s1 / slope;
    let high_edge = low_edge + 1.0 / slope;
    if !(slope > 0.0 && low_edge > 0.0 && high_edge > low_edge) {
        return Err("its divisors do not follow the llama3 formula".into());
    }
    let original = (1.0 / low_edge).round().max(1.0);
    let scaling = RopeScaling::Llama3 {
        factor,
        low_freq_factor: round_significant(original * low_edge),
        high_freq_factor: round_significant(original * high_edge),
        original_max_position_embeddings: original,
    };
    let mut scaled = base.clone();
    scaling.apply(&mut scaled);
    for (i, (&d, (b, s))) in divisors.iter().zip(base.iter().zip(&scaled)).enumerate() {
        let got = b / s;
        if (got - d as f64).abs() > 1e-5 * d as f64 {
            return Err(format!(
                "the llama3 parameters that fit it ({}) give pair {i} the divisor {got}, \
                 not the file's {d}",
                serde_json::to_string(&scaling).unwrap_or_default()
            ));
        }
    }
    Ok(Some(scaling))
}

/// `x` to six significant digits (a parameter recovered from f32 divisors carries their
/// rounding in its last digits).
fn round_significant(x: f64) -> f64 {
    let digits = 6 - 1 - x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// A number that is whole as an integer in JSON (transformers checks the original
/// context length is an int).
fn whole(x: f64) -> Value {
    match x.fract() == 0.0 && x.abs() < 9.0e15 {
        true => json!(x as i64),
        false => json!(x),
    }
}

/// The RoPE fields of a Hugging Face `config.json`, in either form: the hub's
/// (`rope_theta`, `rope_scaling`) or transformers 5's (`rope_parameters`, holding
/// `rope_theta` and the scaling's fields). Gives `(theta, scaling)`; an error (the text
/// after `config.json: `) names a field sprout would compute differently.
pub(crate) fn rope_from_hf(
    rope_theta: Option<f64>,
    rope_scaling: Option<&Value>,
    rope_parameters: Option<&Value>,
    partial_rotary_factor: Option<f64>,
) -> Result<(f64, Option<RopeScaling>), String> {
    check_partial("partial_rotary_factor", partial_rotary_factor)?;
    let mut theta = rope_theta;
    let mut scaling = None;
    if let Some(v) = rope_scaling.filter(|v| !v.is_null()) {
        scaling = parse_scaling("rope_scaling", object("rope_scaling", v)?)?;
    }
    if let Some(v) = rope_parameters.filter(|v| !v.is_null()) {
        let params = object("rope_parameters", v)?;
        if let Some(t) = params.get("rope_theta") {
            let t = number("rope_parameters.rope_theta", t)?;
            if theta.is_some_and(|top| top != t) {
                return Err(format!(
                    "rope_theta {} and rope_parameters.rope_theta {t} disagree",
                    theta.unwrap_or_default()
                ));
            }
            theta = Some(t);
        }
        let from_params = parse_scaling("rope_parameters", params)?;
        if rope_scaling.is_some_and(|v| !v.is_null()) && from_params != scaling {
            return Err(
                "rope_scaling and rope_parameters give different RoPE scalings; give one".into(),
            );
        }
        scaling = from_params;
    }
    let theta = theta.unwrap_or(10000.0);
    if !(theta.is_finite() && theta > 0.0) {
        return Err(format!("rope_theta {theta} is not a positive number"));
    }
    Ok((theta, scaling))
}

fn object<'a>(field: &str, v: &'a Value) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{field} is {v}, not an object"))
}

fn number(field: &str, v: &Value) -> Result<f64, String> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("{field} is {v}, not a number"))
}

fn check_partial(field: &str, factor: Option<f64>) -> Result<(), String> {
    match factor {
        Some(f) if f != 1.0 => Err(format!(
            "{field} is {f}: partial rotary embeddings are not supported"
        )),
        _ => Ok(()),
    }
}

/// The scaling an object (`rope_scaling` or `rope_parameters`) names: `None` for
/// `default`; the llama3 parameters, each required; an error for any other type.
fn parse_scaling(field: &str, o: &Map<String, Value>) -> Result<Option<RopeScaling>, String> {
    let kind_field = match o.contains_key("rope_type") {
        true => "rope_type",
        false => "type",
    };
    let kind = match o.get(kind_field) {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(format!("{field}.{kind_field} is {other}, not a string")),
        None => return Err(format!("{field} has no rope_type")),
    };
    let partial = match o.get("partial_rotary_factor") {
        Some(v) => Some(number(&format!("{field}.partial_rotary_factor"), v)?),
        None => None,
    };
    check_partial(&format!("{field}.partial_rotary_factor"), partial)?;
    match kind {
        "default" => Ok(None),
        "llama3" => {
            let get = |name: &str| -> Result<f64, String> {
                let at = format!("{field}.{name}");
                match o.get(name) {
                    Some(v) => number(&at, v),
                    None => Err(format!("{at} is missing (rope type llama3 needs it)")),
                }
            };
            let factor = get("factor")?;
            let low = get("low_freq_factor")?;
            let high = get("high_freq_factor")?;
            let original = get("original_max_position_embeddings")?;
            if factor <= 0.0 || low <= 0.0 || original <= 0.0 {
                return Err(format!(
                    "{field}: llama3's factor {factor}, low_freq_factor {low} and \
                     original_max_position_embeddings {original} must be positive"
                ));
            }
            if high <= low {
                return Err(format!(
                    "{field}: llama3's high_freq_factor {high} must exceed low_freq_factor {low}"
                ));
            }
            Ok(Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original,
            }))
        }
        other => Err(format!(
            "{field}.{kind_field} is `{other}`: rope scaling `{other}` is not supported \
             (supported: default, llama3)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1's published parameters.
    fn llama31() -> RopeScaling {
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }
    }

    #[test]
    fn llama3_keeps_high_frequencies_divides_low_ones_and_blends_between() {
        let base = frequencies(128, 500000.0);
        let mut scaled = base.clone();
        llama31().apply(&mut scaled);
        let (mut kept, mut divided, mut blended) = (0, 0, 0);
        for (&b, &s) in base.iter().zip(&scaled) {
            let wavelen = 2.0 * std::f64::consts::PI / b;
            if wavelen < 8192.0 / 4.0 {
                assert_eq!(s, b);
                kept += 1;
            } else if wavelen > 8192.0 {
                assert_eq!(s, b / 8.0);
                divided += 1;
            } else {
                // Strictly between the two, and the blend the formula says.
                assert!(s < b && s > b / 8.0, "{s} {b}");
                let smooth = (8192.0 / wavelen - 1.0) / 3.0;
                assert_eq!(s, (1.0 - smooth) * b / 8.0 + smooth * b);
                blended += 1;
            }
        }
        assert!(
            kept > 0 && divided > 0 && blended > 0,
            "{kept} {divided} {blended}"
        );
    }

    /// Llama 3.1's divisors as a GGUF stores them (f32) give its own parameters back, and
    /// so do another set's; divisors of one band only cannot.
    #[test]
    fn gguf_divisors_give_back_their_llama3_parameters() {
        let other = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64.0,
        };
        for (scaling, head_dim, theta) in [(llama31(), 128, 500000.0), (other, 64, 500000.0)] {
            let base = frequencies(head_dim, theta);
            let mut scaled = base.clone();
            scaling.apply(&mut scaled);
            let divisors: Vec<f32> = base
                .iter()
                .zip(&scaled)
                .map(|(b, s)| (b / s) as f32)
                .collect();
            let back = llama3_from_divisors(&divisors, head_dim, theta).unwrap();
            assert_eq!(back, Some(scaling));
        }
        assert_eq!(llama3_from_divisors(&[1.0; 4], 8, 1e4), Ok(None));
        let e = llama3_from_divisors(&[1.0, 1.0, 8.0, 8.0], 8, 1e4).unwrap_err();
        assert!(e.contains("no pair lies between"), "{e}");
    }

    #[test]
    fn gguf_divisors_divide_each_pair() {
        let mut f = vec![1.0, 0.5, 0.25];
        let s = RopeScaling::from_divisors(vec![1.0, 2.0, 8.0], 6).unwrap();
        s.apply(&mut f);
        assert_eq!(f, [1.0, 0.25, 0.03125]);
        let e = RopeScaling::from_divisors(vec![1.0, 2.0], 6).unwrap_err();
        assert!(e.to_string().contains("2 values") && e.to_string().contains("3 pairs"));
        let e = RopeScaling::from_divisors(vec![1.0, 0.0, 1.0], 6).unwrap_err();
        assert!(e.to_string().contains("value 1 is 0"), "{e}");
        let e = s.to_hf_json(6, 10000.0).unwrap_err().to_string();
        assert!(
            e.contains("rope_freqs.weight") && e.contains("llama3"),
            "{e}"
        );
    }

    #[test]
    fn both_config_forms_give_the_same_rope() {
        let hub = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let old = json!({"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let mut v5 = hub.clone();
        v5["rope_theta"] = json!(500000.0);
        let want = (500000.0, Some(llama31()));
        assert_eq!(
            rope_from_hf(Some(5e5), Some(&hub), None, None),
            Ok(want.clone())
        );
        assert_eq!(
            rope_from_hf(Some(5e5), Some(&old), None, None),
            Ok(want.clone())
        );
        assert_eq!(rope_from_hf(None, None, Some(&v5), None), Ok(want.clone()));
        // transformers 5 may also write both forms; they must agree.
        assert_eq!(
            rope_from_hf(Some(5e5), Some(&hub), Some(&v5), None),
            Ok(want)
        );
        let default = json!({"rope_type": "default", "rope_theta": 1e6});
        assert_eq!(
            rope_from_hf(None, None, Some(&default), None),
            Ok((1e6, None))
        );
        assert_eq!(
            rope_from_hf(None, Some(&Value::Null), None, None),
            Ok((1e4, None))
        );
        // The export writes what the hub form reads back.
        let back = llama31().to_hf_json(128, 500000.0).unwrap();
        assert_eq!(back, hub);
    }

    #[test]
    fn what_sprout_would_compute_differently_is_named() {
        let err = |theta, scaling: Value, params: Value, partial| {
            let s = Some(&scaling).filter(|v| !v.is_null());
            let p = Some(&params).filter(|v| !v.is_null());
            rope_from_hf(theta, s, p, partial).unwrap_err()
        };
        for kind in ["linear", "dynamic", "yarn", "longrope"] {
            let e = err(
                None,
                json!({"rope_type": kind, "factor": 2.0}),
                Value::Null,
                None,
            );
            assert!(e.contains(&format!("rope scaling `{kind}`")), "{e}");
            let e = err(
                None,
                Value::Null,
                json!({"rope_type": kind, "factor": 2.0}),
                None,
            );
            assert!(
                e.contains("rope_parameters.rope_type") && e.contains(kind),
                "{e}"
            );
        }
        let e = err(
            None,
            json!({"rope_type": "llama3", "factor": 8.0}),
            Value::Null,
            None,
        );
        assert!(e.contains("rope_scaling.low_freq_factor is missing"), "{e}");
        let e = err(None, json!({"factor": 8.0}), Value::Null, None);
        assert!(e.contains("rope_scaling has no rope_type"), "{e}");
        let bad = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let e = err(None, bad, Value::Null, None);
        assert!(e.contains("high_freq_factor 4 must exceed"), "{e}");
        let e = err(
            Some(1e4),
            Value::Null,
            json!({"rope_type": "default", "rope_theta": 1e6}),
            None,
        );
        assert!(
            e.contains("rope_theta 10000 and rope_parameters.rope_theta 1000000"),
            "{e}"
        );
        let e = err(None, Value::Null, Value::Null, Some(0.5));
        assert!(e.contains("partial_rotary_factor is 0.5"), "{e}");
        let p = json!({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25});
        let e = err(None, Value::Null, p, None);
        assert!(
            e.contains("rope_parameters.partial_rotary_factor is 0.25"),
            "{e}"
        );
        let scaled = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let e = err(None, scaled, json!({"rope_type": "default"}), None);
        assert!(e.contains("different RoPE scalings"), "{e}");
        let e = err(None, Value::Null, json!([1, 2]), None);
        assert!(e.contains("rope_parameters is [1,2], not an object"), "{e}");
        let e = err(Some(-1.0), Value::Null, Value::Null, None);
        assert!(e.contains("rope_theta -1"), "{e}");
    }
}
