//! `riffle sample windowed-count` over its generated input (timestamps rising with the record
//! index, 5 % out of order, some beyond grace) checks its output topic against an independent
//! replay of Kafka's window rules, per partition: tumbling, hopping, sliding and session
//! windows, emitting final results and updates, with the in-memory and the persistent store —
//! every combination passes, with frequent commits. The check has teeth: a window in the output
//! that the input does not make fails it, with a non-zero exit. Flags that make no window kind
//! are refused.

mod common;

use std::process::Output;
use std::time::Instant;

use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

fn riffle(args: &[&str]) -> Output {
    common::riffle_with_stdin(args, b"")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the sample over generated input with `kind` flags, every emit strategy and store;
/// each run must pass its check.
fn passes_its_check(kind: &[&str]) {
    for emit in ["final", "updates"] {
        for store in ["memory", "persistent"] {
            let start = Instant::now();
            let mut args = vec![
                "sample",
                "windowed-count",
                "--records",
                "20000",
                "--keys",
                "200",
                "--partitions",
                "3",
                "--threads",
                "2",
                "--commit-interval-ms",
                "20",
                "--emit",
                emit,
                "--store",
                store,
            ];
            args.extend_from_slice(kind);
            let out = riffle(&args);
            let text = stdout(&out);
            let what = format!("{kind:?} --emit {emit} --store {store}");
            common::assert_clean_exit(&what, &out);
            let check = text
                .lines()
                .find(|l| l.starts_with("windows equal an independent replay"))
                .unwrap_or_else(|| panic!("{what}: no check line:\n{text}"));
            assert!(check.contains(": yes ("), "{what}: {check}\n{text}");
            if emit == "final" {
                assert!(check.contains("closed and emitted once"), "{check}");
            }
            // The top windows print as key@start/end<TAB>count.
            let top = text
                .lines()
                .find(|l| l.starts_with("  key-"))
                .unwrap_or_else(|| panic!("{what}: no top window:\n{text}"));
            let (window, count) = top.trim().split_once('\t').expect("window<TAB>count");
            assert!(window.contains('@') && window.contains('/'), "{top}");
            assert!(count.parse::<i64>().expect("a count") > 0, "{top}");
            println!("{what}: {check} ({:.1} s)", start.elapsed().as_secs_f64());
        }
    }
}

#[test]
fn tumbling_windows_pass_their_own_check() {
    passes_its_check(&["--window", "10s", "--grace", "2s"]);
}

#[test]
fn hopping_windows_pass_their_own_check() {
    passes_its_check(&["--window", "10s", "--advance", "5s", "--grace", "2s"]);
}

#[test]
fn sliding_windows_pass_their_own_check() {
    passes_its_check(&["--sliding", "5s", "--grace", "2s"]);
}

#[test]
fn session_windows_pass_their_own_check() {
    passes_its_check(&["--session-gap", "5s", "--grace", "2s"]);
}

#[test]
fn tumbling_windows_without_grace_pass_their_own_check() {
    passes_its_check(&["--window", "10s", "--grace", "0"]);
}

/// A window key as Kafka's `TimeWindowedSerializer` writes it: the key, then the start.
fn windowed(key: &str, start: i64) -> Vec<u8> {
    [key.as_bytes(), &start.to_be_bytes()].concat()
}

#[test]
fn a_window_the_input_does_not_make_fails_the_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    let input = dir.path().join("input.tsv");
    std::fs::write(&input, "1000\ta\tx\n2000\ta\tx\n15000\ta\tx\n").expect("write input");
    let log = log_dir.to_str().expect("utf-8");
    let input = input.to_str().expect("utf-8");
    let out = riffle(&[
        "produce",
        "--log-dir",
        log,
        "--topic",
        "in",
        "--timestamps",
        input,
    ]);
    common::assert_clean_exit("produce", &out);
    // An output record for a window no input record is in.
    {
        let log = Log::open(&log_dir, LogOptions::default()).expect("open the log");
        log.create_topic("out", 1).expect("create the output");
        let mut batch = BatchBuilder::new(Compression::None);
        batch.push(0, Some(&windowed("b", 0)), Some(&5i64.to_be_bytes()));
        log.append(&TopicPartition::new("out", 0), &mut batch)
            .expect("append");
        log.sync().expect("sync");
    }
    let run = |check: bool| {
        let mut args = vec![
            "sample",
            "windowed-count",
            "--log-dir",
            log,
            "--input",
            "in",
            "--output",
            "out",
            "--window",
            "10s",
            "--grace",
            "0",
            "--emit",
            "final",
        ];
        if check {
            args.push("--check");
        }
        riffle(&args)
    };
    let out = run(true);
    let text = stdout(&out);
    assert!(!out.status.success(), "the check passed:\n{text}");
    assert!(
        text.contains(
            "windows equal an independent replay of Kafka's window rules over the input: NO"
        ),
        "{text}"
    );
    assert!(
        text.contains("b@0/10000: not a window of the input, emitted [Some(5)]"),
        "{text}"
    );
    // a@0/10000 closed at stream time 15000 and was emitted once: not a difference.
    assert!(!text.contains("a@0/10000:"), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: the output differs from the model of the input in 1 place"),
        "{stderr}"
    );
    // Without --check an existing topic is only counted.
    let out = run(false);
    common::assert_clean_exit("windowed-count without --check", &out);
    assert!(!stdout(&out).contains("windows equal"), "{}", stdout(&out));
}

#[test]
fn flags_that_make_no_window_kind_are_refused() {
    for (args, says) in [
        (
            &["--session-gap", "5s", "--sliding", "5s"][..],
            "cannot be used with",
        ),
        (
            &["--window", "5s", "--sliding", "5s"][..],
            "cannot be used with",
        ),
        (
            &["--advance", "5s", "--session-gap", "5s"][..],
            "cannot be used with",
        ),
        (
            &["--window", "5s", "--advance", "10s"][..],
            "--advance (10000 ms) must be at most --window (5000 ms)",
        ),
        (&["--window", "0s"][..], "must be positive"),
        (
            &["--grace=-1s"][..],
            "expected a positive integer and a unit",
        ),
        (&["--check"][..], "--input"),
    ] {
        let mut all = vec!["sample", "windowed-count", "--records", "10"];
        all.extend_from_slice(args);
        let out = riffle(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
