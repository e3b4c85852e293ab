//! PEFT's rules for which modules an adapter targets and which rank and alpha each one
//! gets, as peft 0.21 applies them (`check_target_module_exists`, `get_pattern_key`):
//!
//! - `target_modules` as a list: a module is targeted when its full name is an entry, or
//!   ends with `.` and an entry; only in the second case does `layers_to_transform`
//!   (with `layers_pattern`) then narrow it to the layers listed;
//! - `target_modules` as a string: a Python regular expression that must match the whole
//!   name (`re.fullmatch`); `"all-linear"` (any case) is every linear layer but the
//!   output projection, which PEFT expands into full names (so `layers_to_transform` does
//!   not narrow it);
//! - `exclude_modules` (a list, matched as names are, or a string matched whole) wins
//!   over `target_modules`;
//! - a layer's index is the first number after `{layers_pattern}.` (any pattern of the
//!   list), or without `layers_pattern` the number after the name's second dot-separated
//!   part (`model.layers.3.` gives 3);
//! - `rank_pattern` and `alpha_pattern`: the first key, in the file's order, that matches
//!   the end of the name after a dot (`re.match(r"(.*\.)?({key})$", name)`) gives the
//!   value; without one, `r` and `lora_alpha`. PEFT writes the file with its keys sorted
//!   and reads them back in that order, so the file's order is what PEFT computes with
//!   when it loads the adapter (keys that overlap may have meant otherwise in training).
//!
//! Patterns are Python `re` syntax, compiled with the `regex` crate, which agrees with
//! Python on the syntax PEFT users write (classes, alternation, groups, repetition, lazy
//! quantifiers, named groups); a pattern it cannot compile (look-around, backreferences)
//! is an error naming the field and the pattern. The compiled size is capped, so a hostile
//! pattern cannot take unbounded memory, and matching takes linear time.

use regex::{Regex, RegexBuilder};

/// The most memory one compiled pattern may take (the regex crate's own accounting).
const MAX_PATTERN_BYTES: usize = 1 << 20;

/// A Python regular expression, compiled into the expression PEFT builds from it.
#[derive(Clone, Debug)]
pub struct Pattern {
    regex: Regex,
}

impl Pattern {
    /// `wrap` puts the config's text into the expression PEFT builds from it; `field`
    /// names the config field for the error.
    fn compile(field: &str, text: &str, wrap: impl Fn(&str) -> String) -> Result<Self, String> {
        let regex = RegexBuilder::new(&wrap(text))
            .size_limit(MAX_PATTERN_BYTES)
            .build()
            .map_err(|e| {
                let why = e.to_string().replace('\n', " ");
                format!(
                    "{field} `{text}` is a regular expression sprout cannot use (Python `re` \
                     syntax without look-around or backreferences): {why}"
                )
            })?;
        Ok(Pattern { regex })
    }

    /// `re.fullmatch(text, name)`.
    pub fn whole(field: &str, text: &str) -> Result<Self, String> {
        Pattern::compile(field, text, |t| format!(r"\A(?:{t})\z"))
    }

    /// A `rank_pattern` or `alpha_pattern` key: `re.match(rf"(.*\.)?({key})$", name)`.
    pub fn key(field: &str, text: &str) -> Result<Self, String> {
        Pattern::compile(field, text, |t| format!(r"\A(?:.*\.)?(?:{t})\z"))
    }

    /// A `layers_pattern` entry: `re.match(rf"(?:^|.*?\.){pattern}\.(?P<idx>\d+)\.", name)`
    /// (the pattern is spliced in ungrouped, as PEFT does).
    pub fn layers(field: &str, text: &str) -> Result<Self, String> {
        Pattern::compile(field, text, |t| {
            format!(r"\A(?:^|.*?\.){t}\.(?P<idx>\d+)\.")
        })
    }

    fn is_match(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    /// The `idx` group of a `layers` pattern's match.
    fn index(&self, name: &str) -> Option<usize> {
        self.regex
            .captures(name)?
            .name("idx")?
            .as_str()
            .parse()
            .ok()
    }
}

/// What `target_modules` selects.
#[derive(Clone, Debug)]
pub enum ModuleSet {
    /// A list: the full name, or a `.`-separated suffix of it.
    Names(Vec<String>),
    /// One regular expression matched against the whole name.
    Regex(Pattern),
    /// `"all-linear"`: every linear layer but the output projection.
    AllLinear,
}

/// What `exclude_modules` takes out (a string is always a regex here: PEFT gives
/// `"all-linear"` no meaning in it).
#[derive(Clone, Debug)]
pub enum Exclude {
    Names(Vec<String>),
    Regex(Pattern),
}

/// The layers `layers_to_transform` keeps, and how a name's layer index is found.
#[derive(Clone, Debug)]
pub struct LayerFilter {
    /// `None`: every layer (absent, null or an empty list, as PEFT reads them).
    pub layers: Option<Vec<usize>>,
    /// `layers_pattern`, compiled, or PEFT's default rule when it gives none.
    patterns: Vec<Pattern>,
}

impl LayerFilter {
    /// `layers_pattern` empty: PEFT's default rule, `.*?\.[^.]*\.(?P<idx>\d+)\.` (the
    /// lazy start takes the first number after a name's second part).
    pub fn new(layers: Option<Vec<usize>>, patterns: Vec<Pattern>) -> Self {
        let patterns = match patterns.is_empty() {
            false => patterns,
            true => vec![
                Pattern::compile("layers_pattern", "", |_| {
                    r"\A.*?\.[^.]*\.(?P<idx>\d+)\.".to_string()
                })
                .expect("a fixed pattern"),
            ],
        };
        LayerFilter { layers, patterns }
    }

    /// The layer index PEFT reads from `name`, if any.
    fn index(&self, name: &str) -> Option<usize> {
        self.patterns.iter().find_map(|p| p.index(name))
    }

    fn keeps(&self, name: &str) -> bool {
        match &self.layers {
            None => true,
            Some(layers) => self.index(name).is_some_and(|i| layers.contains(&i)),
        }
    }
}

/// The whole targeting rule of a config.
#[derive(Clone, Debug)]
pub struct Targeting {
    pub target_modules: ModuleSet,
    pub exclude_modules: Option<Exclude>,
    pub layer_filter: LayerFilter,
}

impl Targeting {
    /// Whether PEFT puts a LoRA layer on the module `name`; `linear` says whether the
    /// module is a linear layer other than the output projection (what `"all-linear"`
    /// expands to).
    pub fn targets(&self, name: &str, linear: bool) -> bool {
        let excluded = match &self.exclude_modules {
            None => false,
            Some(Exclude::Names(names)) => names.iter().any(|n| is_name_or_suffix(name, n)),
            Some(Exclude::Regex(p)) => p.is_match(name),
        };
        if excluded {
            return false;
        }
        match &self.target_modules {
            ModuleSet::Regex(p) => p.is_match(name),
            ModuleSet::AllLinear => linear,
            ModuleSet::Names(names) if names.iter().any(|n| n == name) => true,
            ModuleSet::Names(names) => {
                names.iter().any(|n| name.ends_with(&format!(".{n}")))
                    && self.layer_filter.keeps(name)
            }
        }
    }
}

fn is_name_or_suffix(name: &str, entry: &str) -> bool {
    name == entry || name.ends_with(&format!(".{entry}"))
}

/// `rank_pattern` or `alpha_pattern`: keys in the config's order with their values.
#[derive(Clone, Debug)]
pub struct PatternMap<T> {
    pub entries: Vec<(Pattern, T)>,
}

impl<T: Copy> PatternMap<T> {
    /// The value of the first key that matches `name` (`get_pattern_key`), if any.
    pub fn lookup(&self, name: &str) -> Option<T> {
        self.entries
            .iter()
            .find(|(p, _)| p.is_match(name))
            .map(|(_, v)| *v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> ModuleSet {
        ModuleSet::Names(list.iter().map(|s| s.to_string()).collect())
    }

    fn targeting(target: ModuleSet) -> Targeting {
        Targeting {
            target_modules: target,
            exclude_modules: None,
            layer_filter: LayerFilter::new(None, vec![]),
        }
    }

    const Q0: &str = "model.layers.0.self_attn.q_proj";
    const Q3: &str = "model.layers.3.self_attn.q_proj";
    const V3: &str = "model.layers.3.self_attn.v_proj";
    const DOWN12: &str = "model.layers.12.mlp.down_proj";

    #[test]
    fn a_list_matches_whole_names_and_dotted_suffixes() {
        let t = targeting(names(&["q_proj", "mlp.down_proj"]));
        assert!(t.targets(Q3, true) && t.targets(DOWN12, true));
        assert!(!t.targets(V3, true));
        // A suffix must start at a dot: "proj" is no entry's suffix match for "q_proj".
        let t = targeting(names(&["proj", "_proj"]));
        assert!(!t.targets(Q3, true));
        let t = targeting(names(&["lm_head"]));
        assert!(t.targets("lm_head", false));
    }

    #[test]
    fn a_string_is_a_regex_matched_against_the_whole_name() {
        let p = Pattern::whole("target_modules", r".*\.(q|v)_proj").unwrap();
        let t = targeting(ModuleSet::Regex(p));
        assert!(t.targets(Q3, true) && t.targets(V3, true));
        assert!(!t.targets(DOWN12, true));
        // Not a search: a pattern matching part of the name is no match.
        let t = targeting(ModuleSet::Regex(Pattern::whole("t", "q_proj").unwrap()));
        assert!(!t.targets(Q3, true));
        let p = Pattern::whole("t", r"model\.layers\.[0-2]\.self_attn\.(q|k|v)_proj").unwrap();
        let t = targeting(ModuleSet::Regex(p));
        assert!(t.targets(Q0, true) && !t.targets(Q3, true));
    }

    #[test]
    fn all_linear_is_every_linear_layer_but_the_head_and_ignores_the_layer_filter() {
        let mut t = targeting(ModuleSet::AllLinear);
        t.layer_filter.layers = Some(vec![0]);
        assert!(t.targets(Q3, true) && t.targets(DOWN12, true));
        assert!(!t.targets("lm_head", false));
    }

    #[test]
    fn excluded_modules_win() {
        let mut t = targeting(names(&["q_proj", "v_proj", "down_proj"]));
        let excluded = ["model.layers.3.self_attn.v_proj", "down_proj"];
        t.exclude_modules = Some(Exclude::Names(excluded.map(String::from).to_vec()));
        assert!(t.targets(Q3, true));
        assert!(!t.targets(V3, true) && !t.targets(DOWN12, true));
        let p = Pattern::whole("exclude_modules", r".*layers\.3\..*").unwrap();
        t.exclude_modules = Some(Exclude::Regex(p));
        assert!(!t.targets(Q3, true) && t.targets(Q0, true) && t.targets(DOWN12, true));
    }

    #[test]
    fn layers_to_transform_narrows_suffix_matches_only() {
        let mut t = targeting(names(&["q_proj", "model.layers.3.self_attn.v_proj"]));
        t.layer_filter.layers = Some(vec![0, 12]);
        assert!(t.targets(Q0, true));
        assert!(!t.targets(Q3, true));
        // A full name bypasses the filter, as in PEFT.
        assert!(t.targets(V3, true));
        // layers_pattern names the list the index follows.
        let layers = |p: &[&str]| {
            let p = p
                .iter()
                .map(|p| Pattern::layers("layers_pattern", p).unwrap());
            LayerFilter::new(Some(vec![0, 12]), p.collect())
        };
        t.layer_filter = layers(&["layers"]);
        assert!(t.targets(Q0, true) && !t.targets(Q3, true));
        // A pattern the names do not hold finds no index: nothing is targeted by suffix.
        t.layer_filter = layers(&["h"]);
        assert!(!t.targets(Q0, true));
        // Any pattern of the list may give the index.
        t.layer_filter = layers(&["h", "layers"]);
        assert!(t.targets(Q0, true));
        assert_eq!(t.layer_filter.index(DOWN12), Some(12));
        let default = LayerFilter::new(None, vec![]);
        assert_eq!(default.index(DOWN12), Some(12));
        assert_eq!(default.index("lm_head"), None);
        // The default rule needs a part before the list's name, as PEFT's does.
        assert_eq!(default.index("layers.3.mlp"), None);
    }

    #[test]
    fn the_first_matching_pattern_key_gives_the_value() {
        let key = |k: &str| Pattern::key("rank_pattern", k).unwrap();
        let map = PatternMap {
            entries: vec![
                (key("q_proj"), 4usize),
                (key(r"layers\.3\..*"), 16),
                (key("down_proj"), 2),
            ],
        };
        assert_eq!(map.lookup(Q0), Some(4));
        // Both q_proj and layers.3 match layer 3's q: the first key wins.
        assert_eq!(map.lookup(Q3), Some(4));
        assert_eq!(map.lookup(V3), Some(16));
        assert_eq!(map.lookup(DOWN12), Some(2));
        assert_eq!(map.lookup("model.layers.1.mlp.up_proj"), None);
        // A key matches the end after a dot, not any substring.
        let map = PatternMap {
            entries: vec![(key("_proj"), 1usize), (key("self_attn"), 2)],
        };
        assert_eq!(map.lookup(Q0), None);
        // The key is grouped: an alternation stays inside it.
        let map = PatternMap {
            entries: vec![(key("q_proj|k_proj"), 8usize)],
        };
        assert_eq!(map.lookup(Q0), Some(8));
        assert_eq!(map.lookup(V3), None);
    }

    #[test]
    fn patterns_the_regex_crate_cannot_compile_are_named() {
        let e = Pattern::whole("target_modules", r"(?!lm_head).*").unwrap_err();
        assert!(
            e.contains("target_modules") && e.contains("(?!lm_head)"),
            "{e}"
        );
        let e = Pattern::key("rank_pattern", r"(a)\1").unwrap_err();
        assert!(e.contains("rank_pattern"), "{e}");
        // A pattern that compiles past the size cap is refused, not built.
        let e = Pattern::whole("target_modules", r"(\w{100}){100}").unwrap_err();
        assert!(e.contains("target_modules"), "{e}");
    }
}
