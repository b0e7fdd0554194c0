//! The runtime crate's layers stay true: every module of runtime/src imports only from its own
//! layer or the layers below it, so its dependency graph has no cycle between layers.
//!
//! The layers, bottom to top, are `LAYERS` below (lib.rs declares them in this order; its own
//! comment points here). A file's layer is its top-level module. The test reads every file's
//! code (comments and string literals blanked out) and fails, naming the file and line, on:
//! - an import of a higher layer (`use crate::engine::…` in `state/`);
//! - an import through the crate root (`use crate::Error`): name the module it comes from, so
//!   the dependency is visible;
//! - a `crate::` path written inline in code rather than in a `use` line;
//! - a top-level module of lib.rs that is not a layer here, or a layer lib.rs does not declare.
//!
//! Within a layer modules may use each other.

use std::fs;
use std::path::{Path, PathBuf};

/// Bottom to top.
const LAYERS: &[&str] = &[
    "types",
    "serdes",
    "state",
    "config",
    "backend",
    "processor",
    "topology",
    "dsl",
    "engine",
    "http",
    "telemetry",
    "app",
    "testing",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read runtime/src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` with comments, string literals and character literals replaced by spaces (newlines
/// kept, so byte offsets and line numbers still match the file).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in out.iter_mut().take(to).skip(from) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(len) = raw_string_len(rest) {
            blank(&mut out, i, i + len);
            i += len;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\'', '\u{1F600}'), or a lifetime ('a): only the
            // literal ends with a quote before the next non-identifier character.
            let len = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(2).position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, i, i + len);
                    i += len;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only ASCII is written over whole chars")
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start of `rest`.
fn raw_string_len(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = rest[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The spans of the `use` declarations in `code`: from `use` to its `;`.
fn use_spans(code: &str) -> Vec<(usize, usize)> {
    let b = code.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("use ") {
        let at = from + p;
        from = at + 4;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        if let Some(end) = code[at..].find(';') {
            spans.push((at, at + end));
            from = at + end;
        }
    }
    spans
}

/// The first path segments after `crate::` at byte `at` of a use declaration: one name, or
/// each item of a `{…}` group.
fn imported_modules(code: &str, at: usize) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let ident_at = |i: usize| -> String {
        code[i..]
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect()
    };
    if b.get(at) != Some(&b'{') {
        return vec![(at, ident_at(at))];
    }
    let mut items = Vec::new();
    let (mut depth, mut expect_item) = (0, true);
    let mut i = at;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                expect_item = depth == 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => expect_item = true,
            c if expect_item && depth == 1 && is_ident(c) => {
                items.push((i, ident_at(i)));
                expect_item = false;
            }
            _ => {}
        }
        i += 1;
    }
    items
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|&c| c == b'\n').count() + 1
}

#[test]
fn lib_rs_declares_exactly_the_layers_in_order() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("read lib.rs");
    let code = code_only(&lib);
    let declared: Vec<String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect();
    assert_eq!(
        declared, LAYERS,
        "runtime/src/lib.rs must declare the layers of runtime/tests/layers.rs, bottom to top"
    );
}

#[test]
fn every_import_points_down_or_within_its_layer() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut violations = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&root).expect("under src").to_path_buf();
        if rel == Path::new("lib.rs") {
            continue;
        }
        let shown = format!("runtime/src/{}", rel.display());
        let top = rel.components().next().expect("a component");
        let top = top.as_os_str().to_string_lossy();
        let module = top.strip_suffix(".rs").unwrap_or(&top).to_owned();
        let Some(layer) = LAYERS.iter().position(|l| *l == module) else {
            violations.push(format!("{shown}: module `{module}` is in no layer"));
            continue;
        };
        let text = fs::read_to_string(&path).expect("read a source file");
        let code = code_only(&text);
        let spans = use_spans(&code);
        let mut from = 0;
        while let Some(p) = code[from..].find("crate::") {
            let at = from + p;
            from = at + "crate::".len();
            if at > 0 && (is_ident(code.as_bytes()[at - 1]) || code.as_bytes()[at - 1] == b'$') {
                continue;
            }
            let line = line_of(&code, at);
            if !spans.iter().any(|&(s, e)| s <= at && at < e) {
                violations.push(format!(
                    "{shown}:{line}: an inline `crate::` path: import it with a `use` line"
                ));
                continue;
            }
            for (item_at, target) in imported_modules(&code, from) {
                let line = line_of(&code, item_at);
                match LAYERS.iter().position(|l| *l == target) {
                    None => violations.push(format!(
                        "{shown}:{line}: `crate::{target}` imports through the crate root: \
                         import it from its module"
                    )),
                    Some(t) if t > layer => violations.push(format!(
                        "{shown}:{line}: `crate::{target}` points up: layer `{module}` is below \
                         `{target}`"
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} imports break the layers (runtime/tests/layers.rs):\n{}",
        violations.len(),
        violations.join("\n")
    );
}

#[test]
fn the_checker_reads_code_not_comments_or_strings() {
    let code = code_only(
        "// use crate::engine;\nlet s = \"crate::app\"; let c = '\"'; fn f<'a>() {}\n/* crate::x */ use crate::{types::error, state};",
    );
    assert!(!code.contains("engine") && !code.contains("app") && !code.contains("crate::x"));
    assert!(code.contains("fn f<'a>()"));
    let spans = use_spans(&code);
    assert_eq!(spans.len(), 1);
    let at = code.find("crate::{").expect("the use") + "crate::".len();
    let names: Vec<String> = imported_modules(&code, at)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["types", "state"]);
}
