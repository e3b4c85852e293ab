//! How the CLI reports values it uses other than asked ([`sprout::sched::Adjusted`]): one
//! `warning:` line on stderr each, before the run starts, naming the value as the user
//! wrote it (`--max-tokens`, or a prompts file's `"max_tokens"` with its line) and the
//! value used instead. A flag shared by many prompts is reported once, with how many
//! prompts it was adjusted for. Defaults the user did not write are adjusted without a
//! word: a warning about a value nobody asked for is noise.

use std::collections::BTreeMap;

use sprout::sched::Adjusted;

/// A parameter's flag: `max_tokens` is `--max-tokens`.
pub fn flag(param: &str) -> String {
    format!("--{}", param.replace('_', "-"))
}

/// Prints one warning.
pub fn warn(spelled: &str, adjusted: &Adjusted) {
    eprintln!("warning: {}", adjusted.message_for(spelled));
}

/// Prints the warnings for the flags among `adjusted` that the user gave.
pub fn warn_given(adjusted: &[Adjusted], given: impl Fn(&str) -> bool) {
    for a in adjusted.iter().filter(|a| given(a.param)) {
        warn(&flag(a.param), a);
    }
}

/// Warnings for flags that apply to many prompts: the first prompt each flag was adjusted
/// for, and a count of the others.
#[derive(Default)]
pub struct FlagWarnings {
    /// By parameter: the first adjustment, where it was (a prompts file's line) and how
    /// many more prompts had it adjusted.
    first: BTreeMap<&'static str, (Adjusted, Option<String>, usize)>,
}

impl FlagWarnings {
    /// Notes that a flag was adjusted for the prompt at `place` (`None` for `--prompt`).
    pub fn note(&mut self, adjusted: Adjusted, place: Option<String>) {
        self.first
            .entry(adjusted.param)
            .and_modify(|(_, _, more)| *more += 1)
            .or_insert((adjusted, place, 0));
    }

    /// Prints one warning per flag.
    pub fn print(&self) {
        for (adjusted, place, more) in self.first.values() {
            let at = match (place, more) {
                (None, _) => String::new(),
                (Some(p), 0) => format!(" (for {p})"),
                (Some(p), 1) => format!(" (for {p}, and 1 more prompt)"),
                (Some(p), n) => format!(" (for {p}, and {n} more prompts)"),
            };
            eprintln!(
                "warning: {}{at}",
                adjusted.message_for(&flag(adjusted.param))
            );
        }
    }
}
