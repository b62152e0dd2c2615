//! Tidy: the house rules that code review would otherwise have to remember, checked over
//! `src/` (TigerBeetle's style: a ratchet that fails only when something gets worse).
//!
//! * A function is at most [`FUNCTION_LINES_MAX`] lines long, except those in
//!   [`LONG_FUNCTIONS`] (today's offenders, to be split). A listed function that got short
//!   must leave the list, so the list only shrinks.
//! * Every `unsafe` block and `unsafe impl` has a `// SAFETY:` comment; every `unsafe fn`
//!   (outside a trait impl, whose trait documents the contract) a `# Safety` doc or a
//!   `// SAFETY:` comment.
//! * Every `pub mod` of `src/lib.rs` is in the layer table at the top of `src/lib.rs`, and no
//!   layer names (`crate::x`) a layer the table says it uses not, or must not know.
//! * No type name (struct, enum, union, trait, type alias) is defined twice in `src/`, except
//!   those in [`DUPLICATE_TYPE_NAMES`] (today's, to be renamed).
//!
//! On failure each check prints its whole list as it should read now, sorted, so that it can
//! be pasted over the old one. Plain std: a small lexer blanks comments and literals, and
//! the rest is brace counting.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const FUNCTION_LINES_MAX: usize = 70;

/// Functions longer than [`FUNCTION_LINES_MAX`] today, as `path::name` (a name twice when a
/// file has two long functions of that name).
const LONG_FUNCTIONS: &[&str] = &[
    "src/bin/perf-simple-query/cli.rs::resolve",
    "src/bin/perf-simple-query/connect.rs::load",
    "src/bin/perf-simple-query/main.rs::run",
    "src/config/tests.rs::indexes_are_checked",
    "src/config/tests.rs::rich_space_resolves_parts_users_and_sizes",
    "src/config/tests.rs::shipped_file_resolves_to_exact_values",
    "src/crud/fast_plan.rs::plan_point",
    "src/crud/plan.rs::plan_data",
    "src/crud/plan.rs::plan_many",
    "src/crud/tests.rs::bad_arguments_and_options_are_raised_as_lua_errors",
    "src/crud/tests.rs::bucket_id_is_pinned_for_keys_of_every_kind",
    "src/crud/tests.rs::crud_changes_are_logged_and_recover_exactly",
    "src/crud/tests.rs::insert_computes_bucket_id_and_returns_metadata_and_rows",
    "src/crud/tests.rs::key_operations_take_scalar_or_array_keys",
    "src/crud/tests.rs::many_applies_in_order_and_reports_errors_as_crud_does",
    "src/crud/tests.rs::select_scans_the_chosen_index_in_iterator_direction",
    "src/crud/write.rs::apply_with",
    "src/protocol/client.rs::write_request_body",
    "src/protocol/tests.rs::auth_follows_the_2_11_table",
    "src/protocol/tests.rs::common_like_packet",
    "src/protocol/tests.rs::every_request_roundtrips",
    "src/server/layout/mod.rs::prepare_for_recovery",
    "src/server/layout/relayout.rs::read_old_shards",
    "src/server/listen.rs::serve_clients",
    "src/server/mesh/serve.rs::serve_batch",
    "src/shard/mod.rs::execute",
    "src/storage/space_tests.rs::tree_iterators_match_tarantools_table",
    "src/storage/tuple.rs::check_tuple",
    "src/storage/update/tests.rs::several_ops_in_one_field_reshape_it_as_tarantool",
    "src/storage/update/tree.rs::branch",
    "src/storage/update/tree.rs::branch_map",
    "src/storage/update/tree.rs::do_nop",
    "src/wal/tests.rs::a_damaged_newest_snapshot_is_refused_naming_the_older_checkpoint_and_forced_uses_it",
];

/// Type names defined more than once in `src/` today, each to get a name of its own.
const DUPLICATE_TYPE_NAMES: &[&str] = &[];

/// Uses of a layer that the table does not allow, still there today (`layer -> used`).
const LAYER_EXCEPTIONS: &[&str] = &["crud -> server"];

/// Files with an `unsafe` that says not why it is sound, today (a path once per `unsafe`).
const UNSAFE_WITHOUT_SAFETY_COMMENT: &[&str] = &[];

fn main_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// Reading the sources

struct Source {
    /// Relative to the crate root, with `/`.
    path: String,
    /// The file as written.
    text: String,
    /// The same bytes with comments and the insides of string and char literals replaced
    /// by spaces (line breaks kept), so that braces and keywords there count for nothing.
    code: String,
}

fn sources() -> Vec<Source> {
    let root = main_dir();
    let mut paths = Vec::new();
    collect_rust_files(&root.join("src"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path).unwrap();
            let code = blank_comments_and_literals(&text);
            let relative = path.strip_prefix(&root).unwrap();
            Source {
                path: relative.to_string_lossy().replace('\\', "/"),
                text,
                code,
            }
        })
        .collect()
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            out.push(path);
        }
    }
}

fn blank_comments_and_literals(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let after_identifier = at > 0 && is_identifier_byte(bytes[at - 1]);
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |n| at + n);
            blank(&mut out, at, end);
            at = end;
        } else if rest.starts_with(b"/*") {
            let end = block_comment_end(bytes, at);
            blank(&mut out, at, end);
            at = end;
        } else if !after_identifier && raw_string_hashes(rest).is_some() {
            let (prefix, hashes) = raw_string_hashes(rest).unwrap();
            let body = at + prefix;
            let mut closing = vec![b'"'];
            closing.extend(std::iter::repeat_n(b'#', hashes));
            let end = find(bytes, body, &closing).map_or(bytes.len(), |n| n + closing.len());
            blank(&mut out, body, end - closing.len());
            at = end;
        } else if rest[0] == b'"' {
            let end = string_end(bytes, at + 1);
            blank(&mut out, at + 1, end - 1);
            at = end;
        } else if rest[0] == b'\'' {
            match char_literal_end(bytes, at) {
                Some(end) => {
                    blank(&mut out, at + 1, end - 1);
                    at = end;
                }
                None => at += 1, // a lifetime or a label
            }
        } else {
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes[from..]
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|n| from + n)
}

fn block_comment_end(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut at = start;
    while at + 1 < bytes.len() {
        if bytes[at..].starts_with(b"/*") {
            depth += 1;
            at += 2;
        } else if bytes[at..].starts_with(b"*/") {
            depth -= 1;
            at += 2;
            if depth == 0 {
                return at;
            }
        } else {
            at += 1;
        }
    }
    bytes.len()
}

/// `r"`, `r#"`, `br##"`...: the length of the opening and the number of `#`.
fn raw_string_hashes(rest: &[u8]) -> Option<(usize, usize)> {
    let after_b = usize::from(rest.first() == Some(&b'b'));
    if rest.get(after_b) != Some(&b'r') {
        return None;
    }
    let hashes = rest[after_b + 1..]
        .iter()
        .take_while(|&&b| b == b'#')
        .count();
    (rest.get(after_b + 1 + hashes) == Some(&b'"')).then_some((after_b + 2 + hashes, hashes))
}

/// The index after the closing quote of a string whose body starts at `at`.
fn string_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// The index after a char literal opening at `start`, or `None` for a lifetime.
fn char_literal_end(bytes: &[u8], start: usize) -> Option<usize> {
    let rest = &bytes[start + 1..];
    if rest.first() == Some(&b'\\') {
        let close = rest.iter().skip(2).position(|&b| b == b'\'')?;
        return Some(start + 1 + 2 + close + 1);
    }
    // One character, possibly several bytes of UTF-8, then the closing quote.
    let width = match rest.first()? {
        byte if *byte < 0x80 => 1,
        byte if *byte >= 0xf0 => 4,
        byte if *byte >= 0xe0 => 3,
        _ => 2,
    };
    (rest.get(width) == Some(&b'\'')).then_some(start + 1 + width + 1)
}

// ---------------------------------------------------------------------------------------------
// Items: the blocks of a file and what opened them

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Function,
    /// `impl Trait for Type`, or a trait's own block.
    TraitImplementation,
    Other,
}

struct Function {
    name: String,
    line_first: usize,
    line_last: usize,
    in_trait_implementation: bool,
}

/// The item header before byte `at` of `code`: the text since the end of the last
/// statement, item or block.
fn header_before(code: &str, at: usize) -> &str {
    code[header_start(code, at)..at].trim()
}

fn header_start(code: &str, at: usize) -> usize {
    code[..at]
        .rfind([';', '{', '}'])
        .map_or(0, |position| position + 1)
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|&b| b == b'\n').count() + 1
}

fn functions(code: &str) -> Vec<Function> {
    let mut found = Vec::new();
    let mut stack: Vec<(BlockKind, Option<usize>)> = Vec::new();
    for (at, byte) in code.bytes().enumerate() {
        match byte {
            b'{' => {
                let header = header_before(code, at);
                let kind = block_kind(header);
                let in_trait_implementation = stack
                    .last()
                    .is_some_and(|(kind, _)| *kind == BlockKind::TraitImplementation);
                let function = (kind == BlockKind::Function).then(|| {
                    found.push(Function {
                        name: function_name(header).to_string(),
                        line_first: line_of(code, fn_keyword_at(code, at)),
                        line_last: 0,
                        in_trait_implementation,
                    });
                    found.len() - 1
                });
                stack.push((kind, function));
            }
            b'}' => {
                if let Some((_, Some(index))) = stack.pop() {
                    found[index].line_last = line_of(code, at);
                }
            }
            _ => {}
        }
    }
    found
}

/// Where the `fn` keyword of the header of the block opening at `at` is.
fn fn_keyword_at(code: &str, at: usize) -> usize {
    let start = header_start(code, at);
    start + code[start..at].find("fn ").unwrap_or(0)
}

fn block_kind(header: &str) -> BlockKind {
    let header = strip_attributes(header);
    let mut item_words = words(header).skip_while(|word| {
        matches!(
            *word,
            "pub" | "crate" | "super" | "in" | "self" | "const" | "async" | "unsafe" | "extern"
        )
    });
    match item_words.next() {
        Some("fn") if !function_name(header).is_empty() => BlockKind::Function,
        Some("impl") if words(header).any(|word| word == "for") => BlockKind::TraitImplementation,
        Some("trait") => BlockKind::TraitImplementation,
        _ => BlockKind::Other,
    }
}

/// The header without its leading `#[...]` attributes.
fn strip_attributes(mut header: &str) -> &str {
    while let Some(rest) = header.strip_prefix("#") {
        let mut depth = 0;
        let mut end = rest.len();
        for (index, c) in rest.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = index + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        header = rest[end..].trim_start();
    }
    header
}

fn function_name(header: &str) -> &str {
    let mut iter = words(header).skip_while(|word| *word != "fn");
    iter.next();
    let name = iter.next().unwrap_or("");
    // `fn(u8) -> u8` is a pointer type, not a function.
    match header.find("fn ") {
        Some(at) if header[at + 3..].trim_start().starts_with(name) => name,
        _ => "",
    }
}

// ---------------------------------------------------------------------------------------------
// The checks

fn report_list(what: &str, should_read: &[String]) -> String {
    let mut text = format!("{what} should read:\n");
    for entry in should_read {
        text.push_str(&format!("    \"{entry}\",\n"));
    }
    text
}

/// Multiset differences: (in `found` and not listed, listed and not found).
fn ratchet(found: &[String], listed: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for entry in found {
        *counts.entry(entry).or_default() += 1;
    }
    for entry in listed {
        *counts.entry(entry).or_default() -= 1;
    }
    let mut new = Vec::new();
    let mut stale = Vec::new();
    for (entry, count) in counts {
        let list = if count > 0 { &mut new } else { &mut stale };
        for _ in 0..count.abs() {
            list.push(entry.to_string());
        }
    }
    (new, stale)
}

#[test]
fn functions_are_at_most_seventy_lines_long() {
    let mut long = Vec::new();
    for source in sources() {
        for function in functions(&source.code) {
            if function.line_last - function.line_first + 1 > FUNCTION_LINES_MAX {
                long.push(format!("{}::{}", source.path, function.name));
            }
        }
    }
    long.sort();
    let (new, stale) = ratchet(&long, LONG_FUNCTIONS);
    assert!(
        new.is_empty() && stale.is_empty(),
        "longer than {FUNCTION_LINES_MAX} lines and not in LONG_FUNCTIONS: {new:?}\n\
         in LONG_FUNCTIONS but short now (remove them): {stale:?}\n{}",
        report_list("LONG_FUNCTIONS", &long)
    );
}

/// Whether the lines before `line` (1-based) hold a comment with `marker`, the comment
/// standing either right above or above the start of the statement `line` continues.
fn commented_above(lines: &[&str], code_lines: &[&str], line: usize, markers: &[&str]) -> bool {
    let has_marker = |text: &str| markers.iter().any(|marker| text.contains(marker));
    if has_marker(lines[line - 1]) {
        return true;
    }
    let mut index = line - 1;
    let mut statement_lines = 0;
    while index > 0 {
        index -= 1;
        let text = lines[index].trim_start();
        let code = code_lines[index].trim();
        if text.starts_with("//") || text.starts_with("#[") || text.starts_with("#!") {
            if has_marker(text) {
                return true;
            }
            continue;
        }
        // Code: the statement may begin a few lines up (`let x =` before `unsafe {`).
        statement_lines += 1;
        if statement_lines > 4 || code.ends_with(';') || code.ends_with('}') || code.is_empty() {
            return false;
        }
        if code.ends_with('{') && !code.ends_with("= {") {
            return false;
        }
    }
    false
}

#[test]
fn every_unsafe_says_why_it_is_sound() {
    let mut missing = Vec::new();
    for source in sources() {
        let lines: Vec<&str> = source.text.lines().collect();
        let code_lines: Vec<&str> = source.code.lines().collect();
        let functions = functions(&source.code);
        for (index, code) in code_lines.iter().enumerate() {
            let line = index + 1;
            for (at, _) in code.match_indices("unsafe") {
                let before = code[..at].chars().last();
                let after = code[at + "unsafe".len()..].trim_start();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    || after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                        && !after.starts_with("impl")
                        && !after.starts_with("fn")
                        && !after.starts_with("extern")
                {
                    continue; // part of a longer word (`unsafe_code`)
                }
                let is_fn = after.starts_with("fn");
                if is_fn {
                    let Some(function) = functions.iter().find(|f| f.line_first == line) else {
                        continue; // a declaration without a body
                    };
                    if function.in_trait_implementation {
                        continue;
                    }
                }
                let markers: &[&str] = if is_fn {
                    &["# Safety", "SAFETY:"]
                } else {
                    &["SAFETY:"]
                };
                if !commented_above(&lines, &code_lines, line, markers) {
                    missing.push((source.path.clone(), line));
                }
            }
        }
    }
    let paths: Vec<String> = missing.iter().map(|(path, _)| path.clone()).collect();
    let (new, stale) = ratchet(&paths, UNSAFE_WITHOUT_SAFETY_COMMENT);
    let lines: Vec<String> = missing
        .iter()
        .filter(|(path, _)| new.contains(path))
        .map(|(path, line)| format!("{path}:{line}"))
        .collect();
    assert!(
        new.is_empty() && stale.is_empty(),
        "unsafe without a `// SAFETY:` comment (or an unsafe fn without a `# Safety` doc): \
         {lines:#?}\nin UNSAFE_WITHOUT_SAFETY_COMMENT but commented now (remove them): \
         {stale:?}\n{}",
        report_list("UNSAFE_WITHOUT_SAFETY_COMMENT", &paths)
    );
}

// ---------------------------------------------------------------------------------------------
// The layer table

struct Layer {
    name: String,
    uses: Vec<String>,
    must_not_know: Vec<String>,
}

fn list_after(line: &str, key: &str) -> Option<Vec<String>> {
    let rest = line.trim_start().strip_prefix(key)?;
    Some(
        rest.split(',')
            .map(|word| word.trim().trim_matches('`').trim_end_matches('.'))
            .filter(|word| !word.is_empty() && *word != "nothing")
            .map(str::to_string)
            .collect(),
    )
}

/// The table at the top of `src/lib.rs`: `//! - `name`: ...`, then indented
/// `//!   - uses: a, b` and `//!   - must not know: c, d` lines.
fn layer_table(lib: &str) -> Vec<Layer> {
    let mut layers: Vec<Layer> = Vec::new();
    // Which list a continuation line (indented, no `-`) goes on: 1 uses, 2 must not know.
    let mut open_list = 0;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        if let Some(rest) = doc.strip_prefix(" - `") {
            let name = rest.split('`').next().unwrap_or("").to_string();
            layers.push(Layer {
                name,
                uses: Vec::new(),
                must_not_know: Vec::new(),
            });
            open_list = 0;
        } else if let Some(layer) = layers.last_mut() {
            if let Some(uses) = list_after(doc, "- uses:") {
                layer.uses = uses;
                open_list = 1;
            } else if let Some(hidden) = list_after(doc, "- must not know:") {
                layer.must_not_know = hidden;
                open_list = 2;
            } else if doc.starts_with("     ") && !doc.trim_start().starts_with('-') {
                let more = list_after(doc, "").unwrap_or_default();
                match open_list {
                    1 => layer.uses.extend(more),
                    2 => layer.must_not_know.extend(more),
                    _ => {}
                }
            } else {
                open_list = 0;
            }
        }
    }
    layers
}

fn lib_modules(lib: &str) -> Vec<String> {
    let code = blank_comments_and_literals(lib);
    code.lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';').trim().to_string())
        .collect()
}

#[test]
fn every_module_is_in_the_layer_table() {
    let lib = fs::read_to_string(main_dir().join("src/lib.rs")).unwrap();
    let table = layer_table(&lib);
    let modules = lib_modules(&lib);
    let named: Vec<&str> = table.iter().map(|layer| layer.name.as_str()).collect();
    let missing: Vec<&String> = modules
        .iter()
        .filter(|m| !named.contains(&m.as_str()))
        .collect();
    let unknown: Vec<&&str> = named
        .iter()
        .filter(|n| !modules.iter().any(|m| m == *n))
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "modules missing from the lib.rs table: {missing:?}; in the table but not modules: \
         {unknown:?}"
    );
    for layer in &table {
        let all_named = layer.uses.iter().chain(&layer.must_not_know);
        for other in all_named {
            assert!(
                modules.contains(other),
                "the table's line for {} names {other}, which is no module",
                layer.name
            );
        }
        for other in &modules {
            let said = layer.uses.contains(other) || layer.must_not_know.contains(other);
            assert!(
                said || *other == layer.name,
                "the table does not say whether {} may use {other}",
                layer.name
            );
        }
    }
}

/// The layers `code` names as `crate::x` (also inside `use crate::{x, y::z}`).
fn layers_named(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `$crate::` in a macro, or a longer path
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (index, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        named.push(first_word(&group[start..index]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.push(first_word(&group[start..index]));
                        start = index + 1;
                    }
                    _ => {}
                }
            }
        } else {
            named.push(first_word(rest));
        }
    }
    named.retain(|name| !name.is_empty());
    named
}

fn first_word(text: &str) -> String {
    words(text).next().unwrap_or("").to_string()
}

#[test]
fn no_layer_uses_a_layer_the_table_keeps_from_it() {
    let lib = fs::read_to_string(main_dir().join("src/lib.rs")).unwrap();
    let table = layer_table(&lib);
    let mut found = Vec::new();
    for source in sources() {
        let Some(rest) = source.path.strip_prefix("src/") else {
            continue;
        };
        let module = rest.split(['/', '.']).next().unwrap_or("");
        let Some(layer) = table.iter().find(|layer| layer.name == module) else {
            continue; // lib.rs, main.rs, bin/
        };
        for other in layers_named(&source.code) {
            if other != layer.name && !layer.uses.contains(&other) {
                found.push(format!("{} -> {other}", layer.name));
            }
        }
    }
    found.sort();
    found.dedup();
    let (new, stale) = ratchet(&found, LAYER_EXCEPTIONS);
    assert!(
        new.is_empty() && stale.is_empty(),
        "layers using what the lib.rs table does not let them use: {new:?}\n\
         in LAYER_EXCEPTIONS but gone (remove them): {stale:?}\n{}",
        report_list("LAYER_EXCEPTIONS", &found)
    );
}

// ---------------------------------------------------------------------------------------------
// Type names

fn type_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack: Vec<BlockKind> = Vec::new();
    let mut pending = String::new();
    for c in code.chars() {
        match c {
            '{' | ';' => {
                let inside_trait = stack.last() == Some(&BlockKind::TraitImplementation);
                if let Some(name) = defined_type(&pending, inside_trait) {
                    names.push(name);
                }
                if c == '{' {
                    stack.push(block_kind(pending.trim()));
                }
                pending.clear();
            }
            '}' => {
                stack.pop();
                pending.clear();
            }
            _ => pending.push(c),
        }
    }
    names
}

/// The name a `struct`/`enum`/`union`/`trait`/`type` header defines. Associated types
/// (inside an `impl ... for` or a trait) define none of the crate's own.
fn defined_type(header: &str, inside_trait: bool) -> Option<String> {
    let header = strip_attributes(header.trim());
    let mut item_words =
        words(header).skip_while(|word| matches!(*word, "pub" | "crate" | "super" | "in" | "self"));
    let keyword = item_words.next()?;
    let is_type = matches!(keyword, "struct" | "enum" | "union" | "trait")
        || keyword == "type" && !inside_trait;
    if !is_type || !header.starts_with(|c: char| c.is_alphabetic()) {
        return None;
    }
    let name = item_words.next()?;
    // Each layer's own `Result` (and `Error`) alias is read with its layer's path.
    if keyword == "type" && matches!(name, "Result" | "Error") {
        return None;
    }
    Some(name.to_string())
}

#[test]
fn no_type_name_is_defined_twice() {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for source in sources() {
        for name in type_names(&source.code) {
            by_name.entry(name).or_default().push(source.path.clone());
        }
    }
    let twice: Vec<String> = by_name
        .iter()
        .filter(|(_, paths)| paths.len() > 1)
        .map(|(name, _)| name.clone())
        .collect();
    let (new, stale) = ratchet(&twice, DUPLICATE_TYPE_NAMES);
    let where_defined: Vec<String> = new
        .iter()
        .map(|name| format!("{name}: {}", by_name[name].join(", ")))
        .collect();
    assert!(
        new.is_empty() && stale.is_empty(),
        "type names defined twice in src/: {where_defined:#?}\n\
         in DUPLICATE_TYPE_NAMES but unique now (remove them): {stale:?}\n{}",
        report_list("DUPLICATE_TYPE_NAMES", &twice)
    );
}
