//! The same sample command on both backends: `riffle sample group-by-key-count` with
//! `--bootstrap-servers` counts generated records on a real Kafka 4.4 broker (started by the
//! test kit) and checks them against a HashMap count, exactly as on the embedded log; and with
//! `--input`/`--output` it counts an existing Kafka topic, resuming from its committed offsets.
//! `riffle sample windowed-count --bootstrap-servers` passes its window check there too, and
//! Kafka's console consumer with Kafka Streams' `TimeWindowedDeserializer` reads back exactly its
//! windows.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use riffle_kafka_testkit::KafkaBroker;

fn riffle(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "riffle {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_sample_counts_exactly_on_kafka() {
    let broker = KafkaBroker::start().unwrap();
    let generated = riffle(&[
        "sample",
        "group-by-key-count",
        "--bootstrap-servers",
        broker.bootstrap(),
        "--records",
        "50000",
        "--keys",
        "500",
        "--store",
        "memory",
    ]);
    assert!(
        generated.contains("counts equal an independent HashMap count of the input: yes"),
        "{generated}"
    );
    let input = generated
        .split_whitespace()
        .find(|w| w.starts_with("riffle-sample-words-"))
        .unwrap()
        .to_owned();

    // Count the generated topic again under another application id: all of it, then nothing
    // (the second run resumes from the first one's committed offsets).
    let args = |app: &'static str| {
        vec![
            "sample".to_owned(),
            "group-by-key-count".to_owned(),
            "--bootstrap-servers".to_owned(),
            broker.bootstrap().to_owned(),
            "--input".to_owned(),
            input.clone(),
            "--output".to_owned(),
            "recounted".to_owned(),
            "--application-id".to_owned(),
            app.to_owned(),
        ]
    };
    let run = |app| {
        let a = args(app);
        riffle(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let first = run("recount");
    assert!(first.contains("processed 50000 records"), "{first}");
    assert!(first.contains("500 keys"), "{first}");
    let second = run("recount");
    assert!(second.contains("processed 0 records"), "{second}");
}

/// `riffle sample windowed-count --bootstrap-servers`: tumbling windows with final results over
/// generated timestamped input on a real broker pass the same check as on the embedded log;
/// Kafka's own console consumer, decoding the keys with Kafka Streams'
/// `TimeWindowedDeserializer`, prints exactly the windows and counts the sample wrote, each
/// window once.
#[test]
fn the_windowed_sample_counts_on_kafka_and_kafkas_deserializer_reads_its_windows() {
    let broker = KafkaBroker::start().unwrap();
    let generated = riffle(&[
        "sample",
        "windowed-count",
        "--bootstrap-servers",
        broker.bootstrap(),
        "--records",
        "20000",
        "--keys",
        "100",
        "--window",
        "10s",
        "--grace",
        "2s",
        "--emit",
        "final",
        "--store",
        "memory",
        "--top",
        "1000000",
    ]);
    assert!(
        generated.contains(
            "windows equal an independent replay of Kafka's window rules over the input: yes"
        ),
        "{generated}"
    );
    let output = generated
        .split_whitespace()
        .find(|w| w.starts_with("riffle-sample-windowed-counts-"))
        .unwrap()
        .to_owned();
    // Every window the sample printed: `  key@start/end<TAB>count`.
    let mut printed: Vec<String> = generated
        .lines()
        .filter(|l| l.starts_with("  key-"))
        .map(|l| l.trim().to_owned())
        .collect();
    let records: usize = generated
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(" windows in ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap();
    assert_eq!(
        printed.len(),
        records,
        "final results: one record per window"
    );
    assert!(records > 1_000, "{records} windows");

    let window_size = "10000";
    let lines = broker
        .console_consume(
            &output,
            records,
            &[
                ("print.key", "true"),
                (
                    "key.deserializer",
                    "org.apache.kafka.streams.kstream.TimeWindowedDeserializer",
                ),
                ("key.deserializer.window.size.ms", window_size),
                // Despite its name, this takes a Serde class (Kafka 4.4's TimeWindowedDeserializer
                // makes a Serde of it; a Deserializer class is a ClassCastException).
                (
                    "key.deserializer.windowed.inner.deserializer.class",
                    "org.apache.kafka.common.serialization.Serdes$StringSerde",
                ),
                (
                    "value.deserializer",
                    "org.apache.kafka.common.serialization.LongDeserializer",
                ),
            ],
        )
        .unwrap();
    // Kafka prints a Windowed key as `[key@start/end]`.
    let mut consumed: Vec<String> = lines
        .iter()
        .map(|line| {
            let (key, count) = line.split_once('\t').unwrap_or_else(|| panic!("{line:?}"));
            let key = key
                .strip_prefix('[')
                .and_then(|k| k.strip_suffix(']'))
                .unwrap_or_else(|| panic!("not a windowed key: {line:?}"));
            let (_, window) = key.rsplit_once('@').unwrap();
            let (start, end) = window.split_once('/').unwrap();
            let (start, end): (i64, i64) = (start.parse().unwrap(), end.parse().unwrap());
            assert_eq!(end - start, 10_000, "{line:?}");
            assert_eq!(start % 10_000, 0, "{line:?}");
            format!("{key}\t{count}")
        })
        .collect();
    printed.sort();
    consumed.sort();
    assert_eq!(consumed, printed);
}
