//! Record headers through the `riffle` binary, in the layout of Kafka's console tools with
//! `parse.headers=true` / `print.headers=true`: `produce --headers` reads
//! `h1:v1,h2:v2<TAB>key<TAB>value` lines (`NO_HEADERS` for none), `consume --print-headers`
//! prints the same lines back — several headers, a repeated key, empty values, values with `:`,
//! header lines mixed with `NO_HEADERS` ones, with every codec — and the log holds exactly
//! those headers. Without the flags both commands are as before. A header without `:` stops
//! `produce` with an error naming its line, after writing the records before it.

mod common;

use std::path::Path;
use std::process::Output;

use riffle_log::{BatchBuilder, Compression, Header, Log, LogOptions, TopicPartition};

use common::riffle_ok as ok;

fn riffle(args: &[&str], stdin: &[u8]) -> Output {
    common::riffle_with_stdin(args, stdin)
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

/// Every record of `topic`'s partition 0 as (key, headers), read with riffle-log, and the number
/// of batches they are in; asserts the batches are stored with `codec`.
fn stored(log_dir: &Path, topic: &str, codec: Compression) -> (Vec<(String, Vec<Header>)>, usize) {
    let log = Log::open_read_only(log_dir, LogOptions::default()).expect("open the log");
    let tp = TopicPartition::new(topic, 0);
    let end = log.end_offset(&tp).expect("end offset");
    let mut records = Vec::new();
    let mut position = 0;
    let mut batch_count = 0;
    while position < end {
        let batches = log.fetch(&tp, position, 1 << 20).expect("fetch");
        assert!(!batches.is_empty(), "nothing at {position} of {end}");
        for batch in batches {
            assert_eq!(batch.meta().compression, codec);
            batch_count += 1;
            for record in batch.records() {
                let record = record.expect("a record");
                let key = String::from_utf8(record.key().expect("a key").to_vec()).expect("utf-8");
                assert_eq!(record.header_count() as usize, record.headers().count());
                records.push((key, record.headers().collect()));
            }
            position = batch.last_offset() + 1;
        }
    }
    (records, batch_count)
}

fn header(key: &str, value: &str) -> Header {
    Header::new(
        key.as_bytes().to_vec(),
        Some(value.as_bytes().to_vec().into()),
    )
}

#[test]
fn produce_headers_then_consume_print_headers_gives_the_same_lines_with_every_codec() {
    // Header lines and NO_HEADERS lines mixed; a repeated header key; empty header values; a
    // value holding `:`; an empty header key; a record value with a tab and one that is empty.
    let lines = [
        "trace:abc,span:1\tuser-1\tclick",
        "NO_HEADERS\tuser-2\tview",
        "a:1,a:2,a:3\tuser-1\trepeated",
        "empty:,also-empty:\tuser-3\t",
        "url:http://x:80/p,:no-key\tuser-2\tvalue\twith a tab",
        "NO_HEADERS\tuser-4\tplain",
        "only:one\tuser-1\tlast",
    ];
    let mut input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    // Enough records behind them for several batches (produce appends 256 KiB at a time).
    let mut expected: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    for i in 0..8_000 {
        let line = if i % 3 == 0 {
            format!("NO_HEADERS\tk{i}\tv{i}")
        } else {
            format!("n:{i},kind:bulk,n:{}\tk{i}\tv{i}", i * 2)
        };
        input.push_str(&line);
        input.push('\n');
        expected.push(line);
    }
    let expected_plain: Vec<String> = expected
        .iter()
        .map(|l| l.split_once('\t').expect("a tab").1.to_owned())
        .collect();
    for (codec, compression) in [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("log");
        let d = log.to_str().expect("utf-8");
        let produce = [
            "produce",
            "--log-dir",
            d,
            "--topic",
            "t",
            "--headers",
            "--compression",
            codec,
        ];
        let out = riffle(&produce, input.as_bytes());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{codec}: {err}");
        assert!(err.contains("wrote 8007 records to t"), "{codec}: {err}");

        let printed = consume(d, "t", &["--print-headers"]);
        assert_eq!(printed.lines().collect::<Vec<_>>(), expected, "{codec}");
        // Without the flag: `key<TAB>value`, as before.
        let plain = consume(d, "t", &[]);
        assert_eq!(plain.lines().collect::<Vec<_>>(), expected_plain, "{codec}");

        // The log holds those headers, in order, as riffle-log decodes them.
        let (records, batches) = stored(&log, "t", compression);
        assert_eq!(records.len(), 8_007);
        assert!(batches > 1, "{codec}: {batches} batch");
        let want: [(&str, Vec<Header>); 7] = [
            ("user-1", vec![header("trace", "abc"), header("span", "1")]),
            ("user-2", vec![]),
            (
                "user-1",
                vec![header("a", "1"), header("a", "2"), header("a", "3")],
            ),
            (
                "user-3",
                vec![header("empty", ""), header("also-empty", "")],
            ),
            (
                "user-2",
                vec![header("url", "http://x:80/p"), header("", "no-key")],
            ),
            ("user-4", vec![]),
            ("user-1", vec![header("only", "one")]),
        ];
        for (i, (key, headers)) in want.into_iter().enumerate() {
            assert_eq!(records[i], (key.to_owned(), headers), "{codec}: record {i}");
        }

        // What consume printed, produced again, prints the same.
        let again = riffle(
            &[
                "produce",
                "--log-dir",
                d,
                "--topic",
                "copy",
                "--headers",
                "--compression",
                codec,
            ],
            printed.as_bytes(),
        );
        assert!(again.status.success(), "{codec}: {:?}", again);
        assert_eq!(consume(d, "copy", &["--print-headers"]), printed, "{codec}");
    }
}

#[test]
fn a_header_without_a_colon_is_an_error_naming_its_line_and_the_records_before_it_are_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let d = log.to_str().expect("utf-8");
    let input = "a:1\tk1\tv1\nNO_HEADERS\tk2\tv2\nb:2,oops\tk3\tv3\nc:3\tk4\tv4\n";
    let out = riffle(
        &["produce", "--log-dir", d, "--topic", "t", "--headers"],
        input.as_bytes(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("line 3: header 2 (\"oops\") has no `:`"),
        "{err}"
    );
    assert!(
        err.contains("the 2 records before it were written to t"),
        "{err}"
    );
    assert_eq!(
        consume(d, "t", &["--print-headers"]),
        "a:1\tk1\tv1\nNO_HEADERS\tk2\tv2\n"
    );

    // A line without its headers field (plain `key<TAB>value`) is an error too, naming it.
    let out = riffle(
        &["produce", "--log-dir", d, "--topic", "t", "--headers"],
        b"x:1\tk5\tv5\nk6\tv6\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("line 2: expected `headers<TAB>key<TAB>value`, found one tab"),
        "{err}"
    );
    assert!(
        err.contains("the 1 records before it were written"),
        "{err}"
    );
}

#[test]
fn without_headers_a_headers_looking_field_is_the_key_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let d = log.to_str().expect("utf-8");
    ok(
        &["produce", "--log-dir", d, "--topic", "t"],
        b"a:1,b:2\tk\tv\nNO_HEADERS\tv2\n",
    );
    assert_eq!(consume(d, "t", &[]), "a:1,b:2\tk\tv\nNO_HEADERS\tv2\n");
    // The records have no headers.
    assert_eq!(
        consume(d, "t", &["--print-headers"]),
        "NO_HEADERS\ta:1,b:2\tk\tv\nNO_HEADERS\tNO_HEADERS\tv2\n"
    );
}

#[test]
fn a_null_header_value_prints_as_null_and_latest_per_key_prints_the_latest_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    {
        let log = Log::open(&log_dir, LogOptions::default()).expect("open the log");
        log.create_topic("t", 1).expect("create");
        let mut batch = BatchBuilder::new(Compression::Lz4);
        let first: [(&[u8], Option<&[u8]>); 2] = [(b"a", None), (b"b", Some(b"1"))];
        batch.push_with_headers(1, Some(b"k"), Some(b"v1"), first.into_iter());
        batch.push(2, Some(b"j"), None);
        let second: [(&[u8], Option<&[u8]>); 1] = [(b"c", Some(b""))];
        batch.push_with_headers(3, Some(b"k"), Some(b"v2"), second.into_iter());
        log.append(&TopicPartition::new("t", 0), &mut batch)
            .expect("append");
        log.sync().expect("sync");
    }
    let d = log_dir.to_str().expect("utf-8");
    assert_eq!(
        consume(d, "t", &["--print-headers"]),
        "a:null,b:1\tk\tv1\nNO_HEADERS\tj\tnull\nc:\tk\tv2\n"
    );
    assert_eq!(
        consume(d, "t", &["--print-headers", "--latest-per-key"]),
        "NO_HEADERS\tj\tnull\nc:\tk\tv2\n"
    );
    assert_eq!(consume(d, "t", &["--latest-per-key"]), "j\tnull\nk\tv2\n");
}

/// The embedded-log half of the headers round trip through an application: `produce --headers`
/// → `sample group-by-key-count` (a riffle application) → `consume --print-headers`. A count
/// is forwarded with the headers of the latest record that updated it (Kafka Streams' cached
/// KTable forwards the latest record context), so each key's latest count carries its latest
/// input record's headers.
#[test]
fn headers_go_through_the_sample_application_to_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let state = dir.path().join("state");
    let (log_s, state_s) = (log.to_str().expect("utf8"), state.to_str().expect("utf8"));
    let lines = "src:web,trace:t1\talice\tx\nNO_HEADERS\tbob\ty\nsrc:app\talice\tz\ntrace:t9,trace:t10\tcarol\tw\n";
    ok(
        &[
            "produce",
            "--log-dir",
            log_s,
            "--topic",
            "clicks",
            "--partitions",
            "2",
            "--headers",
        ],
        lines.as_bytes(),
    );
    ok(
        &[
            "sample",
            "group-by-key-count",
            "--log-dir",
            log_s,
            "--input",
            "clicks",
            "--output",
            "counts",
            "--state-dir",
            state_s,
            "--application-id",
            "headers-app",
        ],
        b"",
    );
    let out = consume(
        log_s,
        "counts",
        &[
            "--latest-per-key",
            "--value-serde",
            "long",
            "--print-headers",
        ],
    );
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    assert_eq!(
        got,
        [
            "NO_HEADERS\tbob\t1",
            "src:app\talice\t2",
            "trace:t9,trace:t10\tcarol\t1",
        ]
    );
}
