//! `auto_offset_reset` on a real broker. Records below a partition's log start are deleted with
//! Kafka's own tool (`kafka-delete-records.sh`, `DeleteRecordsCommand`): under `earliest` the
//! application's fetch at offset 0 meets `OFFSET_OUT_OF_RANGE` and resets to the log start, so
//! it counts exactly the records left; under `none` it stops naming the partition; under
//! `latest` it counts only records written after its tasks started. Every record has its own
//! key, so the counted keys say which offsets were read.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{config, count_topology, latest_counts, wait_for};
use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{Error, StreamsApp, config::AutoOffsetReset, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

const PARTITIONS: u32 = 2;

/// Appends one record per key to `topic`; returns the keys by partition in offset order.
fn write(
    backend: &KafkaBackend,
    topic: &str,
    keys: impl Iterator<Item = String>,
) -> Vec<Vec<String>> {
    let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    let mut by_partition = vec![Vec::new(); PARTITIONS as usize];
    for key in keys {
        let p = partition_for_key(key.as_bytes(), PARTITIONS) as usize;
        builders[p].push(0, Some(key.as_bytes()), Some(b"v"));
        by_partition[p].push(key);
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            backend
                .append(&TopicPartition::new(topic, p as u32), b)
                .unwrap();
        }
    }
    by_partition
}

fn counted(backend: &KafkaBackend, topic: &str) -> HashSet<String> {
    let counts = latest_counts(backend, topic);
    assert!(
        counts.values().all(|&n| n == 1),
        "a key counted twice: {counts:?}"
    );
    counts.into_keys().collect()
}

#[test]
fn offsets_reset_to_the_log_start_the_end_or_nowhere_on_kafka() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    backend
        .create_topic("trimmed", PARTITIONS, TopicKind::User)
        .unwrap();
    let partitions = write(&backend, "trimmed", (0..400).map(|i| format!("t-{i}")));
    let cut = [10u64, 25];
    let json = format!(
        r#"{{"version":1,"partitions":[{{"topic":"trimmed","partition":0,"offset":{}}},{{"topic":"trimmed","partition":1,"offset":{}}}]}}"#,
        cut[0], cut[1]
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), json).unwrap();
    broker
        .run_tool(
            "org.apache.kafka.tools.DeleteRecordsCommand",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--offset-json-file",
                file.path().to_str().unwrap(),
            ],
        )
        .unwrap();
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new("trimmed", p);
        assert_eq!(backend.start_offset(&tp).unwrap(), cut[p as usize]);
    }

    // none: no committed offset stops the application, naming the partition.
    let state = tempfile::tempdir().unwrap();
    let mut strict = config("reset-none", state.path(), 1);
    strict.auto_offset_reset = AutoOffsetReset::None;
    let mut app = StreamsApp::new(
        count_topology("trimmed", "counts-none", StoreType::InMemory),
        strict,
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    wait_for("the application to stop", Duration::from_secs(120), || {
        app.is_shutting_down().then_some(())
    });
    let err = app.close().expect_err("none stops it");
    assert!(
        matches!(&err, Error::NoOffsetForPartition { topic, .. } if topic == "trimmed"),
        "{err}"
    );

    // earliest: from offset 0, out of range, to the log start; exactly the records left.
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        count_topology("trimmed", "counts-earliest", StoreType::InMemory),
        config("reset-earliest", state.path(), 2),
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    let left: HashSet<String> = partitions
        .iter()
        .enumerate()
        .flat_map(|(p, keys)| keys[cut[p] as usize..].iter().cloned())
        .collect();
    wait_for(
        "exactly the records after the log start",
        Duration::from_secs(120),
        || (counted(&backend, "counts-earliest") == left).then_some(()),
    );
    app.close().unwrap();

    // latest: what was there before the tasks started is never read. `keys_at[p][offset]` is
    // the key written there by this phase (`None` before it).
    let before: Vec<usize> = (0..PARTITIONS)
        .map(|p| {
            backend
                .end_offset(&TopicPartition::new("trimmed", p))
                .unwrap() as usize
        })
        .collect();
    let mut keys_at: Vec<Vec<Option<String>>> = before.iter().map(|&n| vec![None; n]).collect();
    let state = tempfile::tempdir().unwrap();
    let mut latest = config("reset-latest", state.path(), 1);
    latest.auto_offset_reset = AutoOffsetReset::Latest;
    let mut app = StreamsApp::new(
        count_topology("trimmed", "counts-latest", StoreType::InMemory),
        latest,
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    let mut next = 0;
    wait_for("the first records read", Duration::from_secs(120), || {
        for (p, keys) in write(
            &backend,
            "trimmed",
            (next..next + 10).map(|i| format!("after-{i}")),
        )
        .into_iter()
        .enumerate()
        {
            keys_at[p].extend(keys.into_iter().map(Some));
        }
        next += 10;
        std::thread::sleep(Duration::from_millis(200));
        (!latest_counts(&backend, "counts-latest").is_empty()).then_some(())
    });
    for (p, keys) in write(
        &backend,
        "trimmed",
        (next..next + 100).map(|i| format!("after-{i}")),
    )
    .into_iter()
    .enumerate()
    {
        keys_at[p].extend(keys.into_iter().map(Some));
    }
    let written: usize =
        keys_at.iter().map(|k| k.len()).sum::<usize>() - before.iter().sum::<usize>();
    // Every record read is one written after the start, and from the first one read on, each
    // partition is read to its end.
    wait_for(
        "the application to catch up",
        Duration::from_secs(120),
        || {
            let counted = counted(&backend, "counts-latest");
            let complete = keys_at.iter().all(|keys| {
                let first = keys
                    .iter()
                    .position(|k| k.as_ref().is_some_and(|k| counted.contains(k)));
                first.is_some_and(|f| {
                    keys[f..]
                        .iter()
                        .all(|k| k.as_ref().is_some_and(|k| counted.contains(k)))
                })
            });
            complete.then_some(counted)
        },
    );
    app.close().unwrap();
    let counted = counted(&backend, "counts-latest");
    assert!(
        counted.iter().all(|k| k.starts_with("after-")),
        "{counted:?}"
    );
    assert!(counted.len() <= written);
}
