//! The map in ARCHITECTURE.md is the rule, and this test holds the code to it: every path
//! into the crate in `src/` (`use crate::...`, inline `crate::x::...` paths, `super::`
//! climbs that leave a module, `pub use` re-exports) must reach a module, or a named item,
//! that the importing module's row of the table lists; and every module and item a row
//! lists must be imported, so the table says what the code does. A whole module a row
//! lists must stand above that row (the table runs from the ground up); a single item
//! may be named from anywhere (the crate's error type gathers the modules' errors that
//! way). Every module of the library has a row, and the binary (`src/main.rs`,
//! `src/cli/`) is the row `cli/`, which may import the whole library.
//!
//! Paths are read from the source text with comments and literals blanked out, so a doc
//! link or a string is never taken for an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One row of the table: the modules it names and what they may import.
struct Row {
    modules: Vec<String>,
    /// Whole modules.
    imports: BTreeSet<String>,
    /// Single items, as full paths from the crate root (`gpu::kernels::RowInfo`).
    items: BTreeSet<String>,
    /// The binary's row: any module of the library.
    library: bool,
}

/// The table under "## Modules, from the ground up", in order.
fn read_map(text: &str) -> Result<Vec<Row>, String> {
    let section = text
        .split("## Modules, from the ground up")
        .nth(1)
        .ok_or("ARCHITECTURE.md has no section \"Modules, from the ground up\"")?;
    let mut rows = Vec::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 3 || cells[0] == "module" || cells[0].starts_with("---") {
            continue;
        }
        let modules = ticked(cells[0])
            .map(|m| m.trim_end_matches('/').to_string())
            .collect();
        let mut row = Row {
            modules,
            imports: BTreeSet::new(),
            items: BTreeSet::new(),
            library: cells[2] == "the library",
        };
        for name in ticked(cells[2]) {
            if name.contains("::") {
                row.items.insert(name.to_string());
            } else {
                row.imports.insert(name.to_string());
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err("ARCHITECTURE.md's module table has no rows".into());
    }
    Ok(rows)
}

/// The `backticked` words of a table cell.
fn ticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

/// `text` with comments, strings and character literals blanked (newlines kept).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { '\n' } else { ' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            loop {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let open = rest.iter().position(|&c| c == b'"').unwrap() + 1;
            let body = &rest[open..];
            i + open + find(body, &close).expect("an unterminated raw string") + close.len()
        } else if rest[0] == b'"' || rest.starts_with(b"b\"") {
            let mut j = i + rest.iter().position(|&c| c == b'"').unwrap() + 1;
            while b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' {
            match char_literal_len(rest) {
                Some(n) => i + n,
                None => i + 1, // a lifetime's quote
            }
        } else {
            out.push(rest[0] as char);
            i += 1;
            continue;
        };
        blank(&mut out, &b[i..end]);
        i = end;
    }
    out
}

/// The number of `#` of a raw string starting here (`r"`, `r#"`, `br#"` ...).
fn raw_string_start(s: &[u8]) -> Option<usize> {
    let s = s.strip_prefix(b"b").unwrap_or(s);
    let s = s.strip_prefix(b"r")?;
    let hashes = s.iter().take_while(|&&c| c == b'#').count();
    (s.get(hashes) == Some(&b'"')).then_some(hashes)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The length of a character literal starting at `s` (`'a'`, `'\n'`, `'\u{1F600}'`), or
/// `None` for a lifetime.
fn char_literal_len(s: &[u8]) -> Option<usize> {
    if s.get(1) == Some(&b'\\') {
        let close = s[2..].iter().position(|&c| c == b'\'')? + 2;
        return Some(close + 1);
    }
    let ch = (2..=5)
        .filter_map(|end| std::str::from_utf8(s.get(1..end)?).ok())
        .find_map(|text| text.chars().next())?;
    let after = 1 + ch.len_utf8();
    (s.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// Identifiers and the punctuation that matters here: `::`, `{`, `}`, `,`, `;`.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
            continue;
        }
        if !c.is_whitespace() {
            out.push(c.to_string());
        }
        i += 1;
    }
    out
}

/// Every path a file names, as written (`crate::gpu::Gpu`, `super::pool::BlockPool`),
/// with the inline modules it sits in (`mod tests { ... }`).
fn paths(code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let t = tokens(code);
    let mut out = Vec::new();
    // Inline modules: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < t.len() {
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            "mod" if t.get(i + 2).is_some_and(|b| b == "{") => {
                inline.push((t[i + 1].clone(), depth + 1));
            }
            "use" => {
                let end = (i..t.len())
                    .find(|&j| t[j] == ";")
                    .expect("a use ends with ;");
                let here: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                for path in use_tree(&t[i + 1..end], Vec::new()) {
                    out.push((here.clone(), path));
                }
                i = end;
            }
            "crate" | "super" if i == 0 || t[i - 1] != "::" => {
                let mut path = vec![t[i].clone()];
                let mut j = i + 1;
                while t.get(j).is_some_and(|s| s == "::")
                    && t.get(j + 1).is_some_and(|s| is_ident(s))
                {
                    path.push(t[j + 1].clone());
                    j += 2;
                }
                if path.len() > 1 {
                    let here = inline.iter().map(|(n, _)| n.clone()).collect();
                    out.push((here, path));
                }
                i = j - 1;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The leaves of a use tree (`a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`).
fn use_tree(t: &[String], prefix: Vec<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut path = prefix.clone();
    let mut i = 0;
    while i < t.len() {
        match t[i].as_str() {
            "::" => {}
            "{" => {
                let mut depth = 0;
                let mut start = i + 1;
                for j in i..t.len() {
                    match t[j].as_str() {
                        "{" => depth += 1,
                        "}" => depth -= 1,
                        "," if depth == 1 => {
                            out.extend(use_tree(&t[start..j], path.clone()));
                            start = j + 1;
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        out.extend(use_tree(&t[start..j], path.clone()));
                        return out;
                    }
                }
            }
            "as" => break,
            "self" if !path.is_empty() => {}
            word => path.push(word.to_string()),
        }
        i += 1;
    }
    if path.len() > prefix.len() || (!path.is_empty() && t.iter().any(|s| s == "self")) {
        out.push(path);
    }
    out
}

/// A source file of `src/` and the module path it defines (empty for a crate root).
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    binary: bool,
}

fn source_files(src: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if module
                .last()
                .is_some_and(|m| m == "mod" || m == "lib" || m == "main")
            {
                module.pop();
            }
            let binary = rel.starts_with("cli") || rel == Path::new("main.rs");
            out.push(SourceFile {
                path,
                module,
                binary,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// An import of one module from another: the full path it names.
#[derive(Debug)]
struct Import {
    from: String,
    file: String,
    to: String,
    path: String,
}

/// Where `path` (as written in module `here`) leads, as a path from the library's root.
fn resolve(here: &[String], path: &[String], roots: &BTreeMap<String, String>) -> Vec<String> {
    let mut module = here.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            module.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                module.pop();
                rest = &rest[1..];
            }
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    let mut full = module;
    full.extend(rest.iter().cloned());
    // An item the root re-exports (`crate::SproutError`) lives in its module.
    if let Some(first) = full.first()
        && let Some(home) = roots.get(first)
    {
        full.insert(0, home.clone());
    }
    full
}

#[test]
fn every_import_follows_the_map_and_the_map_is_what_the_code_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let rows = read_map(&map).unwrap_or_else(|e| panic!("{e}"));
    let src = root.join("src");
    let files = source_files(&src);
    // The library's modules (lib.rs's `mod` items) and what its root re-exports.
    let lib = code_only(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let lib_tokens = tokens(&lib);
    let modules: BTreeSet<String> = lib_tokens
        .windows(2)
        .filter(|w| w[0] == "mod")
        .map(|w| w[1].clone())
        .collect();
    let mut roots = BTreeMap::new();
    for (_, path) in paths(&lib) {
        if let [home, .., item] = &path[..] {
            roots.insert(item.clone(), home.clone());
        }
    }

    let mut problems = Vec::new();
    let mut row_of = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        for m in &row.modules {
            // The binary and the web crate's rows stand above the library.
            if !row.library && !modules.contains(m) {
                problems.push(format!("ARCHITECTURE.md has a row for `{m}`, not a module"));
            }
            row_of.insert(m.clone(), i);
        }
        for m in &row.imports {
            match rows[..i].iter().any(|r| r.modules.contains(m)) {
                true => {}
                false => problems.push(format!(
                    "the row of {:?} lists `{m}`, which is not a module above it",
                    row.modules
                )),
            }
        }
    }
    for m in &modules {
        if !row_of.contains_key(m) {
            problems.push(format!(
                "module `{m}` has no row in ARCHITECTURE.md's table"
            ));
        }
    }

    let mut imports = Vec::new();
    for file in &files {
        if file.module.is_empty() && !file.binary {
            continue; // lib.rs: the root declares the modules and re-exports
        }
        let code = code_only(&std::fs::read_to_string(&file.path).unwrap());
        let name = file.path.strip_prefix(root).unwrap().display().to_string();
        let from = if file.binary {
            "cli".to_string()
        } else {
            file.module[0].clone()
        };
        for (inline, path) in paths(&code) {
            let (to, full) = if file.binary {
                // In the binary, `crate::` is the binary itself; the library is `sprout::`.
                match path.first().map(String::as_str) {
                    Some("sprout") => {
                        let full = resolve(&[], &path[1..], &roots);
                        (full[0].clone(), full)
                    }
                    _ => continue,
                }
            } else {
                if !matches!(path[0].as_str(), "crate" | "super") {
                    continue;
                }
                let mut here = file.module.clone();
                here.extend(inline);
                let full = resolve(&here, &path, &roots);
                match full.first() {
                    Some(first) if first != &from => (first.clone(), full),
                    _ => continue,
                }
            };
            imports.push(Import {
                from: from.clone(),
                file: name.clone(),
                to,
                path: full.join("::"),
            });
        }
    }

    let mut used: BTreeSet<(usize, String)> = BTreeSet::new();
    for import in &imports {
        if import.to == "error" {
            continue;
        }
        let Some(&i) = row_of.get(&import.from) else {
            continue; // reported above
        };
        let row = &rows[i];
        let item = row
            .items
            .iter()
            .find(|item| import.path == **item || import.path.starts_with(&format!("{item}::")));
        if row.library {
            continue;
        } else if row.imports.contains(&import.to) {
            used.insert((i, import.to.clone()));
        } else if let Some(item) = item {
            used.insert((i, item.clone()));
        } else {
            problems.push(format!(
                "{} ({}) reaches `{}`: ARCHITECTURE.md lets `{}` import {}",
                import.file,
                import.from,
                import.path,
                import.from,
                allowed(row)
            ));
        }
    }
    for (i, row) in rows.iter().enumerate() {
        for listed in row.imports.iter().chain(&row.items) {
            if !used.contains(&(i, listed.clone())) {
                problems.push(format!(
                    "ARCHITECTURE.md lists `{listed}` as imported by {:?}, which does not import it",
                    row.modules
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the imports and ARCHITECTURE.md's map disagree:\n  {}",
        problems.join("\n  ")
    );
}

/// What a row allows, for an error message.
fn allowed(row: &Row) -> String {
    let all: Vec<String> = row
        .imports
        .iter()
        .chain(&row.items)
        .map(|m| format!("`{m}`"))
        .collect();
    match all.is_empty() {
        true => "nothing but `error`".into(),
        false => format!("only {} (and `error`)", all.join(", ")),
    }
}

#[test]
fn paths_are_read_from_code_not_from_comments_or_strings() {
    let code = code_only(
        "// use crate::model::X;\n/// [`crate::engine::Engine`]\nlet s = \"crate::kv::Y\";\n\
         let r = r#\"crate::sched::Z\"#; let c = '\"'; fn f<'a>(x: &'a u8) {}\n\
         use crate::{gpu::{Gpu, kernels::RowInfo}, formats::WeightFormat};\n\
         let p = super::super::spec::MAX_DRAFT; mod tests { use super::helper; }",
    );
    let found: Vec<String> = paths(&code)
        .into_iter()
        .map(|(_, p)| p.join("::"))
        .collect();
    assert_eq!(
        found,
        [
            "crate::gpu::Gpu",
            "crate::gpu::kernels::RowInfo",
            "crate::formats::WeightFormat",
            "super::super::spec::MAX_DRAFT",
            "super::helper",
        ]
    );
    let inline: Vec<Vec<String>> = paths(&code).into_iter().map(|(m, _)| m).collect();
    assert_eq!(inline.last().unwrap(), &["tests".to_string()]);
    let roots = BTreeMap::new();
    let here = ["sched".to_string(), "drafting".to_string()];
    let climb: Vec<String> = ["super", "super", "spec", "MAX_DRAFT"]
        .map(String::from)
        .to_vec();
    assert_eq!(resolve(&here, &climb, &roots), ["spec", "MAX_DRAFT"]);
}
