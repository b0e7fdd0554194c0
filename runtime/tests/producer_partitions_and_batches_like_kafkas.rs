//! `riffle::producer::Producer` against a model: any sequence of sends (keyed, keyless, tombstones, to a
//! chosen partition, with headers) and flushes, under any batch size, ends with every record in
//! the embedded log exactly once — a keyed record in Kafka's murmur2 partition of its key,
//! each partition holding its records in send order — and the linger thread appends a batch
//! nobody flushes.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use riffle::backend::TopicKind;
use riffle::log::{Log, TopicPartition, partition_for_key};
use riffle::{
    EmbeddedBackend, Error, Headers, Serdes, producer::Producer, producer::ProducerConfig,
    producer::ProducerRecord,
};

const PARTITIONS: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    Keyed(u8, u16),
    Tombstone(u8),
    Keyless(u16),
    ToPartition(u32, u8, u16),
    WithHeader(u8, u16),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..20, any::<u16>()).prop_map(|(k, v)| Op::Keyed(k, v)),
        1 => (0u8..20).prop_map(Op::Tombstone),
        2 => any::<u16>().prop_map(Op::Keyless),
        1 => (0..PARTITIONS, 0u8..20, any::<u16>()).prop_map(|(p, k, v)| Op::ToPartition(p, k, v)),
        1 => (0u8..20, any::<u16>()).prop_map(|(k, v)| Op::WithHeader(k, v)),
        1 => Just(Op::Flush),
    ]
}

/// What one partition holds: (key, value, header value), in offset order.
type Stored = Vec<(Option<String>, Option<String>, Option<String>)>;

fn read_back(log: &Log) -> Vec<Stored> {
    (0..PARTITIONS)
        .map(|p| {
            let tp = TopicPartition::new("t", p);
            let mut out = Vec::new();
            for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
                for record in batch.records() {
                    let record = record.expect("record");
                    let text = |b: Option<&bytes::Bytes>| {
                        b.map(|b| String::from_utf8(b.to_vec()).expect("utf-8"))
                    };
                    let header = record
                        .headers()
                        .find(|h| &h.key[..] == b"h")
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8(v.to_vec()).expect("utf-8"));
                    out.push((text(record.key()), text(record.value()), header));
                }
            }
            out
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_record_lands_once_where_kafkas_partitioner_puts_it(
        ops in proptest::collection::vec(op(), 1..200),
        batch_size in 1usize..2_000,
    ) {
        let log = Log::in_memory();
        let backend = EmbeddedBackend::new(log.clone()).shared();
        backend.create_topic("t", PARTITIONS, TopicKind::User).expect("topic");
        let config = ProducerConfig::default()
            .with_batch_size(batch_size)
            .with_linger(Duration::from_secs(3600));
        let mut producer =
            Producer::with_config(backend.clone(), Serdes::string(), Serdes::string(), config);
        let mut model: Vec<Stored> = vec![Vec::new(); PARTITIONS as usize];
        let mut keyless: Vec<(String, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let (key, value, partition, header) = match op {
                Op::Keyed(k, v) => (Some(format!("k{k}")), Some(v.to_string()), None, None),
                Op::Tombstone(k) => (Some(format!("k{k}")), None, None, None),
                Op::Keyless(v) => (None, Some(v.to_string()), None, None),
                Op::ToPartition(p, k, v) => (Some(format!("k{k}")), Some(v.to_string()), Some(*p), None),
                Op::WithHeader(k, v) => (Some(format!("k{k}")), Some(v.to_string()), None, Some(format!("h{i}"))),
                Op::Flush => {
                    producer.flush().expect("flush");
                    continue;
                }
            };
            let mut headers = Headers::new();
            if let Some(h) = &header {
                headers.add("h", Some(bytes::Bytes::from(h.clone())));
            }
            producer
                .send_record(
                    "t",
                    ProducerRecord {
                        key: key.as_ref(),
                        value: value.as_ref(),
                        timestamp: Some(i as i64),
                        partition,
                        headers: Some(&headers),
                    },
                )
                .expect("send");
            match (&key, partition) {
                (_, Some(p)) => model[p as usize].push((key.clone(), value.clone(), header)),
                (Some(k), None) => model[partition_for_key(k.as_bytes(), PARTITIONS) as usize]
                    .push((key.clone(), value.clone(), header)),
                (None, None) => keyless.push((value.clone().unwrap_or_default(), i)),
            }
        }
        producer.close().expect("close");
        let stored = read_back(&log);
        // Keyed records: exactly the model, in send order, once keyless ones are set aside.
        let keyed: Vec<Stored> = stored
            .iter()
            .map(|p| p.iter().filter(|r| r.0.is_some()).cloned().collect())
            .collect();
        prop_assert_eq!(keyed, model);
        // Keyless records: each exactly once, in send order within a partition.
        let mut found: Vec<String> = stored
            .iter()
            .flat_map(|p| p.iter().filter(|r| r.0.is_none()).map(|r| r.1.clone().unwrap_or_default()))
            .collect();
        let mut sent: Vec<String> = keyless.iter().map(|(v, _)| v.clone()).collect();
        found.sort();
        sent.sort();
        prop_assert_eq!(found, sent);
    }
}

#[test]
fn the_linger_thread_appends_what_nobody_flushes() {
    let log = Log::in_memory();
    let backend = EmbeddedBackend::new(log.clone()).shared();
    backend
        .create_topic("t", 1, TopicKind::User)
        .expect("topic");
    let config = ProducerConfig::default().with_linger(Duration::from_millis(500));
    let mut producer =
        Producer::with_config(backend.clone(), Serdes::string(), Serdes::i64(), config);
    producer.send("t", &"a".to_owned(), &1).expect("send");
    let tp = TopicPartition::new("t", 0);
    assert_eq!(log.end_offset(&tp).expect("end"), 0, "not before linger");
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.end_offset(&tp).expect("end") == 0 {
        assert!(Instant::now() < deadline, "the batch never lingered out");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(producer);
    assert_eq!(log.end_offset(&tp).expect("end"), 1);
}

#[test]
fn a_missing_topic_or_partition_is_an_error_naming_it() {
    let backend = EmbeddedBackend::new(Log::in_memory()).shared();
    backend
        .create_topic("t", 2, TopicKind::User)
        .expect("topic");
    let mut producer = Producer::new(backend, Serdes::string(), Serdes::string());
    let err = producer
        .send("nope", &"k".to_owned(), &"v".to_owned())
        .expect_err("no such topic");
    assert!(
        matches!(&err, Error::UnknownTopic { topic } if topic == "nope"),
        "{err}"
    );
    let (k, v) = ("k".to_owned(), "v".to_owned());
    let mut record = ProducerRecord::new(&k, &v);
    record.partition = Some(5);
    let err = producer
        .send_record("t", record)
        .expect_err("no partition 5");
    assert!(
        err.to_string()
            .contains("topic t has 2 partitions: there is no partition 5"),
        "{err}"
    );
}
