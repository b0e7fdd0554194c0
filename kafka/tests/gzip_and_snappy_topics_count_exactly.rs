//! gzip and snappy both ways on a real broker: Kafka's console producer writes the input with
//! `compression.type=gzip` (and `=snappy`), riffle's groupByKey count reads it and writes its
//! output and changelog with the same codec (`compression_type`), and Kafka's own console
//! consumer reads riffle's batches back. The counts are exact against a `HashMap` count of the
//! lines produced.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{
    config, console_consume_counts, count_topology, for_each_batch, latest_counts, wait_for,
};
use riffle::batch::Compression;
use riffle::{StreamsApp, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

/// The codec of every batch of `topic`'s partitions, as riffle-kafka fetched them.
fn codecs(backend: &KafkaBackend, topic: &str) -> Vec<Compression> {
    let mut out = Vec::new();
    for_each_batch(backend, topic, |batch, _| {
        out.push(batch.meta().compression)
    });
    out
}

#[test]
fn console_producer_gzip_and_snappy_topics_count_exactly_and_riffle_writes_both() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    for (codec, compression) in [("gzip", Compression::Gzip), ("snappy", Compression::Snappy)] {
        let input = format!("words-{codec}");
        let output = format!("counts-{codec}");
        broker.create_topic(&input, 3).unwrap();
        let lines: Vec<String> = (0..3_000)
            .map(|i| format!("key-{}\tv{i}", (i * 7919) % 97))
            .collect();
        let mut expected: HashMap<String, i64> = HashMap::new();
        for line in &lines {
            let (key, _) = line.split_once('\t').unwrap();
            *expected.entry(key.to_owned()).or_insert(0) += 1;
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        broker
            .console_produce_with(
                &input,
                &lines,
                &[("parse.key", "true")],
                &[("compression.type", codec), ("batch.size", "4096")],
            )
            .unwrap();
        assert!(
            codecs(&backend, &input).iter().all(|&c| c == compression),
            "{codec}: the console producer's batches are {codec}"
        );

        let state = tempfile::tempdir().unwrap();
        let mut config = config(&format!("compressed-{codec}"), state.path(), 2);
        config.compression = compression;
        let mut app = StreamsApp::new(
            count_topology(&input, &output, StoreType::Persistent),
            config,
            backend.shared(),
        )
        .unwrap();
        app.start().unwrap();
        wait_for(
            &format!("exact counts of the {codec} input"),
            Duration::from_secs(120),
            || (latest_counts(&backend, &output) == expected).then_some(()),
        );
        let summary = app.close().unwrap();
        assert_eq!(summary.records_processed, 3_000, "{codec}");
        let written = codecs(&backend, &output);
        assert!(
            !written.is_empty() && written.iter().all(|&c| c == compression),
            "{codec}: riffle's output batches are {written:?}"
        );
        let changelog = format!("compressed-{codec}-counts-changelog");
        assert!(
            codecs(&backend, &changelog)
                .iter()
                .all(|&c| c == compression),
            "{codec}: and its changelog's"
        );

        // Kafka's own consumer decodes riffle's batches.
        let total: u64 = backend.end_offsets(&output).unwrap().iter().sum();
        assert_eq!(
            console_consume_counts(&broker, &output, total as usize),
            expected,
            "{codec}: what Kafka's console consumer read"
        );
    }
}
