//! Scenario (a): the groupByKey-count sample on a real Kafka 4.4 broker, input on a
//! 4-partition topic, counts read back exactly — by riffle's fetch path and by Kafka's own
//! console consumer with its LongDeserializer.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    config, console_consume_counts, count_topology, latest_counts, produce_words, wait_for,
};
use riffle::backend::Backend;
use riffle::batch::{BatchBuilder, Compression, TopicPartition};
use riffle::{StreamsApp, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

#[test]
fn group_by_key_count_gives_exact_counts_on_kafka() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let expected = produce_words(&backend, "words", 4, 20_000, 500, 0);
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        count_topology("words", "counts", StoreType::InMemory),
        config("count-a", state.path(), 2),
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    wait_for(
        "exact counts in the output topic",
        Duration::from_secs(120),
        || (latest_counts(&backend, "counts") == expected).then_some(()),
    );
    let described = broker
        .describe_streams_group("count-a", &["--members", "--verbose"])
        .unwrap();
    println!("{described}");
    assert!(described.contains("count-a-StreamThread-1"), "{described}");
    // Idle now. A new record wakes the app through the fetch watcher's long poll, well before
    // the 5 s fallback poll.
    std::thread::sleep(Duration::from_secs(2));
    let mut late = BatchBuilder::new(Compression::None);
    late.push(0, Some(b"late"), Some(b"1"));
    let sent = Instant::now();
    backend
        .append(&TopicPartition::new("words", 0), &mut late)
        .unwrap();
    wait_for("the late record counted", Duration::from_secs(30), || {
        latest_counts(&backend, "counts").get("late").copied()
    });
    let latency = sent.elapsed();
    println!("an idle app counted a new record after {latency:?}");
    assert!(latency < Duration::from_millis(2_500), "{latency:?}");
    let summary = app.close().unwrap();
    assert_eq!(summary.records_processed, 20_001);

    // Kafka's own consumer reads the same counts.
    let total: u64 = backend.end_offsets("counts").unwrap().iter().sum();
    let consumed = console_consume_counts(&broker, "counts", total as usize);
    let mut expected = expected;
    expected.insert("late".into(), 1);
    assert_eq!(consumed, expected);
}
