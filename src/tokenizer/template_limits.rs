//! The bounds on rendering a chat template: a model file, a `--chat-template` file or a
//! server's template hands sprout a Jinja program, and it must end quickly, in little
//! memory, whatever it says.
//!
//! sprout sets each bound itself rather than trusting minijinja's defaults (which let one
//! repeat build 100 million values):
//! - the template's source is at most [`MAX_TEMPLATE_BYTES`];
//! - a render has [`TEMPLATE_FUEL`] units of minijinja's fuel, about one per instruction
//!   and one per 64 bytes a value allocates, charged before the allocation: this bounds
//!   the time and the memory of loops, repeats (`(1,) * n`, `'x' * n`), joins and string
//!   concatenation together;
//! - `range` makes at most [`MAX_RANGE`] values (sprout's own `range`, Jinja's semantics);
//! - Python's `str.format` (minijinja-contrib's, which pads to any width without charging
//!   fuel) takes widths and precisions of at most [`MAX_FORMAT_WIDTH`], checked before it
//!   runs, and no nested replacement fields;
//! - the output is at most [`MAX_OUTPUT_BYTES`] (a writer that refuses more);
//! - macros, recursive loops and includes nest at most [`MAX_RECURSION`] deep.
//!
//! Invariant: every render that hits a bound ends in an error naming that bound and its
//! value ([`describe`]); none is cut short silently.

use std::io::{self, Read};

use minijinja::{Error, ErrorKind, Value};

/// The largest template source sprout compiles (real ones are a few KiB).
pub const MAX_TEMPLATE_BYTES: usize = 256 << 10;
/// minijinja's fuel for one render: about one unit per instruction and per 64 bytes
/// allocated (so at most about 16 MiB of values). A real template rendering a long chat
/// uses a few thousand.
pub const TEMPLATE_FUEL: u64 = 250_000;
/// The most values `range` makes.
pub const MAX_RANGE: usize = 100_000;
/// The longest rendered prompt: far past any model's context.
pub const MAX_OUTPUT_BYTES: usize = 8 << 20;
/// How deep macros, recursive loops and includes may nest.
pub const MAX_RECURSION: usize = 100;
/// The widest field (or longest precision) `str.format` may pad to.
pub const MAX_FORMAT_WIDTH: u64 = 10_000;

/// Sets the bounds on `env` that hold for every render, and the Python string methods
/// that Hugging Face templates call (minijinja-contrib's, `str.format` checked first).
pub fn bound(env: &mut minijinja::Environment<'_>) {
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_recursion_limit(MAX_RECURSION);
    env.add_function("range", range);
    env.set_unknown_method_callback(python_method);
}

/// A Python method on a value (`.strip()`, `.format(...)`, ...), by minijinja-contrib.
fn python_method(
    state: &mut minijinja::State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if method == "format"
        && let Some(format) = value.as_str()
    {
        check_format_fields(format)?;
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Refuses a `str.format` string whose fields ask for more than [`MAX_FORMAT_WIDTH`]
/// characters, or take their width from another field (`{:{}}`).
fn check_format_fields(format: &str) -> Result<(), Error> {
    let refuse = |why: String| Err(Error::new(ErrorKind::InvalidOperation, why));
    let mut rest = format;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(after) = rest.strip_prefix('{') {
            rest = after; // `{{` is a literal brace
            continue;
        }
        let close = rest.find('}').unwrap_or(rest.len());
        let field = &rest[..close];
        let spec = field.split_once(':').map_or("", |(_, spec)| spec);
        if field.contains('{') {
            return refuse("a str.format field takes its width from another field".into());
        }
        for digits in spec.split(|c: char| !c.is_ascii_digit()) {
            if digits.is_empty() {
                continue;
            }
            let n = digits.parse::<u64>().unwrap_or(u64::MAX);
            if n > MAX_FORMAT_WIDTH {
                return refuse(format!(
                    "a str.format width or precision of {digits}, more than the \
                     {MAX_FORMAT_WIDTH} a chat template may ask for"
                ));
            }
        }
        rest = &rest[close.min(rest.len())..];
    }
    Ok(())
}

/// A template's source from `reader` (a file a flag names): at most
/// [`MAX_TEMPLATE_BYTES`] are read, so a huge file is refused without being read whole.
pub fn read_source(reader: impl io::Read) -> Result<String, String> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_TEMPLATE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "the chat template is more than the {MAX_TEMPLATE_BYTES} bytes sprout compiles"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "the chat template is not UTF-8".to_string())
}

/// The template's own size, checked before it is compiled.
pub fn check_source(source: &str) -> Result<(), String> {
    match source.len() > MAX_TEMPLATE_BYTES {
        true => Err(format!(
            "the chat template is {} bytes, more than the {MAX_TEMPLATE_BYTES} sprout compiles",
            source.len()
        )),
        false => Ok(()),
    }
}

/// Jinja's `range(stop)` / `range(start, stop[, step])`, refusing more than [`MAX_RANGE`]
/// values before making any.
fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, stop) = match upper {
        Some(upper) => (lower, upper),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "cannot create range with step of 0",
        ));
    }
    let span = (i128::from(stop) - i128::from(start)) * i128::from(step.signum());
    let count = if span <= 0 {
        0
    } else {
        (span + i128::from(step.abs()) - 1) / i128::from(step.abs())
    };
    if count > MAX_RANGE as i128 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("range of {count} values, more than the {MAX_RANGE} a chat template may make"),
        ));
    }
    let values: Vec<i64> = (0..count as i64).map(|i| start + i * step).collect();
    Ok(Value::from(values))
}

/// The rendered prompt, refusing to grow past [`MAX_OUTPUT_BYTES`].
#[derive(Default)]
pub struct CappedOutput {
    pub bytes: Vec<u8>,
    /// Set when a write would have passed the cap.
    pub overflowed: bool,
}

impl io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_OUTPUT_BYTES {
            self.overflowed = true;
            return Err(io::Error::other("the chat template's output is too long"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What went wrong in a render, naming the bound when one was hit.
pub fn describe(error: &Error, output_overflowed: bool) -> String {
    if output_overflowed {
        return format!(
            "the chat template's output passed {MAX_OUTPUT_BYTES} bytes, the most sprout renders"
        );
    }
    match error.kind() {
        ErrorKind::OutOfFuel => format!(
            "the chat template ran out of sprout's budget of {TEMPLATE_FUEL} fuel units (about \
             one per instruction and one per 64 bytes it allocates)"
        ),
        _ if error.to_string().contains("recursion limit exceeded") => format!(
            "the chat template nests macros, loops or includes deeper than the {MAX_RECURSION} \
             levels sprout allows"
        ),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(v: Result<Value, Error>) -> Vec<i64> {
        v.unwrap()
            .try_iter()
            .unwrap()
            .map(|x| i64::try_from(x).unwrap())
            .collect()
    }

    #[test]
    fn range_follows_jinja() {
        assert_eq!(values(range(4, None, None)), [0, 1, 2, 3]);
        assert_eq!(values(range(2, Some(5), None)), [2, 3, 4]);
        assert_eq!(values(range(0, Some(10), Some(3))), [0, 3, 6, 9]);
        assert_eq!(values(range(5, Some(0), Some(-2))), [5, 3, 1]);
        assert!(values(range(5, Some(2), None)).is_empty());
        assert!(values(range(-3, None, None)).is_empty());
        assert!(range(0, Some(3), Some(0)).is_err());
    }

    #[test]
    fn format_fields_past_the_width_bound_are_refused() {
        for ok in [
            "{}",
            "{0}",
            "{:>10}",
            "{name:.3f}",
            "{{:>99999999}}",
            "{:,}",
        ] {
            assert!(check_format_fields(ok).is_ok(), "{ok}");
        }
        for bad in [
            "{:>1000000000}",
            "{:.99999}",
            "{0:x<10001}",
            "{:{}}",
            "{:>{w}}",
        ] {
            assert!(check_format_fields(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_range_past_the_bound_is_refused_before_it_is_made() {
        assert_eq!(values(range(MAX_RANGE as i64, None, None)).len(), MAX_RANGE);
        let err = range(i64::MIN, Some(i64::MAX), None).unwrap_err();
        assert!(err.to_string().contains(&MAX_RANGE.to_string()), "{err}");
    }
}
