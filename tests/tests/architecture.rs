//! Keeps docs/architecture.md and the code's shape honest, from the source text alone:
//! - every `file.rs` (`function`) the doc names in "Before the first query", "The life of a
//!   query" and "Around the query" exists and still defines that function (or type), and the
//!   numbered hops of the query's life touch at most eight files;
//! - no two files of a crate import each other, directly or round a circle (a circle means
//!   neither file can be read, changed or tested without the other). Paths written with
//!   `crate::`, `super::` or `self::` count; a directory module reaching its own submodules by
//!   their bare names does not (a module and its children are read as one unit).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The section of the doc whose heading starts with `heading`.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("## {heading}"))
        .unwrap_or_else(|| panic!("docs/architecture.md has a \"{heading}\" section"));
    let rest = &doc[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |at| at);
    &rest[..end]
}

/// The numbered items of a section, each with its continuation lines.
fn numbered_items(text: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let starts = trimmed
            .split_once(". **")
            .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if starts {
            items.push(line.to_string());
        } else if let Some(last) = items.last_mut()
            && line.starts_with("   ")
        {
            last.push('\n');
            last.push_str(line);
        }
    }
    items
}

/// `(file, function)` pairs: a backquoted path ending in `.rs` followed, within the same
/// sentence, by backquoted names in parentheses: `path/file.rs` (`a`, `Type::b`).
fn named_functions(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        let token = &after[..close];
        rest = &after[close + 1..];
        if !token.ends_with(".rs") || token.contains(' ') {
            continue;
        }
        let trimmed = rest.trim_start();
        if !trimmed.starts_with('(') {
            found.push((token.to_string(), String::new()));
            continue;
        }
        let Some(end) = trimmed.find(')') else {
            continue;
        };
        for name in trimmed[1..end].split(',') {
            let name = name.trim().trim_matches('`');
            if name.is_empty() || name.contains(' ') {
                continue;
            }
            let function = name.rsplit("::").next().unwrap_or(name);
            found.push((token.to_string(), function.to_string()));
        }
    }
    found
}

/// Whether `source` defines a function or type called `name`.
fn defines(source: &str, name: &str) -> bool {
    source.lines().any(|line| {
        let mut line = line.trim_start();
        if let Some(rest) = line.strip_prefix("pub") {
            line = match rest.strip_prefix('(') {
                Some(scoped) => scoped.split_once(") ").map_or(rest, |(_, after)| after),
                None => rest.trim_start(),
            };
        }
        let line = line.strip_prefix("const ").unwrap_or(line);
        let line = line.strip_prefix("unsafe ").unwrap_or(line);
        ["fn ", "struct ", "enum ", "trait ", "type "]
            .iter()
            .any(|kind| {
                line.strip_prefix(kind).is_some_and(|rest| {
                    rest.starts_with(name)
                        && !rest[name.len()..]
                            .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
    })
}

#[test]
fn the_traced_query_names_functions_that_exist() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("read doc");
    let life = section(&doc, "The life of a query");
    let mut named = named_functions(section(&doc, "Before the first query"));
    named.extend(named_functions(life));
    named.extend(named_functions(section(&doc, "Around the query")));
    assert!(
        named.len() >= 8,
        "the query's life names too few functions: {named:?}"
    );
    let mut missing = Vec::new();
    let mut files = BTreeSet::new();
    for (file, function) in &named {
        let path = root.join(file);
        let Ok(source) = std::fs::read_to_string(&path) else {
            missing.push(format!("{file}: no such file"));
            continue;
        };
        files.insert(file.clone());
        if !function.is_empty() && !defines(&source, function) {
            missing.push(format!("{file}: no fn or type {function}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md is out of date:\n{}",
        missing.join("\n")
    );
    // The hops themselves: every file a numbered hop names (a test cited as evidence is not
    // a hop).
    let hops = numbered_items(life);
    assert!(
        hops.len() >= 5,
        "the query's life has too few hops: {hops:?}"
    );
    let hop_files: BTreeSet<String> = hops
        .iter()
        .flat_map(|hop| named_functions(hop).into_iter().map(|(file, _)| file))
        .filter(|file| !file.starts_with("tests/"))
        .collect();
    assert!(
        hop_files.len() <= 8,
        "one query crosses {} files (at most 8): {hop_files:?}",
        hop_files.len()
    );
}

/// Every crate of the workspace, as its source root (a directory with a Cargo.toml and a
/// src/, at the top level or one below).
fn crates(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    for depth in 0..2 {
        let mut next = Vec::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if name.starts_with('.') || name == "target" || !entry.path().is_dir() {
                    continue;
                }
                let relative = dir.join(&name);
                if root.join(&relative).join("Cargo.toml").is_file()
                    && root.join(&relative).join("src").is_dir()
                {
                    found.push(relative.join("src").display().to_string());
                }
                if depth == 0 {
                    next.push(relative);
                }
            }
        }
        dirs = next;
    }
    found.sort();
    found
}

/// Source files of a crate, without test-only files.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !(name.contains("tests") || name == "test_support.rs" || name == "testing.rs") {
                out.push(path);
            }
        }
    }
}

/// The module path of a file (`a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is the root).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The code of a file before its first `#[cfg(test)]` inline module (tests import freely).
fn non_test_code(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{')
            })
        {
            break;
        }
        // Comments mention paths without importing them.
        let line = line.split("//").next().unwrap_or_default();
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Every `crate::a::b`, `super::a` or `self::a` path in the code, expanded over `{...}`
/// groups, as absolute module paths.
fn paths_used(code: &str, module: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &code[at..];
        let start = ["crate::", "super::", "self::"]
            .iter()
            .filter_map(|p| rest.find(p).map(|i| (i, *p)))
            .min_by_key(|(i, _)| *i);
        let Some((offset, prefix)) = start else { break };
        let begin = at + offset;
        // Part of a longer identifier (`my_crate::`)?
        if begin > 0 && (bytes[begin - 1].is_ascii_alphanumeric() || bytes[begin - 1] == b'_') {
            at = begin + prefix.len();
            continue;
        }
        let (path_text, len) = take_path(&code[begin..]);
        at = begin + len.max(prefix.len());
        for path in expand(&path_text) {
            let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let mut base: Vec<String> = Vec::new();
            match segments.first().copied() {
                Some("crate") => {
                    segments.remove(0);
                }
                Some("self") => {
                    segments.remove(0);
                    base = module.to_vec();
                    if !is_mod_file {
                        // `self::` in a file is the file's own module.
                    }
                }
                Some("super") => {
                    base = module.to_vec();
                    while segments.first() == Some(&"super") {
                        segments.remove(0);
                        base.pop();
                    }
                }
                _ => continue,
            }
            base.extend(segments.iter().map(|s| s.to_string()));
            out.push(base);
        }
    }
    out
}

/// The path text at the start of `text`, with balanced braces (`crate::a::{b, c::{d}}`).
fn take_path(text: &str) -> (String, usize) {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                return (text[..i].to_string(), i);
            }
            _ => {}
        }
    }
    (text.to_string(), text.len())
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.trim_end_matches("::").to_string()];
    };
    let head = &path[..open];
    let inner = path[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&path[open + 1..]);
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            let p = p.split(" as ").next().unwrap_or(p);
            if p == "self" {
                vec![head.trim_end_matches("::").to_string()]
            } else {
                expand(&format!("{head}{p}"))
            }
        })
        .collect()
}

/// The file that defines a module path: its longest prefix that is a file.
fn file_of(modules: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}

fn circles_in(root: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|file| (module_of(root, file), file.clone()))
        .collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for file in &files {
        let Ok(source) = std::fs::read_to_string(file) else {
            continue;
        };
        let module = module_of(root, file);
        let is_mod_file = file
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        let targets = edges.entry(file.clone()).or_default();
        for path in paths_used(&non_test_code(&source), &module, is_mod_file) {
            if let Some(target) = file_of(&modules, &path)
                && target != *file
            {
                targets.insert(target);
            }
        }
    }
    strongly_connected(&edges)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            component
                .iter()
                .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
                .collect()
        })
        .collect()
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a PathBuf) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        let edges = state.edges;
        if let Some(targets) = edges.get(node) {
            for target in targets {
                let Some((target, _)) = edges.get_key_value(target) else {
                    continue;
                };
                if !state.index.contains_key(target) {
                    visit(state, target);
                    let low = state.low[target].min(state.low[node]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(target) {
                    let low = state.index[target].min(state.low[node]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            state.out.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.out
}

#[test]
fn no_import_circles_between_files() {
    let root = repo();
    let mut report = Vec::new();
    for krate in crates(&root) {
        let dir = root.join(&krate);
        if !dir.is_dir() {
            continue;
        }
        for circle in circles_in(&dir) {
            report.push(format!("{krate}: {}", circle.join(" <-> ")));
        }
    }
    assert!(
        report.is_empty(),
        "files that import each other:\n{}",
        report.join("\n")
    );
}
