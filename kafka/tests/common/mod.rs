//! Shared by the Kafka scenarios: the groupByKey-count topology, input generation, reading
//! counts back, and waiting.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use riffle::log::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{Backend, Consumed, Produced, Serdes, StreamsBuilder, StreamsConfig, TopicKind};
use riffle_kafka::KafkaBackend;

/// stream(input).groupByKey().count().toStream().to(output), as the CLI sample builds it.
pub fn count_topology(input: &str, output: &str) -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream(input, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to(output, Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().unwrap()
}

/// A test-speed configuration: quick heartbeats, commits and polls.
pub fn config(app_id: &str, state_dir: &std::path::Path, threads: usize) -> StreamsConfig {
    let mut config = StreamsConfig::new(app_id);
    config.state_dir = state_dir.to_owned();
    config.num_stream_threads = threads;
    config.heartbeat_interval_ms = 300;
    config.commit_interval_ms = 300;
    config.poll_ms = 50;
    config
}

/// Creates `topic` with `partitions` partitions and appends `records` records over `keys`
/// keys (partitioned like Kafka's producer), starting at key sequence `seed`. Returns the
/// count per key.
pub fn produce_words(
    backend: &KafkaBackend,
    topic: &str,
    partitions: u32,
    records: u64,
    keys: u64,
    seed: u64,
) -> HashMap<String, i64> {
    backend
        .create_topic(topic, partitions, TopicKind::User)
        .unwrap();
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    let mut expected = HashMap::new();
    for i in 0..records {
        let key = format!("key-{}", (seed + i * 7919) % keys);
        let p = partition_for_key(key.as_bytes(), partitions) as usize;
        builders[p].push(i as i64, Some(key.as_bytes()), Some(b"1"));
        *expected.entry(key).or_insert(0) += 1;
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            backend
                .append(&TopicPartition::new(topic, p as u32), b)
                .unwrap();
        }
    }
    expected
}

/// The latest value per key of `topic` (values are 8-byte big-endian counts).
pub fn latest_counts(backend: &KafkaBackend, topic: &str) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    let Some(partitions) = backend.partitions(topic).unwrap() else {
        return counts;
    };
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let end = backend.end_offset(&tp).unwrap();
        let mut position = 0;
        while position < end {
            let batches = backend.fetch(&tp, position, 1 << 20).unwrap();
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for record in batch.records() {
                    let record = record.unwrap();
                    if record.offset() < position {
                        continue;
                    }
                    let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                    let value = <[u8; 8]>::try_from(&record.value().unwrap()[..]).unwrap();
                    counts.insert(key, i64::from_be_bytes(value));
                }
                position = batch.last_offset() + 1;
            }
        }
    }
    counts
}

/// Polls `f` until it returns `Some`, or panics after `timeout` naming `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads `topic` with Kafka's own console consumer (String keys, Long values) and returns the
/// latest value per key.
pub fn console_consume_counts(
    broker: &riffle_kafka_testkit::KafkaBroker,
    topic: &str,
    records: usize,
) -> HashMap<String, i64> {
    let out = broker
        .run_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--topic",
                topic,
                "--from-beginning",
                "--max-messages",
                &records.to_string(),
                "--timeout-ms",
                "20000",
                "--formatter-property",
                "print.key=true",
                "--formatter-property",
                "key.deserializer=org.apache.kafka.common.serialization.StringDeserializer",
                "--formatter-property",
                "value.deserializer=org.apache.kafka.common.serialization.LongDeserializer",
            ],
        )
        .unwrap();
    let mut counts = HashMap::new();
    for line in out.lines() {
        let (key, value) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("line {line:?}"));
        counts.insert(key.to_owned(), value.trim().parse().unwrap());
    }
    counts
}
