//! `riffle sample group-by-key-count --follow` under exactly_once on a three-node Kafka cluster
//! (the test kit's `KafkaCluster`: replication factor 3, `min.insync.replicas=2`) while input
//! keeps arriving and one node is killed with SIGKILL and restarted: the sample neither stops
//! nor loses a record, its counts, read back read_committed, equal a HashMap count of the
//! input, and SIGTERM ends it cleanly.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use riffle::backend::{Backend, TopicKind};
use riffle::log::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::{KafkaBroker, KafkaCluster};

/// Appends `records` words over 300 keys (timestamps of now) to "words"; their counts.
fn produce(backend: &KafkaBackend, records: u64, seed: u64) -> HashMap<String, i64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut batches: Vec<BatchBuilder> = (0..4)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    let mut counts = HashMap::new();
    for i in 0..records {
        let key = format!("key-{}", (seed * 7_919 + i * 31) % 300);
        let p = partition_for_key(key.as_bytes(), 4) as usize;
        batches[p].push(now, Some(key.as_bytes()), Some(b"1"));
        *counts.entry(key).or_insert(0) += 1;
    }
    for (p, batch) in batches.iter_mut().enumerate() {
        backend
            .append(&TopicPartition::new("words", p as u32), batch)
            .unwrap();
    }
    counts
}

/// The latest count per key of "counts".
fn counts(backend: &KafkaBackend) -> HashMap<String, i64> {
    let mut out = HashMap::new();
    let Some(partitions) = backend.partitions("counts").unwrap() else {
        return out;
    };
    for p in 0..partitions {
        let tp = TopicPartition::new("counts", p);
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
                    if record.offset() >= position {
                        let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                        let value = <[u8; 8]>::try_from(&record.value().unwrap()[..]).unwrap();
                        out.insert(key, i64::from_be_bytes(value));
                    }
                }
                position = batch.last_offset() + 1;
            }
        }
    }
    out
}

#[test]
fn the_sample_counts_exactly_once_through_a_broker_failure() {
    let mut cluster = KafkaCluster::start(
        3,
        KafkaBroker::builder()
            .config("transaction.state.log.num.partitions", "3")
            .config("broker.session.timeout.ms", "3000")
            .config("broker.heartbeat.interval.ms", "500"),
    )
    .unwrap();
    let bootstrap = cluster.bootstrap().to_owned();
    let backend = KafkaBackend::connect(KafkaConfig::new(bootstrap.as_str())).unwrap();
    backend.create_topic("words", 4, TopicKind::User).unwrap();
    let mut expected = produce(&backend, 5_000, 0);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sample.log");
    let mut sample = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "sample",
            "group-by-key-count",
            "--bootstrap-servers",
            &bootstrap,
            "--input",
            "words",
            "--output",
            "counts",
            "--application-id",
            "sample-failover",
            "--processing-guarantee",
            "exactly_once",
            "--commit-interval-ms",
            "100",
            "--follow",
            "--progress-every",
            "1s",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let producer = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            let mut written: HashMap<String, i64> = HashMap::new();
            for round in 1..=40u64 {
                for (k, n) in produce(&backend, 500, round) {
                    *written.entry(k).or_default() += n;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            written
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    cluster.node(0).kill();
    std::thread::sleep(Duration::from_secs(8));
    cluster.node(0).restart().unwrap();
    for (k, n) in producer.join().unwrap() {
        *expected.entry(k).or_default() += n;
    }
    let mut reader_config = KafkaConfig::new(bootstrap.as_str());
    reader_config.read_committed = true;
    let reader = KafkaBackend::connect(reader_config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while counts(&reader) != expected {
        assert!(
            sample.try_wait().unwrap().is_none(),
            "the sample stopped: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "counts not exact after 120 s: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &sample.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = sample.wait().unwrap();
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    println!("{out}");
    assert!(status.success(), "{status}: {out}");
}
