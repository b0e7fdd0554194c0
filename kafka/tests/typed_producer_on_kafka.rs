//! `riffle::producer::Producer` on a real broker: typed records (string keys, long values) sent with lz4
//! batches reach Kafka in murmur2 partitions of their keys, in send order per key, and Kafka's
//! own console consumer reads them back exactly.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use riffle::backend::TopicKind;
use riffle::batch::{Compression, partition_for_key};
use riffle::{Serdes, producer::Producer, producer::ProducerConfig};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

#[test]
fn typed_records_reach_kafka_where_kafkas_partitioner_puts_them() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap()))
        .unwrap()
        .shared();
    backend.create_topic("typed", 3, TopicKind::User).unwrap();
    let config = ProducerConfig::default()
        .with_batch_size(4 << 10)
        .with_linger(Duration::from_millis(10))
        .with_compression(Compression::Lz4);
    let mut producer = Producer::with_config(backend, Serdes::string(), Serdes::i64(), config);
    let mut sent: BTreeMap<(u32, String), Vec<i64>> = BTreeMap::new();
    for i in 0..2_000i64 {
        let key = format!("key-{}", i % 37);
        producer.send("typed", &key, &i).unwrap();
        let p = partition_for_key(key.as_bytes(), 3);
        sent.entry((p, key)).or_default().push(i);
    }
    producer.close().unwrap();
    let lines = broker
        .console_consume(
            "typed",
            2_000,
            &[
                ("print.key", "true"),
                ("print.partition", "true"),
                (
                    "value.deserializer",
                    "org.apache.kafka.common.serialization.LongDeserializer",
                ),
            ],
        )
        .unwrap();
    let mut read: BTreeMap<(u32, String), Vec<i64>> = BTreeMap::new();
    for line in &lines {
        let fields: Vec<&str> = line.split('\t').collect();
        let [partition, key, value] = fields[..] else {
            panic!("unexpected line {line:?}");
        };
        let partition: u32 = partition
            .strip_prefix("Partition:")
            .unwrap_or(partition)
            .parse()
            .unwrap();
        read.entry((partition, key.to_owned()))
            .or_default()
            .push(value.parse().unwrap());
    }
    assert_eq!(read, sent);
}
