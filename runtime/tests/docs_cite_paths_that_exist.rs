//! Every repository path that the docs, the code's comments, the scripts and the manifests cite
//! exists, so a reader who follows one finds the file (docs/design.md follows the layout as it is).
//!
//! A cited path is a word starting with one of the workspace's top-level folders
//! (`runtime/src/engine/task/mod.rs`, `docs/design.md`). It passes if it exists, or if it is the stem
//! of files in its folder (`docs/bench/<run>/throughput` for `throughput-memory.json`). Folders
//! that runs create and git ignores (the fuzzers' corpus, artifacts and target) are not checked.

use std::fs;
use std::path::{Path, PathBuf};

const TOP: &[&str] = &[
    "record/",
    "log/",
    "state-dir/",
    "task-manager/",
    "runtime/",
    "kafka/",
    "cli/",
    "benches/",
    "examples/",
    "fuzz/",
    "docs/",
    ".ci/",
];

/// Made by runs, ignored by git.
const GENERATED: &[&str] = &[
    "fuzz/corpus",
    "fuzz/artifacts",
    "fuzz/target",
    "fuzz/coverage",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runtime/ is in the workspace")
        .to_path_buf()
}

fn files(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        let rel = path.strip_prefix(root).expect("under the workspace");
        let name = rel.to_string_lossy();
        if name.starts_with('.') && name != ".ci"
            || name == "target"
            || name.ends_with("/target")
            || GENERATED.iter().any(|g| name.starts_with(g))
        {
            continue;
        }
        if path.is_dir() {
            files(&path, root, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("rs" | "md" | "sh" | "toml")
        ) || name == ".ci/run"
        {
            out.push(path);
        }
    }
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// The repository paths cited in `text`, with their line numbers.
fn cited(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut from = 0;
        while from < line.len() {
            let rest = &line[from..];
            let Some((at, _)) = TOP
                .iter()
                .filter_map(|t| rest.find(t).map(|i| (i, t)))
                .min_by_key(|&(i, _)| i)
            else {
                break;
            };
            let start = from + at;
            let before = line[..start].chars().next_back();
            let word: String = line[start..]
                .chars()
                .take_while(|&c| is_path_char(c))
                .collect();
            from = start + word.len().max(1);
            if before.is_some_and(|c| is_path_char(c) || c == '<' || c == '$') {
                continue;
            }
            let next = line[start + word.len()..].chars().next();
            let word = word.trim_end_matches(['.', '/']).to_owned();
            // Patterns (`<n>`, `*`, `{a,b}`) name no one file.
            if matches!(next, Some('<' | '*' | '{')) || !word.contains('/') {
                continue;
            }
            out.push((n + 1, word));
        }
    }
    out
}

fn exists(root: &Path, cited: &str) -> bool {
    if GENERATED.iter().any(|g| cited.starts_with(g)) {
        return true;
    }
    let path = root.join(cited);
    if path.exists() {
        return true;
    }
    // A stem: files in its folder are named after it.
    let (Some(dir), Some(stem)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let stem = stem.to_string_lossy();
    fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with(&*stem))
    })
}

#[test]
fn every_cited_path_exists() {
    let root = workspace();
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    assert!(
        all.len() > 100,
        "found only {} files under {}",
        all.len(),
        root.display()
    );
    let mut missing = Vec::new();
    for file in &all {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for (line, path) in cited(&text) {
            if !exists(&root, &path) {
                let shown = file.strip_prefix(&root).expect("under the workspace");
                missing.push(format!("{}:{line}: {path}", shown.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} cited paths do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_citation_reader_finds_paths_not_patterns() {
    let text = "see runtime/src/engine/task/mod.rs, and docs/bench/<run>/x.json or log/src/*.rs.\n\
                a/runtime/src/not-this.rs";
    let found: Vec<String> = cited(text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(found, ["runtime/src/engine/task/mod.rs"]);
}
