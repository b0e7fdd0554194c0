//! Poison records on a real broker: values that are not UTF-8 and values the application
//! panics on, at random positions of a 2-partition topic. With
//! `default.deserialization.exception.handler=continue`, `processing.exception.handler=continue`
//! and `errors.dead.letter.queue.topic.name`, riffle counts the good records exactly and puts
//! each bad one in the dead-letter queue once; Kafka's own console consumer
//! (`print.headers=true`) reads them there with KIP-1034's headers naming their error, topic,
//! partition and offset.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::{config, for_each_batch, latest_counts, wait_for};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{Consumed, Produced, Serdes, StreamsApp, StreamsBuilder};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

#[test]
fn poison_records_are_skipped_once_into_a_dead_letter_queue_kafka_reads() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    backend.create_topic("events", 2, TopicKind::User).unwrap();
    let mut builders = [
        BatchBuilder::new(Compression::None),
        BatchBuilder::new(Compression::None),
    ];
    let mut offsets = [0u64; 2];
    let mut expected: HashMap<String, i64> = HashMap::new();
    let mut poison = BTreeSet::new();
    let mut panics = 0;
    let mut rng = StdRng::seed_from_u64(0x2545_f491_4f6c_dd1d);
    for i in 0..2_000u64 {
        let key = format!("key-{}", rng.random_range(0..61));
        let p = partition_for_key(key.as_bytes(), 2) as usize;
        let kind = rng.random_range(0..40);
        if kind == 0 {
            builders[p].push(i as i64, Some(key.as_bytes()), Some(&[0xff, 0xfe][..]));
            poison.insert((p as u32, offsets[p]));
        } else if kind == 1 {
            builders[p].push(i as i64, Some(key.as_bytes()), Some(b"boom"));
            poison.insert((p as u32, offsets[p]));
            panics += 1;
        } else {
            builders[p].push(i as i64, Some(key.as_bytes()), Some(b"ok"));
            *expected.entry(key).or_insert(0) += 1;
        }
        offsets[p] += 1;
    }
    for (p, b) in builders.iter_mut().enumerate() {
        backend
            .append(&TopicPartition::new("events", p as u32), b)
            .unwrap();
    }
    assert!(panics > 0 && poison.len() > panics);

    let state = tempfile::tempdir().unwrap();
    let mut config = config("poison-kafka", state.path(), 2);
    config
        .set("default.deserialization.exception.handler", "continue")
        .unwrap()
        .set("processing.exception.handler", "continue")
        .unwrap()
        .set("errors.dead.letter.queue.topic.name", "events-dlq")
        .unwrap();
    let builder = StreamsBuilder::new();
    builder
        .stream("events", Consumed::with(Serdes::string(), Serdes::string()))
        .map_values(|v: String| {
            assert!(v != "boom", "the application cannot take {v:?}");
            v
        })
        .group_by_key()
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    let mut app = StreamsApp::new(builder.build().unwrap(), config, backend.shared()).unwrap();
    app.start().unwrap();
    wait_for(
        "exact counts of the good records",
        Duration::from_secs(120),
        || (latest_counts(&backend, "counts") == expected).then_some(()),
    );
    app.close().unwrap();

    let printed = broker
        .console_consume(
            "events-dlq",
            poison.len(),
            &[("print.key", "true"), ("print.headers", "true")],
        )
        .unwrap();
    // A record's stack-trace header spans lines (the error, then its causes): its origin
    // headers are on the line after its exception header.
    let mut seen = BTreeSet::new();
    for line in printed
        .iter()
        .filter(|l| l.contains("__streams.errors.topic:events"))
    {
        let field = |name: &str| -> String {
            let at = line.find(name).unwrap() + name.len();
            line[at..].split([',', '\t']).next().unwrap().to_owned()
        };
        let origin: (u32, u64) = (
            field("__streams.errors.partition:").parse().unwrap(),
            field("__streams.errors.offset:").parse().unwrap(),
        );
        assert!(seen.insert(origin), "{origin:?} twice: {printed:?}");
    }
    assert_eq!(
        seen, poison,
        "each poison record once, read by Kafka's consumer"
    );
    let kinds = printed
        .iter()
        .filter(|l| l.contains("__streams.errors.exception:riffle::Error::Deserialize"))
        .count();
    assert_eq!(kinds, poison.len() - panics, "{printed:?}");
    let kinds = printed
        .iter()
        .filter(|l| l.contains("__streams.errors.exception:riffle::Error::Panicked"))
        .count();
    assert_eq!(kinds, panics, "{printed:?}");
}

/// Records the application makes too large for Kafka (a 1.5 MiB value against the default
/// `max.request.size` of 1 MiB, which the broker's default `message.max.bytes` would refuse as
/// well). Under `default.production.exception.handler=continue` only those writes are dropped:
/// the echo topic holds every other record, and each dropped one's input record is in the
/// dead-letter queue once, read by Kafka's console consumer. Under the default (fail), the
/// application stops with an error naming the record and the topic.
#[test]
fn records_too_large_for_kafka_meet_the_production_exception_handler() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    backend.create_topic("lines", 2, TopicKind::User).unwrap();
    let mut builders = [
        BatchBuilder::new(Compression::None),
        BatchBuilder::new(Compression::None),
    ];
    let mut offsets = [0u64; 2];
    let mut big = BTreeSet::new();
    let mut small = [0usize; 2];
    for i in 0..400u64 {
        let key = format!("key-{}", i % 17);
        let p = partition_for_key(key.as_bytes(), 2) as usize;
        let value: &[u8] = if i % 37 == 5 { b"big" } else { b"ok" };
        builders[p].push(i as i64, Some(key.as_bytes()), Some(value));
        if value == b"big" {
            big.insert((p as u32, offsets[p]));
        } else {
            small[p] += 1;
        }
        offsets[p] += 1;
    }
    for (p, b) in builders.iter_mut().enumerate() {
        backend
            .append(&TopicPartition::new("lines", p as u32), b)
            .unwrap();
    }
    let topology = || {
        let builder = riffle::StreamsBuilder::new();
        builder
            .stream(
                "lines",
                riffle::Consumed::with(riffle::Serdes::string(), riffle::Serdes::string()),
            )
            .map_values(|v: String| if v == "big" { "x".repeat(3 << 19) } else { v })
            .to(
                "echo",
                riffle::Produced::with(riffle::Serdes::string(), riffle::Serdes::string()),
            );
        builder.build().unwrap()
    };
    let echoed = |backend: &KafkaBackend| {
        let mut n = 0;
        for_each_batch(backend, "echo", |batch, position| {
            n += batch
                .records()
                .filter(|r| r.as_ref().unwrap().offset() >= position)
                .count();
        });
        n
    };

    let state = tempfile::tempdir().unwrap();
    let mut continuing = config("too-large-kafka", state.path(), 1);
    continuing
        .set("default.production.exception.handler", "continue")
        .unwrap()
        .set("errors.dead.letter.queue.topic.name", "lines-dlq")
        .unwrap();
    let mut app = StreamsApp::new(topology(), continuing, backend.shared()).unwrap();
    app.start().unwrap();
    let total = small[0] + small[1];
    wait_for(
        "every small record echoed",
        Duration::from_secs(120),
        || (echoed(&backend) == total).then_some(()),
    );
    app.close().unwrap();
    let printed = broker
        .console_consume(
            "lines-dlq",
            big.len(),
            &[("print.key", "true"), ("print.headers", "true")],
        )
        .unwrap();
    let mut seen = BTreeSet::new();
    for line in printed
        .iter()
        .filter(|l| l.contains("__streams.errors.exception:riffle::Error::RecordTooLarge"))
    {
        let field = |name: &str| -> String {
            let at = line.find(name).unwrap() + name.len();
            line[at..].split([',', '\t']).next().unwrap().to_owned()
        };
        assert_eq!(field("__streams.errors.topic:"), "lines", "{line}");
        let origin: (u32, u64) = (
            field("__streams.errors.partition:").parse().unwrap(),
            field("__streams.errors.offset:").parse().unwrap(),
        );
        assert!(seen.insert(origin), "{origin:?} twice: {printed:?}");
    }
    assert_eq!(seen, big, "each too-large record's input once: {printed:?}");
    assert_eq!(echoed(&backend), total, "nothing more was echoed");

    let state = tempfile::tempdir().unwrap();
    let failing = config("too-large-kafka-fail", state.path(), 1);
    let mut app = StreamsApp::new(topology(), failing, backend.shared()).unwrap();
    app.start().unwrap();
    wait_for("the application stops", Duration::from_secs(120), || {
        app.is_shutting_down().then_some(())
    });
    let err = app.close().expect_err("fail is the default");
    let text = format!("{err}");
    assert!(
        text.contains("for echo-") && text.contains("larger than max_request_size (1048576 bytes)"),
        "{text}"
    );
    let (topic, partition, offset) = err.record_location().unwrap();
    assert_eq!(topic, "lines");
    assert!(big.contains(&(partition, offset)), "{err}");
}
