//! A topology with two sub-topologies on Kafka: lines are split into words, re-keyed by word
//! through a repartition topic, and counted. The heartbeat describes both sub-topologies (the
//! repartition topic as sink of one and source of the other), the broker assigns tasks of both,
//! and the counts are exact — under at_least_once, and under exactly_once, where the repartition
//! topic is written in the same transactions as the changelogs and read read_committed. The
//! repartition topic is purged (DeleteRecords) up to the committed offsets after commits.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{config, latest_counts, wait_for};
use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition};
use riffle::{
    Consumed, Grouped, ProcessingGuarantee, Produced, Serdes, StreamsApp, StreamsBuilder,
};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

#[test]
fn word_count_through_a_repartition_topic_is_exact() {
    word_count(ProcessingGuarantee::AtLeastOnce);
}

#[test]
fn word_count_through_a_repartition_topic_is_exact_under_exactly_once() {
    word_count(ProcessingGuarantee::ExactlyOnce);
}

fn word_count(guarantee: ProcessingGuarantee) {
    common::init_tracing();
    let broker = KafkaBroker::builder()
        .config("transaction.state.log.num.partitions", "3")
        .start()
        .unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    backend.create_topic("lines", 3, TopicKind::User).unwrap();
    let mut expected: HashMap<String, i64> = HashMap::new();
    for p in 0..3u32 {
        let mut batch = BatchBuilder::new(Compression::Zstd);
        for i in 0..2_000u32 {
            let line = format!("w{} w{} w{}", i % 97, (i * 7 + p) % 31, i % 5);
            for w in line.split(' ') {
                *expected.entry(w.to_owned()).or_default() += 1;
            }
            batch.push(0, Some(b"line"), Some(line.as_bytes()));
        }
        backend
            .append(&TopicPartition::new("lines", p), &mut batch)
            .unwrap();
    }

    let builder = StreamsBuilder::new();
    builder
        .stream("lines", Consumed::with(Serdes::string(), Serdes::string()))
        .flat_map_values(|line: String| line.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .group_by(
            |_, word: &String| word.clone(),
            Grouped::with(Serdes::string(), Serdes::string()).named("words"),
        )
        .count()
        .to_stream()
        .to(
            "word-counts",
            Produced::with(Serdes::string(), Serdes::i64()),
        );
    let topology = builder.build().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut app_config = config("wc", state.path(), 2);
    app_config.processing_guarantee = guarantee;
    app_config.repartition_purge_interval = Duration::ZERO;
    let mut app = StreamsApp::new(topology, app_config, backend.shared()).unwrap();
    app.start().unwrap();
    wait_for("exact word counts", Duration::from_secs(60), || {
        (latest_counts(&backend, "word-counts") == expected).then_some(())
    });
    // The counts can be exact while the group still reconciles (one member did all the work
    // before the other was given its tasks): wait for every task to be assigned.
    let g = wait_for("6 tasks assigned", Duration::from_secs(30), || {
        let g = backend.describe_streams_group("wc").unwrap();
        let tasks: usize = g
            .members
            .iter()
            .map(|m| common::task_count(&m.assignment.active))
            .sum();
        (tasks == 6).then_some(g)
    });
    assert_eq!(g.subtopologies, vec!["0".to_owned(), "1".to_owned()]);
    assert_eq!(backend.partitions("wc-words-repartition").unwrap(), Some(3));
    // Purged after the commits: Kafka's log start offset is the committed offset.
    for p in 0..3u32 {
        let tp = TopicPartition::new("wc-words-repartition", p);
        wait_for(
            "a purged repartition partition",
            Duration::from_secs(30),
            || {
                let start = backend.start_offset(&tp).unwrap();
                let committed = backend.committed_offset("wc", &tp).unwrap()?;
                (start > 0 && start == committed).then_some(())
            },
        );
    }
    app.close().unwrap();
}
