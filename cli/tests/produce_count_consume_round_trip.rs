//! The newcomer's round trip, through the `riffle` binary: `produce` a file, count it with
//! `sample group-by-key-count`, read the counts back with `consume --latest-per-key
//! --value-serde long`: exactly the counts of the file. Then `state inspect` shows the
//! checkpoints the run left and what a heartbeat would report. `--input` and `--output`
//! naming one topic is refused before anything is read or written.

use std::collections::BTreeMap;
use std::process::Command;

fn riffle(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .expect("run riffle");
    assert!(
        out.status.success(),
        "riffle {args:?} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn produce_then_count_then_consume_gives_the_counts_of_the_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.tsv");
    let mut text = String::new();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..5_000u64 {
        let key = format!("user-{}", (i * 7_919) % 113);
        text.push_str(&format!("{key}\tclick-{i}\n"));
        *expected.entry(key).or_default() += 1;
    }
    std::fs::write(&input, text).expect("write input");
    let log = dir.path().join("log");
    let state = dir.path().join("state");
    let (log_s, state_s, input_s) = (
        log.to_str().expect("utf8"),
        state.to_str().expect("utf8"),
        input.to_str().expect("utf8"),
    );

    riffle(&[
        "produce",
        "--log-dir",
        log_s,
        "--topic",
        "clicks",
        "--partitions",
        "3",
        input_s,
    ]);
    riffle(&[
        "sample",
        "group-by-key-count",
        "--log-dir",
        log_s,
        "--input",
        "clicks",
        "--output",
        "counts",
        "--threads",
        "2",
        "--state-dir",
        state_s,
        "--application-id",
        "clicks-app",
    ]);
    let out = riffle(&[
        "consume",
        "--log-dir",
        log_s,
        "--topic",
        "counts",
        "--from-beginning",
        "--latest-per-key",
        "--value-serde",
        "long",
    ]);
    let got: BTreeMap<String, i64> = String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').expect("key<TAB>value");
            (k.to_owned(), v.parse().expect("a long"))
        })
        .collect();
    assert_eq!(got, expected);

    // The persistent store left a checkpoint per task; a heartbeat would report their sums.
    let out = riffle(&[
        "state",
        "inspect",
        "--state-dir",
        state_s,
        "--application-id",
        "clicks-app",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let offsets = report["heartbeat_task_offsets"]
        .as_object()
        .expect("offsets");
    assert_eq!(offsets.len(), 3, "{report}");
    let sum: i64 = offsets.values().map(|v| v.as_i64().expect("i64")).sum();
    // One changelog record per key per commit at least; at most one per input record.
    assert!(sum >= expected.len() as i64 && sum <= 5_000, "{report}");
    assert_eq!(report["lock_holder_pid"], serde_json::Value::Null);
}

#[test]
fn a_malformed_line_is_an_error_naming_its_line_and_nothing_after_it_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("bad.tsv");
    std::fs::write(&input, "a\t1\nb\t2\nno tab here\nc\t3\n").expect("write");
    let log = dir.path().join("log");
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "produce",
            "--log-dir",
            log.to_str().expect("utf8"),
            "--topic",
            "t",
            input.to_str().expect("utf8"),
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 3"), "{stderr}");
    let out = riffle(&[
        "consume",
        "--log-dir",
        log.to_str().expect("utf8"),
        "--topic",
        "t",
        "--from-beginning",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\t1\nb\t2\n");
}

#[test]
fn the_sample_refuses_to_count_a_topic_into_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let log = log.to_str().expect("utf-8");
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["produce", "--log-dir", log, "--topic", "in"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run riffle");
    assert!(out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "sample",
            "group-by-key-count",
            "--log-dir",
            log,
            "--input",
            "in",
            "--output",
            "in",
        ])
        .output()
        .expect("run riffle");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--input and --output are both \"in\""),
        "{err}"
    );
}
