//! The Python side of Hugging Face's chat-template environment, for minijinja: what
//! transformers' `apply_chat_template` gives every template besides Jinja's builtins, so
//! that sprout renders a template's text byte for byte as transformers (and vLLM, which
//! calls it) renders it.
//!
//! - `tojson`: transformers' own filter, `json.dumps(x, ensure_ascii=False, indent=None,
//!   separators=None, sort_keys=False)` ([`crate::tokenizer::template_json`]); minijinja's
//!   filter escapes `<`, `>`, `&` and `'` for HTML and writes other separators, which
//!   would change the tools block of every tool-calling template.
//! - `strftime_now(format)`: the current date and time (UTC: a server's clock carries no
//!   zone sprout could trust) in C's `strftime` codes; Llama 3.x prints "Today Date" with
//!   it unless the request passes `date_string` in `chat_template_kwargs`.
//! - Jinja's whitespace control as transformers sets it: `trim_blocks` and
//!   `lstrip_blocks` ([`syntax`]).
//!
//! `raise_exception` and the Python string methods are set by `chat_template` and
//! `template_limits`.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use crate::tokenizer::template_json::{self, JsonStyle};

/// Adds `tojson` and `strftime_now` to `env`, and transformers' whitespace control.
pub fn add_to(env: &mut Environment<'_>) {
    env.set_syntax(syntax());
    env.add_filter("tojson", tojson);
    env.add_function("strftime_now", strftime_now);
}

/// Jinja's syntax with `trim_blocks` and `lstrip_blocks`, as transformers compiles
/// templates.
pub fn syntax() -> minijinja::syntax::SyntaxConfig {
    minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .expect("the default delimiters are valid")
}

fn invalid(why: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, why)
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, its first two arguments by position or by name, the others by name.
fn tojson(
    value: &Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let named = |name: &str, given: Option<Value>| -> Result<Option<Value>, Error> {
        let by_name: Option<Value> = kwargs.get(name)?;
        Ok(by_name.or(given).filter(|v| !v.is_none()))
    };
    let ensure_ascii = named("ensure_ascii", ensure_ascii)?;
    let indent = named("indent", indent)?;
    let separators = named("separators", None)?;
    let sort_keys = named("sort_keys", None)?;
    kwargs.assert_all_used()?;
    let mut style = JsonStyle::new(indent.map(|v| indent_text(&v)).transpose()?);
    if let Some(pair) = separators {
        (style.item_separator, style.key_separator) = separator_pair(&pair)?;
    }
    style.sort_keys = sort_keys.is_some_and(|v| v.is_true());
    style.ensure_ascii = ensure_ascii.is_some_and(|v| v.is_true());
    Ok(Value::from(template_json::dumps(value, &style)?))
}

/// Python's `indent`: a count of spaces (0 or less: none, though each item still
/// starts a new line), or the text itself.
fn indent_text(indent: &Value) -> Result<String, Error> {
    match indent.kind() {
        ValueKind::String => Ok(indent.as_str().unwrap_or_default().to_string()),
        ValueKind::Number | ValueKind::Bool => {
            let n = i64::try_from(indent.clone())
                .map_err(|_| invalid(format!("tojson: indent must be an integer, not {indent}")))?;
            let n = n.clamp(0, template_json::MAX_INDENT as i64 + 1);
            Ok(" ".repeat(n as usize))
        }
        _ => Err(invalid(format!(
            "tojson: indent must be an integer or a string, not {indent}"
        ))),
    }
}

/// Python's `separators`: a pair `(item_separator, key_separator)`.
fn separator_pair(pair: &Value) -> Result<(String, String), Error> {
    let items: Vec<Value> = match pair.kind() {
        ValueKind::Seq => pair.try_iter()?.collect(),
        _ => Vec::new(),
    };
    match items.as_slice() {
        [a, b] if a.as_str().is_some() && b.as_str().is_some() => Ok((
            a.as_str().unwrap_or_default().to_string(),
            b.as_str().unwrap_or_default().to_string(),
        )),
        _ => Err(invalid(format!(
            "tojson: separators must be a pair of strings, not {pair}"
        ))),
    }
}

/// `strftime_now(format)`: now, in UTC, formatted with C's `strftime` codes.
fn strftime_now(format: &str) -> Result<String, Error> {
    let since_epoch = web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_err(|_| invalid("strftime_now: the clock is before 1970".into()))?;
    strftime(format, since_epoch.as_secs() as i64)
}

const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The civil date (year, month 1-12, day 1-31) of a day count since 1970-01-01, by
/// the proleptic Gregorian calendar (Howard Hinnant's days-to-civil algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// `format` for the time `seconds` after the epoch (UTC), with the `strftime` codes
/// templates use; any other code is an error naming it.
pub fn strftime(format: &str, seconds: i64) -> Result<String, Error> {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    let (hour, minute, second) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let before: u32 = (1..month)
        .map(|m| match m {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        })
        .sum();
    let day_of_year = before + day;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let code = chars.next();
        let text = match code {
            Some('a') => DAYS[weekday][..3].to_string(),
            Some('A') => DAYS[weekday].to_string(),
            Some('b') | Some('h') => MONTHS[month as usize - 1][..3].to_string(),
            Some('B') => MONTHS[month as usize - 1].to_string(),
            Some('d') => format!("{day:02}"),
            Some('e') => format!("{day:>2}"),
            Some('m') => format!("{month:02}"),
            Some('y') => format!("{:02}", year.rem_euclid(100)),
            Some('Y') => year.to_string(),
            Some('H') => format!("{hour:02}"),
            Some('I') => format!("{:02}", (hour + 11) % 12 + 1),
            Some('p') => if hour < 12 { "AM" } else { "PM" }.to_string(),
            Some('M') => format!("{minute:02}"),
            Some('S') => format!("{second:02}"),
            Some('j') => format!("{day_of_year:03}"),
            Some('%') => "%".to_string(),
            other => {
                let code = other.map(String::from).unwrap_or_default();
                return Err(invalid(format!(
                    "strftime_now: the code %{code} is not one sprout formats"
                )));
            }
        };
        out.push_str(&text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-07-26 00:00:00 UTC, a Friday; 2000-02-29 13:05:09, a Tuesday.
        assert_eq!(strftime("%d %b %Y", 1_721_952_000).unwrap(), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %e %j %I:%M:%S %p %y %%", 951_829_509).unwrap(),
            "Tuesday February 29 060 01:05:09 PM 00 %"
        );
        assert_eq!(strftime("%a %m/%d %H", 0).unwrap(), "Thu 01/01 00");
        let e = strftime("%Q", 0).unwrap_err().to_string();
        assert!(e.contains("%Q"), "{e}");
    }

    #[test]
    fn tojson_takes_python_s_arguments() {
        let mut env = Environment::new();
        add_to(&mut env);
        let render = |src: &str| env.render_str(src, minijinja::context! { x => vec![1, 2] });
        assert_eq!(render("{{ x | tojson }}").unwrap(), "[1, 2]");
        assert_eq!(
            render("{{ x | tojson(indent=2) }}").unwrap(),
            "[\n  1,\n  2\n]"
        );
        assert_eq!(
            render("{{ x | tojson(separators=(',', ':')) }}").unwrap(),
            "[1,2]"
        );
        assert_eq!(render("{{ 'é<' | tojson }}").unwrap(), "\"é<\"");
        assert_eq!(
            render("{{ 'é' | tojson(ensure_ascii=true) }}").unwrap(),
            "\"\\u00e9\""
        );
        assert!(render("{{ x | tojson(spaces=1) }}").is_err());
        assert!(render("{{ x | tojson(separators=1) }}").is_err());
    }
}
