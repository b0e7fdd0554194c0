//! Issue 35 point 3 from the command line: a topic's metadata files cannot be lost or edited
//! into destroying or hiding records. `rm topics/input/partitions`, then one `riffle produce`
//! line: produce fails naming the file (it used to replace the topic, rc 0), and not a byte of
//! the topic changes. Editing `partitions` 2 → 1, or deleting a topic's `config`: `riffle
//! consume` fails naming the file and what the directory holds (it used to print part of the
//! records, or apply the defaults, rc 0). `riffle log repair --dry-run` reports each (it used
//! to say "the log is intact") and changes nothing; `riffle log repair` writes the file back
//! and says so, and consume then prints every record produced. What cannot be told (a
//! partition missing too) is reported, left, and the exit status is non-zero.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::riffle_with_stdin;

const TOPIC: &str = "input";

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn riffle(args: &[&str]) -> Output {
    riffle_with_stdin(args, b"")
}

/// `n` lines `k<i>\tv<i>`.
fn lines(n: usize) -> String {
    (0..n).map(|i| format!("k{i}\tv{i}\n")).collect()
}

/// Produces `n` records into `input` (created with `partitions` partitions).
fn produce(dir: &str, partitions: u32, n: usize) {
    let p = partitions.to_string();
    let args = [
        "produce",
        "--log-dir",
        dir,
        "--topic",
        TOPIC,
        "--partitions",
        &p,
    ];
    let out = riffle_with_stdin(&args, lines(n).as_bytes());
    assert!(out.status.success(), "{}", text(&out).1);
}

fn consume(dir: &str) -> Output {
    riffle(&[
        "consume",
        "--log-dir",
        dir,
        "--topic",
        TOPIC,
        "--from-beginning",
    ])
}

/// consume prints exactly the `n` records produced (in any order across partitions).
fn consumes_all(dir: &str, n: usize) {
    let out = consume(dir);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let mut got: Vec<&str> = stdout.lines().collect();
    got.sort_unstable();
    let expected = lines(n);
    let mut expected: Vec<&str> = expected.lines().collect();
    expected.sort_unstable();
    assert_eq!(got.len(), n);
    assert_eq!(got, expected);
}

/// consume fails, printing no record, naming `file` and each of `words`.
fn consume_fails(dir: &str, file: &Path, words: &[&str]) {
    let out = consume(dir);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "consume exited 0:\n{stderr}");
    assert!(stdout.is_empty(), "consume printed records: {stdout}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    for word in words {
        assert!(stderr.contains(word), "{stderr:?} lacks {word:?}");
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

/// "partitions 0 to 1 (K segments, B bytes)" as the log counts them.
fn holds(topic_dir: &Path, names: &str) -> String {
    let segments: Vec<(PathBuf, Vec<u8>)> = snapshot(topic_dir)
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|x| x == "log"))
        .collect();
    let bytes: usize = segments.iter().map(|(_, b)| b.len()).sum();
    let s = if segments.len() == 1 { "" } else { "s" };
    format!("{names} ({} segment{s}, {bytes} bytes)", segments.len())
}

/// A dry run prints exactly `report` and "nothing was changed", changing nothing (consume
/// still fails); the repair prints `report` with the verbs of what it did, and then consume
/// prints all `n` records.
fn repaired(dir: &str, report: &[String], n: usize) {
    let before = snapshot(Path::new(dir));
    let dry = riffle(&["log", "repair", "--log-dir", dir, "--dry-run"]);
    let (out, err) = text(&dry);
    assert!(dry.status.success(), "{err}");
    let mut expected: Vec<String> = report
        .iter()
        .map(|l| {
            l.replacen("wrote back ", "would write back ", 1).replacen(
                "rewrote ",
                "would rewrite ",
                1,
            )
        })
        .collect();
    expected.push("nothing to cut; nothing was changed".to_owned());
    assert_eq!(out.lines().collect::<Vec<_>>(), expected);
    assert_eq!(
        snapshot(Path::new(dir)),
        before,
        "the dry run changed files"
    );
    assert!(!consume(dir).status.success(), "the dry run repaired");
    let done = riffle(&["log", "repair", "--log-dir", dir]);
    let (out, err) = text(&done);
    assert!(done.status.success(), "{err}");
    let mut expected = report.to_vec();
    expected.push("nothing to cut".to_owned());
    assert_eq!(out.lines().collect::<Vec<_>>(), expected);
    consumes_all(dir, n);
    let again = riffle(&["log", "repair", "--log-dir", dir, "--dry-run"]);
    assert_eq!(text(&again).0, "nothing to cut: the log is intact\n");
}

#[test]
fn a_deleted_partitions_file_fails_the_next_produce_and_destroys_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().to_str().expect("utf-8");
    produce(d, 3, 3000);
    let topic = tmp.path().join("topics").join(TOPIC);
    let meta = topic.join("partitions");
    std::fs::remove_file(&meta).expect("rm partitions");
    let before = snapshot(&topic);
    let holds = holds(&topic, "partitions 0 to 2");
    let out = riffle_with_stdin(
        &["produce", "--log-dir", d, "--topic", TOPIC],
        b"one\tmore\n",
    );
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "produce exited 0:\n{stderr}");
    assert!(
        stderr.contains(&meta.display().to_string())
            && stderr.contains(&format!(
                "the topic's partition count is missing, but the directory holds {holds}"
            )),
        "{stderr}"
    );
    assert_eq!(snapshot(&topic), before, "produce changed the topic");
    consume_fails(d, &meta, &["neither guessed nor replaced"]);
    repaired(
        d,
        &[format!(
            "wrote back {}: 3 partitions, from the directories ({holds}); recorded config: the \
             defaults (there is no `config` file)",
            meta.display()
        )],
        3000,
    );
}

#[test]
fn a_count_edited_from_2_to_1_fails_consume_naming_both_until_repaired() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().to_str().expect("utf-8");
    produce(d, 2, 2000);
    let topic = tmp.path().join("topics").join(TOPIC);
    let meta = topic.join("partitions");
    std::fs::write(&meta, "1\n").expect("edit");
    let holds = holds(&topic, "partitions 0 to 1");
    consume_fails(
        d,
        &meta,
        &[
            &format!("it says 1 partition, but the directory holds {holds}"),
            &format!("{} is past the count", topic.join("1").display()),
        ],
    );
    repaired(
        d,
        &[format!(
            "rewrote {}: 2 partitions, from the directories ({holds}); it said 1",
            meta.display()
        )],
        2000,
    );
}

#[test]
fn a_deleted_config_fails_consume_until_repair_writes_it_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().to_str().expect("utf-8");
    let created = riffle(&[
        "topics",
        "--log-dir",
        d,
        "--create",
        "--topic",
        TOPIC,
        "--partitions",
        "2",
        "--config",
        "retention.ms=604800000",
    ]);
    assert!(created.status.success(), "{}", text(&created).1);
    produce(d, 2, 500);
    let topic = tmp.path().join("topics").join(TOPIC);
    let config = topic.join("config");
    std::fs::remove_file(&config).expect("rm config");
    consume_fails(
        d,
        &config,
        &["the file is missing", "created with retention.ms=604800000"],
    );
    repaired(
        d,
        &[format!(
            "wrote back {}: retention.ms=604800000, as {} records the topic was created with; \
             it was missing",
            config.display(),
            topic.join("partitions").display()
        )],
        500,
    );
    assert_eq!(
        std::fs::read_to_string(&config).expect("config"),
        "retention.ms=604800000\n"
    );
}

#[test]
fn what_cannot_be_told_is_reported_left_and_fails_the_repair() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().to_str().expect("utf-8");
    produce(d, 3, 300);
    let topic = tmp.path().join("topics").join(TOPIC);
    let meta = topic.join("partitions");
    std::fs::remove_file(&meta).expect("rm partitions");
    std::fs::remove_dir_all(topic.join("2")).expect("rm partition 2");
    std::fs::remove_dir_all(topic.join("1")).expect("rm partition 1");
    std::fs::create_dir(topic.join("1")).expect("an empty partition 1");
    let before = snapshot(tmp.path());
    for dry_run in [true, false] {
        let mut args = vec!["log", "repair", "--log-dir", d];
        if dry_run {
            args.push("--dry-run");
        }
        let out = riffle(&args);
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{stdout}");
        assert_eq!(
            stdout.lines().next(),
            Some(
                format!(
                    "cannot restore {}: it was missing, and {} holds no segment (the directory \
                     holds {}), so the directories do not show the count unambiguously: write \
                     the partition count into it by hand",
                    meta.display(),
                    topic.join("1").display(),
                    holds(&topic, "partitions 0 to 1")
                )
                .as_str()
            ),
            "{stdout}"
        );
        assert!(
            stderr.contains("1 metadata file(s) cannot be rebuilt"),
            "{stderr}"
        );
        assert_eq!(snapshot(tmp.path()), before, "dry_run = {dry_run}");
    }
}
