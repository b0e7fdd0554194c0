//! A windowed count on a real Kafka 4.4 broker: tumbling windows with grace, each window's final
//! result emitted once on close, equal to a brute-force replay of Kafka's window rules per
//! partition (runtime/tests/window_model); and the store's changelog topic created as Kafka
//! Streams creates a windowed changelog (`compact,delete`, retention = the store's + 1 day).

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../runtime/tests/window_model/mod.rs"]
mod window_model;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{config, wait_for};
use riffle::backend::Backend;
use riffle::batch::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{
    Consumed, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder, TimeWindows, Windowed,
    dsl::StoreType, window::EmitStrategy,
};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;
use window_model::{Kind, Spec};

const SIZE: i64 = 1_000;
const GRACE: i64 = 200;
const PARTITIONS: u32 = 3;

type Windows = BTreeMap<(String, i64, i64), Vec<i64>>;

fn read_windows(backend: &KafkaBackend, topic: &str) -> Windows {
    let serde = Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE as u64));
    let mut out: Windows = BTreeMap::new();
    for p in 0..backend.partitions(topic).unwrap().unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        let end = backend.end_offset(&tp).unwrap();
        let mut offset = 0;
        while offset < end {
            let batches = backend.fetch(&tp, offset, 1 << 20).unwrap();
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for r in batch.records() {
                    let r = r.unwrap();
                    offset = r.offset() + 1;
                    let k: Windowed<String> = serde.deserialize(r.key().map(|b| &b[..])).unwrap();
                    let v = i64::from_be_bytes(r.value().unwrap()[..].try_into().unwrap());
                    out.entry((k.key, k.window.start, k.window.end))
                        .or_default()
                        .push(v);
                }
            }
        }
    }
    out
}

#[test]
fn final_windowed_counts_are_exact_on_kafka_and_the_changelog_keeps_the_windows_retention() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    backend
        .create_topic("clicks", PARTITIONS, riffle::backend::TopicKind::User)
        .unwrap();
    // 6,000 records over 30 keys, 5 ms apart in event time, every 13th 400 ms back (some
    // beyond grace).
    let mut per_partition: BTreeMap<u32, Vec<(String, i64)>> = BTreeMap::new();
    let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for i in 0..6_000i64 {
        let key = format!("user-{}", (i * 7) % 30);
        let ts = if i % 13 == 6 {
            (i * 5 - 400).max(0)
        } else {
            i * 5
        };
        let p = partition_for_key(key.as_bytes(), PARTITIONS);
        builders[p as usize].push(ts, Some(key.as_bytes()), Some(b"click"));
        per_partition.entry(p).or_default().push((key, ts));
        if builders[p as usize].len() >= 200 {
            backend
                .append(&TopicPartition::new("clicks", p), &mut builders[p as usize])
                .unwrap();
        }
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            backend
                .append(&TopicPartition::new("clicks", p as u32), b)
                .unwrap();
        }
    }
    let spec = Spec {
        kind: Kind::Time {
            size: SIZE,
            advance: SIZE,
        },
        grace: GRACE,
    };
    let mut expected: Windows = BTreeMap::new();
    for recs in per_partition.values() {
        let outcome = spec.run(recs);
        for (w, v) in spec.closed(&outcome) {
            expected.insert(w, vec![v]);
        }
    }

    let builder = StreamsBuilder::new();
    let size = Duration::from_millis(SIZE as u64);
    builder
        .stream("clicks", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .windowed_by(TimeWindows::of_size_and_grace(
            size,
            Duration::from_millis(GRACE as u64),
        ))
        .emit_strategy(EmitStrategy::on_window_close())
        .count_with(Materialized::named("per-second").with_store_type(StoreType::Persistent))
        .to_stream()
        .to(
            "clicks-per-second",
            Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
        );
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        builder.build().unwrap(),
        config("windowed-count", state.path(), 2),
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    wait_for(
        "every closed window in the output",
        Duration::from_secs(120),
        || (read_windows(&backend, "clicks-per-second").len() >= expected.len()).then_some(()),
    );
    app.close().unwrap();
    assert_eq!(
        read_windows(&backend, "clicks-per-second"),
        expected,
        "each closed window once, with the model's count"
    );

    // The changelog, as the broker created it from the streams group's topology.
    let described = broker
        .run_tool(
            "org.apache.kafka.tools.ConfigCommand",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--entity-type",
                "topics",
                "--entity-name",
                "windowed-count-per-second-changelog",
                "--describe",
            ],
        )
        .unwrap();
    println!("{described}");
    assert!(
        described.contains("cleanup.policy=compact,delete"),
        "{described}"
    );
    let retention = SIZE + GRACE + 86_400_000;
    assert!(
        described.contains(&format!("retention.ms={retention}")),
        "{described}"
    );
}
