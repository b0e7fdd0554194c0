//! A poison record made from the command line: `produce --hex-values` writes a value that is not
//! UTF-8; `sample group-by-key-count` with Kafka's handler names under `--set`
//! (`default.deserialization.exception.handler=continue`,
//! `errors.dead.letter.queue.topic.name=dlq`) counts the good records exactly and puts the bad
//! one in the dead-letter queue, where `consume --print-headers` shows its origin; without the
//! handler the sample fails naming the record.

mod common;

use common::{riffle_ok as ok, riffle_with_stdin as riffle};

#[test]
fn a_hex_poison_value_goes_to_the_dead_letter_queue_and_the_counts_stay_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let state = dir.path().join("state");
    let (log_s, state_s) = (log.to_str().expect("utf8"), state.to_str().expect("utf8"));
    // "ok", then ff fe (not UTF-8), then "ok" again.
    ok(
        &[
            "produce",
            "--log-dir",
            log_s,
            "--topic",
            "clicks",
            "--partitions",
            "1",
            "--hex-values",
        ],
        b"alice\t6f6b\nbob\tff fe\nalice\t6F6B\n",
    );
    let bad = riffle(
        &[
            "produce",
            "--log-dir",
            log_s,
            "--topic",
            "clicks",
            "--hex-values",
        ],
        b"carol\tzz\n",
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("line 1: the hex value \"zz\" is not hexadecimal"),
        "{err}"
    );

    let sample = |app: &str, extra: &[&str]| {
        let mut args = vec![
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
            app,
        ];
        args.extend_from_slice(extra);
        riffle(&args, b"")
    };
    let failed = sample("strict", &[]);
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{err}");
    assert!(err.contains("clicks-0 offset 1"), "names the record: {err}");

    let out = sample(
        "tolerant",
        &[
            "--set",
            "default.deserialization.exception.handler=continue",
            "--set",
            "errors.dead.letter.queue.topic.name=dlq",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts = ok(
        &[
            "consume",
            "--log-dir",
            log_s,
            "--topic",
            "counts",
            "--from-beginning",
            "--latest-per-key",
            "--value-serde",
            "long",
        ],
        b"",
    );
    assert!(counts.contains("alice\t2"), "{counts}");
    assert!(!counts.contains("bob"), "{counts}");
    let dlq = ok(
        &[
            "consume",
            "--log-dir",
            log_s,
            "--topic",
            "dlq",
            "--from-beginning",
            "--print-headers",
        ],
        b"",
    );
    // One record (its stack-trace header spans lines: the error, then each cause).
    assert_eq!(dlq.matches("\tbob\t").count(), 1, "{dlq}");
    for want in [
        "__streams.errors.exception:riffle::Error::Deserialize",
        "__streams.errors.message:cannot decode the value of the record at clicks-0 offset 1",
        "__streams.errors.topic:clicks",
        "__streams.errors.partition:0",
        "__streams.errors.offset:1",
    ] {
        assert!(dlq.contains(want), "{want} in {dlq}");
    }
}
