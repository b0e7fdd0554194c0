//! On Kafka, `Backend::changed_partitions` names the partitions that may have new data since a
//! data version — a partition another client produced to after a fetch found it empty (the
//! fetch watcher saw it grow), and a partition this backend appended to — so a stream thread
//! can fetch those instead of every partition it reads.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

fn one_record() -> BatchBuilder {
    let mut batch = BatchBuilder::new(Compression::None);
    batch.push(0, Some(b"k"), Some(b"v"));
    batch
}

#[test]
fn the_partitions_that_grew_are_named_and_no_others() {
    let broker = KafkaBroker::start().unwrap();
    let mut config = KafkaConfig::new(broker.bootstrap());
    // No fallback tick ("unknown") during the test.
    config.fetch_poll_interval = Duration::from_secs(3600);
    let reader = KafkaBackend::connect(config.clone()).unwrap();
    let writer = KafkaBackend::connect(config).unwrap();
    reader.create_topic("in", 4, TopicKind::User).unwrap();
    let tp = |p| TopicPartition::new("in", p);
    // Every partition fetched at its end and found empty: the watcher watches them all.
    for p in 0..4 {
        let end = reader.end_offset(&tp(p)).unwrap();
        assert!(reader.fetch(&tp(p), end, 1 << 20).unwrap().is_empty());
    }
    let seen = reader.data_version();

    // Another client writes partition 2.
    writer.append(&tp(2), &mut one_record()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut version = seen;
    while version == seen && Instant::now() < deadline {
        version = reader.wait_for_data(seen, reader.wake_count(), Duration::from_secs(1));
    }
    assert_ne!(version, seen, "the watcher did not see partition 2 grow");
    let mut changed = Vec::new();
    assert_eq!(reader.changed_partitions(seen, &mut changed), Some(version));
    changed.dedup();
    assert_eq!(changed, vec![tp(2)]);
    assert_eq!(
        reader.changed_partitions(version, &mut changed),
        Some(version)
    );
    assert_eq!(changed, vec![tp(2)], "nothing new since");

    // This backend appends to partition 3: named at once (the watcher may name it too).
    let seen = reader.data_version();
    reader.append(&tp(3), &mut one_record()).unwrap();
    let mut changed = Vec::new();
    let version = reader.changed_partitions(seen, &mut changed).unwrap();
    assert!(version > seen);
    assert!(!changed.is_empty());
    assert!(changed.iter().all(|t| *t == tp(3)), "{changed:?}");
}
