//! The windowed round trip, through the `riffle` binary: `produce --timestamps` a small
//! hand-written input (out of order, one record beyond grace), count it with `sample
//! windowed-count --log-dir D --input T --output T2`, read the windows back with `consume
//! --key-serde windowed-string --window-size` (tumbling windows, final results: each closed
//! window once) or `--key-serde session-windowed-string --latest-per-key` (sessions, updates:
//! merged-away sessions end as tombstones) — exactly the `key@start/end<TAB>count` lines worked
//! out by hand from Kafka's rules. `--check` agrees.

mod common;

use std::path::Path;
use std::process::Output;

fn riffle(args: &[&str]) -> Output {
    let out = common::riffle_with_stdin(args, b"");
    common::assert_clean_exit(&format!("riffle {args:?}"), &out);
    out
}

/// One partition (stream time is per partition: the hand computation follows the input order).
const INPUT: &str = "\
1000\talice\tclick
4000\tbob\tclick
9000\talice\tclick
12000\talice\tclick
3000\tbob\tclick
16000\tbob\tclick
2000\talice\tclick
25000\talice\tclick
31000\tcarol\tclick
";

fn produce(dir: &Path) -> String {
    let log = dir.join("log");
    let input = dir.join("input.tsv");
    std::fs::write(&input, INPUT).expect("write the input");
    riffle(&[
        "produce",
        "--log-dir",
        log.to_str().expect("utf-8"),
        "--topic",
        "clicks",
        "--partitions",
        "1",
        "--timestamps",
        input.to_str().expect("utf-8"),
    ]);
    log.to_str().expect("utf-8").to_owned()
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn tumbling_final_counts_come_back_as_key_at_start_end_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = produce(dir.path());
    let sample = riffle(&[
        "sample",
        "windowed-count",
        "--log-dir",
        &log,
        "--input",
        "clicks",
        "--output",
        "clicks-per-10s",
        "--window",
        "10s",
        "--grace",
        "5s",
        "--emit",
        "final",
        "--application-id",
        "clicks-app",
        "--check",
    ]);
    let text = String::from_utf8_lossy(&sample.stdout);
    assert!(
        text.contains(
            "windows equal an independent replay of Kafka's window rules over the input: yes"
        ),
        "{text}"
    );
    assert!(text.contains("processed 9 records"), "{text}");
    // 2000 arrives at stream time 16000, past [0, 10000)'s end plus grace: dropped.
    assert!(text.contains("1 dropped as late"), "{text}");
    // Stream time 16000 closes [0, 10000) (end + grace = 15000), 25000 closes [10000, 20000);
    // [20000, 30000) (closes at 35000) and [30000, 40000) stay open. 3000 (bob, at stream time
    // 12000) is within grace.
    let out = riffle(&[
        "consume",
        "--log-dir",
        &log,
        "--topic",
        "clicks-per-10s",
        "--from-beginning",
        "--key-serde",
        "windowed-string",
        "--window-size",
        "10s",
        "--value-serde",
        "long",
    ]);
    let mut got = lines(&out);
    got.sort();
    assert_eq!(
        got,
        [
            "alice@0/10000\t2",
            "alice@10000/20000\t1",
            "bob@0/10000\t2",
            "bob@10000/20000\t1",
        ]
    );
}

#[test]
fn session_updates_come_back_without_tombstones_for_sessions_never_emitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = produce(dir.path());
    let sample = riffle(&[
        "sample",
        "windowed-count",
        "--log-dir",
        &log,
        "--input",
        "clicks",
        "--output",
        "sessions",
        "--session-gap",
        "5s",
        "--grace",
        "5s",
        "--emit",
        "updates",
        "--application-id",
        "sessions-app",
        "--check",
    ]);
    let text = String::from_utf8_lossy(&sample.stdout);
    assert!(
        text.contains(
            "windows equal an independent replay of Kafka's window rules over the input: yes"
        ),
        "{text}"
    );
    // alice: [1000] and [9000] start sessions, 12000 extends [9000] to [9000, 12000]; 2000
    // (at stream time 16000, whose sessions must end by 6000) would join [1000] but is dropped;
    // 25000 starts another. bob: 3000 (within grace) joins [4000] into [3000, 4000]; 16000 is
    // a new session. The merged-away [9000] and [4000] were created and merged before the first
    // commit, so they were never emitted and get no tombstone (Kafka's caching session store).
    let out = riffle(&[
        "consume",
        "--log-dir",
        &log,
        "--topic",
        "sessions",
        "--from-beginning",
        "--latest-per-key",
        "--key-serde",
        "session-windowed-string",
        "--value-serde",
        "long",
    ]);
    assert_eq!(
        lines(&out),
        [
            "alice@1000/1000\t1",
            "alice@9000/12000\t2",
            "alice@25000/25000\t1",
            "bob@3000/4000\t2",
            "bob@16000/16000\t1",
            "carol@31000/31000\t1",
        ]
    );
}
