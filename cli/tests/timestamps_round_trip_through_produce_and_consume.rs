//! Record timestamps through the `riffle` binary: `produce --timestamps` reads
//! `timestamp_ms<TAB>key<TAB>value` lines (with `--headers`,
//! `timestamp_ms<TAB>headers<TAB>key<TAB>value`: the timestamp first, where Kafka's console
//! consumer prints it) and each record carries that timestamp; `consume --print-timestamps`
//! prints the same lines back, so what it prints produces the same records again. A timestamp
//! that is not a non-negative integer stops `produce` with an error naming its line, after
//! writing the records before it and nothing of it. Without the flags both commands are as
//! before (produce stamps the wall clock).

mod common;

use std::path::Path;
use std::process::Output;

use riffle_log::{Log, LogOptions, TopicPartition};

use common::riffle_ok as ok;

fn riffle(args: &[&str], stdin: &[u8]) -> Output {
    common::riffle_with_stdin(args, stdin)
}

fn produce(log: &str, topic: &str, extra: &[&str], input: &str) -> Output {
    let mut args = vec!["produce", "--log-dir", log, "--topic", topic];
    args.extend_from_slice(extra);
    riffle(&args, input.as_bytes())
}

fn consume(log: &str, topic: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "consume",
        "--log-dir",
        log,
        "--topic",
        topic,
        "--from-beginning",
    ];
    args.extend_from_slice(extra);
    ok(&args, b"")
}

/// Every record of `topic`'s partition 0 as (timestamp, key), read with riffle-log.
fn stored(log_dir: &Path, topic: &str) -> Vec<(i64, String)> {
    let log = Log::open_read_only(log_dir, LogOptions::default()).expect("open the log");
    let tp = TopicPartition::new(topic, 0);
    let end = log.end_offset(&tp).expect("end offset");
    let mut records = Vec::new();
    let mut position = 0;
    while position < end {
        for batch in log.fetch(&tp, position, 1 << 20).expect("fetch") {
            for record in batch.records() {
                let record = record.expect("a record");
                let key = String::from_utf8(record.key().expect("a key").to_vec()).expect("utf-8");
                records.push((record.timestamp(), key));
            }
            position = batch.last_offset() + 1;
        }
    }
    records
}

#[test]
fn produce_timestamps_then_consume_print_timestamps_gives_the_same_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let d = log.to_str().expect("utf-8");
    // Out of order, equal, zero, the largest, and a value with a tab.
    let lines = [
        "1700000000000\talice\tclick",
        "1699999999000\tbob\tview",
        "1699999999000\talice\tagain",
        "0\tcarol\tepoch",
        "9223372036854775807\tdave\tlast ms",
        "1700000060000\tbob\tvalue\twith a tab",
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = produce(d, "t", &["--timestamps"], &input);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("wrote 6 records to t"), "{err}");

    let printed = consume(d, "t", &["--print-timestamps"]);
    assert_eq!(printed.lines().collect::<Vec<_>>(), lines);
    // The log holds those timestamps.
    let want: Vec<(i64, String)> = lines
        .iter()
        .map(|l| {
            let mut fields = l.split('\t');
            let ts = fields.next().and_then(|t| t.parse().ok()).expect("ts");
            (ts, fields.next().expect("key").to_owned())
        })
        .collect();
    assert_eq!(stored(&log, "t"), want);
    // Without the flag: `key<TAB>value`, as before.
    let plain: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once('\t').expect("a tab").1)
        .collect();
    assert_eq!(consume(d, "t", &[]).lines().collect::<Vec<_>>(), plain);
    // The latest record of each key, with its timestamp.
    assert_eq!(
        consume(d, "t", &["--print-timestamps", "--latest-per-key"]),
        "1699999999000\talice\tagain\n1700000060000\tbob\tvalue\twith a tab\n\
         0\tcarol\tepoch\n9223372036854775807\tdave\tlast ms\n"
    );

    // What consume printed, produced again, prints the same.
    let again = produce(d, "copy", &["--timestamps"], &printed);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(consume(d, "copy", &["--print-timestamps"]), printed);
}

#[test]
fn timestamps_come_before_headers_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let d = log.to_str().expect("utf-8");
    let lines = [
        "1000\ttrace:abc,span:1\tuser-1\tclick",
        "2000\tNO_HEADERS\tuser-2\tview",
        "500\ta:\tuser-1\t",
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = produce(d, "t", &["--timestamps", "--headers"], &input);
    assert!(out.status.success(), "{out:?}");
    let printed = consume(d, "t", &["--print-headers", "--print-timestamps"]);
    assert_eq!(printed.lines().collect::<Vec<_>>(), lines);
    assert_eq!(
        consume(d, "t", &["--print-headers"]),
        "trace:abc,span:1\tuser-1\tclick\nNO_HEADERS\tuser-2\tview\na:\tuser-1\t\n"
    );
    assert_eq!(
        consume(d, "t", &["--print-timestamps"]),
        "1000\tuser-1\tclick\n2000\tuser-2\tview\n500\tuser-1\t\n"
    );
    assert_eq!(
        consume(
            d,
            "t",
            &["--print-timestamps", "--print-headers", "--latest-per-key"]
        ),
        "500\ta:\tuser-1\t\n2000\tNO_HEADERS\tuser-2\tview\n"
    );
    let again = produce(d, "copy", &["--headers", "--timestamps"], &printed);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        consume(d, "copy", &["--print-timestamps", "--print-headers"]),
        printed
    );
}

#[test]
fn a_bad_timestamp_is_an_error_naming_its_line_and_nothing_of_that_line_is_written() {
    for (bad, says) in [
        ("abc\tk3\tv3", "line 3: timestamp \"abc\" is not an integer"),
        ("-5\tk3\tv3", "line 3: timestamp -5 is negative"),
        ("1.5\tk3\tv3", "line 3: timestamp \"1.5\" is not an integer"),
        ("\tk3\tv3", "line 3: timestamp \"\" is not an integer"),
        (
            "99999999999999999999\tk3\tv3",
            "line 3: timestamp 99999999999999999999 is out of range",
        ),
        // A line without its timestamp (plain `key<TAB>value`).
        (
            "k3\tv3",
            "line 3: expected `timestamp_ms<TAB>key<TAB>value`, found one tab",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("log");
        let d = log.to_str().expect("utf-8");
        let input = format!("10\tk1\tv1\n20\tk2\tv2\n{bad}\n30\tk4\tv4\n");
        let out = produce(d, "t", &["--timestamps"], &input);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?}: {err}");
        assert!(err.contains(says), "{bad:?}: {err}");
        assert!(
            err.contains("the 2 records before it were written to t"),
            "{bad:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
        assert_eq!(
            consume(d, "t", &["--print-timestamps"]),
            "10\tk1\tv1\n20\tk2\tv2\n",
            "{bad:?}"
        );
    }

    // With --headers too: the timestamp is checked where it is, first.
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    let out = produce(
        d,
        "t",
        &["--timestamps", "--headers"],
        "1\tNO_HEADERS\tk\tv\nh:1\t2\tk\tv\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("line 2: timestamp \"h:1\" is not an integer"),
        "{err}"
    );
    assert!(
        err.contains("the 1 records before it were written"),
        "{err}"
    );
}

#[test]
fn without_timestamps_produce_stamps_the_wall_clock_and_a_number_first_is_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let d = log.to_str().expect("utf-8");
    let before = common::now_ms();
    let out = produce(d, "t", &[], "5\tk\tv\n");
    let after = common::now_ms();
    assert!(out.status.success(), "{out:?}");
    let records = stored(&log, "t");
    assert_eq!(records.len(), 1);
    let (ts, key) = &records[0];
    assert_eq!(key, "5");
    assert!((before..=after).contains(ts), "{before} <= {ts} <= {after}");
    assert_eq!(
        consume(d, "t", &["--print-timestamps"]),
        format!("{ts}\t5\tk\tv\n")
    );
}
