//! Windowed keys through `riffle consume --key-serde`: keys written as Kafka Streams'
//! `TimeWindowedSerializer` writes them (the key's bytes, then the window start as an 8-byte
//! big-endian long) print as `key@start/end` with `--key-serde windowed-string --window-size`,
//! end = start + size; keys written as its `SessionWindowedSerializer` writes them (the key,
//! then the session end, then its start) print as `key@start/end` with `--key-serde
//! session-windowed-string`. A key too short for its window prints as
//! `<not a windowed key: N bytes>` and consume goes on (no panic); `--latest-per-key` keeps
//! the latest value per windowed key, sorted by key, then window. `windowed-string` without
//! `--window-size` is an error saying so.

mod common;

use std::path::Path;
use std::process::Output;

use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

fn riffle(args: &[&str]) -> Output {
    common::riffle_with_stdin(args, b"")
}

fn consume(log: &Path, topic: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "consume",
        "--log-dir",
        log.to_str().expect("utf-8"),
        "--topic",
        topic,
        "--from-beginning",
    ];
    args.extend_from_slice(extra);
    riffle(&args)
}

fn consumed(log: &Path, topic: &str, extra: &[&str]) -> String {
    let out = consume(log, topic, extra);
    assert!(
        out.status.success(),
        "consume {extra:?} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A time-windowed key as `TimeWindowedSerializer` writes it.
fn windowed(key: &[u8], start: i64) -> Vec<u8> {
    [key, &start.to_be_bytes()].concat()
}

/// A session-windowed key as `SessionWindowedSerializer` writes it: end before start.
fn session(key: &[u8], start: i64, end: i64) -> Vec<u8> {
    [key, &end.to_be_bytes(), &start.to_be_bytes()].concat()
}

/// Appends (timestamp, key, count as an 8-byte long) records to a new one-partition `topic`.
fn write(log_dir: &Path, topic: &str, records: &[(i64, Vec<u8>, i64)]) {
    let log = Log::open(log_dir, LogOptions::default()).expect("open the log");
    log.create_topic(topic, 1).expect("create");
    let mut batch = BatchBuilder::new(Compression::Lz4);
    for (ts, key, count) in records {
        batch.push(*ts, Some(key), Some(&count.to_be_bytes()));
    }
    log.append(&TopicPartition::new(topic, 0), &mut batch)
        .expect("append");
    log.sync().expect("sync");
}

#[test]
fn time_windowed_keys_print_as_key_at_start_slash_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    write(
        &log,
        "counts",
        &[
            (120_500, windowed(b"alice", 120_000), 1),
            (130_000, windowed(b"bob", 120_000), 1),
            (150_000, windowed(b"alice", 120_000), 2),
            (185_000, windowed(b"alice", 180_000), 1),
            // A window before the epoch, and a key that extends another one.
            (-1, windowed(b"alice", -60_000), 7),
            (0, windowed(b"alicex", 0), 3),
            // Not UTF-8: replaced, as string keys are.
            (1, windowed(b"\xffz", 0), 4),
        ],
    );
    let args = [
        "--key-serde",
        "windowed-string",
        "--window-size",
        "60s",
        "--value-serde",
        "long",
    ];
    assert_eq!(
        consumed(&log, "counts", &args),
        "alice@120000/180000\t1\nbob@120000/180000\t1\nalice@120000/180000\t2\n\
         alice@180000/240000\t1\nalice@-60000/0\t7\nalicex@0/60000\t3\n\u{fffd}z@0/60000\t4\n"
    );
    // The size only sets the end; any unit.
    let half = consumed(
        &log,
        "counts",
        &["--key-serde", "windowed-string", "--window-size", "500ms"],
    );
    assert_eq!(
        half.lines().next(),
        Some("alice@120000/120500\t\0\0\0\0\0\0\0\x01")
    );
    let minute = consumed(
        &log,
        "counts",
        &["--key-serde", "windowed-string", "--window-size", "1m"],
    );
    assert!(minute.starts_with("alice@120000/180000\t"), "{minute}");

    // With --print-timestamps: the record's timestamp first, then the windowed key.
    let stamped = consumed(
        &log,
        "counts",
        &[&args[..], &["--print-timestamps"]].concat(),
    );
    assert_eq!(
        stamped.lines().take(2).collect::<Vec<_>>(),
        [
            "120500\talice@120000/180000\t1",
            "130000\tbob@120000/180000\t1"
        ]
    );

    // The latest count of each window, sorted by key, then window start (the window before
    // the epoch first, though its bytes sort after the others').
    assert_eq!(
        consumed(&log, "counts", &[&args[..], &["--latest-per-key"]].concat()),
        "alice@-60000/0\t7\nalice@120000/180000\t2\nalice@180000/240000\t1\n\
         alicex@0/60000\t3\nbob@120000/180000\t1\n\u{fffd}z@0/60000\t4\n"
    );
    // As plain strings the key's window bytes are printed as they are (the default).
    let plain = consumed(&log, "counts", &["--value-serde", "long"]);
    assert!(
        plain.starts_with("alice\0\0\0\0\0\x01\u{fffd}\u{fffd}\t1\n"),
        "{plain:?}"
    );
}

#[test]
fn session_windowed_keys_print_as_key_at_start_slash_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    write(
        &log,
        "sessions",
        &[
            (1_000, session(b"alice", 1_000, 1_000), 1),
            (4_500, session(b"alice", 1_000, 4_500), 2),
            (2_000, session(b"bob", 2_000, 2_000), 1),
            (9_000, session(b"alice", 9_000, 9_000), 1),
            (0, session(b"", 0, 0), 5),
        ],
    );
    let args = [
        "--key-serde",
        "session-windowed-string",
        "--value-serde",
        "long",
    ];
    assert_eq!(
        consumed(&log, "sessions", &args),
        "alice@1000/1000\t1\nalice@1000/4500\t2\nbob@2000/2000\t1\nalice@9000/9000\t1\n\
         @0/0\t5\n"
    );
    // Each session is its own key: sorted by key, start, end.
    assert_eq!(
        consumed(
            &log,
            "sessions",
            &[&args[..], &["--latest-per-key"]].concat()
        ),
        "@0/0\t5\nalice@1000/1000\t1\nalice@1000/4500\t2\nalice@9000/9000\t1\n\
         bob@2000/2000\t1\n"
    );
    // A session key has its end: --window-size is refused.
    let out = consume(
        &log,
        "sessions",
        &[&args[..], &["--window-size", "60s"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--window-size is only for --key-serde windowed-string"),
        "{err}"
    );
}

#[test]
fn a_key_too_short_for_its_window_is_printed_as_such_without_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    write(
        &log,
        "t",
        &[
            (1, b"abc".to_vec(), 1),
            (2, windowed(b"ok", 60_000), 2),
            (3, Vec::new(), 3),
            (4, vec![0; 8], 4),
            (5, vec![0xff; 15], 5),
            (6, session(b"s", 10, 20), 6),
        ],
    );
    let out = consume(
        &log,
        "t",
        &[
            "--key-serde",
            "windowed-string",
            "--window-size",
            "1m",
            "--value-serde",
            "long",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stdout.lines().take(4).collect::<Vec<_>>(),
        [
            "<not a windowed key: 3 bytes>\t1",
            "ok@60000/120000\t2",
            "<not a windowed key: 0 bytes>\t3",
            "@0/60000\t4",
        ]
    );
    assert_eq!(stdout.lines().count(), 6, "{stdout}");

    let out = consume(
        &log,
        "t",
        &[
            "--key-serde",
            "session-windowed-string",
            "--value-serde",
            "long",
            "--latest-per-key",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The decodable key first, then the short ones in byte order.
    assert_eq!(
        stdout,
        "s@10/20\t6\n<not a session-windowed key: 0 bytes>\t3\n\
         <not a session-windowed key: 8 bytes>\t4\n<not a session-windowed key: 3 bytes>\t1\n\
         <not a session-windowed key: 10 bytes>\t2\n<not a session-windowed key: 15 bytes>\t5\n"
    );
}

#[test]
fn windowed_string_without_a_window_size_is_an_error_saying_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    write(&log, "t", &[(1, windowed(b"k", 0), 1)]);
    let out = consume(&log, "t", &["--key-serde", "windowed-string"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--key-serde windowed-string needs --window-size"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // A size without a unit, or zero, is refused by name.
    for size in ["60", "0s", "-1s", "1.5s"] {
        let size_arg = format!("--window-size={size}");
        let out = consume(&log, "t", &["--key-serde", "windowed-string", &size_arg]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{size}: {err}");
        assert!(err.contains("--window-size"), "{size}: {err}");
        assert!(err.contains("like 500ms or 60s"), "{size}: {err}");
    }
}
