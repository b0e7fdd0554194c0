//! Shared helpers of the runtime's integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::HashMap;

use riffle::log::{BatchBuilder, Compression, Log, TopicPartition, partition_for_key};

/// Appends `records` to `topic` (created with `partitions`), partitioned by key like Kafka.
pub fn produce(log: &Log, topic: &str, partitions: u32, records: &[(String, String)]) {
    let raw: Vec<(String, Vec<u8>)> = records
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    produce_raw(log, topic, partitions, &raw);
}

/// The latest 8-byte big-endian value per key of `topic`.
pub fn latest_longs(log: &Log, topic: &str) -> HashMap<String, i64> {
    let mut out = HashMap::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
            for record in batch.records() {
                let record = record.expect("record");
                let key = String::from_utf8(record.key().expect("key").to_vec()).expect("utf8");
                let value: [u8; 8] = record.value().expect("value")[..]
                    .try_into()
                    .expect("8 bytes");
                out.insert(key, i64::from_be_bytes(value));
            }
        }
    }
    out
}

/// The model: a plain HashMap count.
pub fn count_model<'a>(keys: impl IntoIterator<Item = &'a str>) -> HashMap<String, i64> {
    let mut m = HashMap::new();
    for k in keys {
        *m.entry(k.to_owned()).or_insert(0) += 1;
    }
    m
}

/// As [`produce`], with values given as bytes (any bytes: a poison record's value need not be
/// UTF-8). Record `i` has timestamp `i`; batches of 97 records.
pub fn produce_raw(log: &Log, topic: &str, partitions: u32, records: &[(String, Vec<u8>)]) {
    if log.partitions(topic).is_none() {
        log.create_topic(topic, partitions).expect("create topic");
    }
    let partitions = log.partitions(topic).expect("topic exists");
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (i, (k, v)) in records.iter().enumerate() {
        let p = partition_for_key(k.as_bytes(), partitions) as usize;
        builders[p].push(i as i64, Some(k.as_bytes()), Some(v));
        if builders[p].len() >= 97 {
            log.append(&TopicPartition::new(topic, p as u32), &mut builders[p])
                .expect("append");
        }
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            log.append(&TopicPartition::new(topic, p as u32), b)
                .expect("append");
        }
    }
}

/// Starts `app`, waits until it is idle, closes it: (records processed, records restored).
pub fn run_until_idle(mut app: riffle::StreamsApp) -> (u64, u64) {
    app.start().expect("start");
    while !app.is_idle() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let restored = app.records_restored();
    let processed = app.close().expect("run").records_processed;
    (processed, restored)
}

/// The groupByKey-count topology on a persistent store: `in` (strings) → `counts` → `out`
/// (longs).
#[allow(dead_code)]
pub fn persistent_count_topology() -> riffle::Topology {
    use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder, dsl::StoreType};
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count_with(Materialized::named("counts").with_store_type(StoreType::Persistent))
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().expect("topology")
}

/// The persistent groupByKey count `in` → `out` (store `counts`, application `durable`, two
/// threads), run on `log` with state in `state` until idle: (records processed, restored).
pub fn run_persistent_count(log: &Log, state: &std::path::Path) -> (u64, u64) {
    run_persistent_count_as("durable", log, state)
}

/// [`run_persistent_count`] as application `application_id`.
#[allow(dead_code)]
pub fn run_persistent_count_as(
    application_id: &str,
    log: &Log,
    state: &std::path::Path,
) -> (u64, u64) {
    use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};
    let mut config = StreamsConfig::new(application_id);
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.poll = std::time::Duration::from_millis(5);
    let app = StreamsApp::new(
        persistent_count_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    run_until_idle(app)
}

/// Appends `records` (key, 8-byte big-endian value or `None` for a tombstone, timestamp) to
/// `topic`, created with `partitions` if it does not exist, partitioned by key like Kafka.
pub fn produce_longs(
    log: &Log,
    topic: &str,
    partitions: u32,
    records: &[(String, Option<i64>, i64)],
) {
    if log.partitions(topic).is_none() {
        log.create_topic(topic, partitions).expect("create topic");
    }
    let partitions = log.partitions(topic).expect("topic exists");
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (k, v, ts) in records {
        let p = partition_for_key(k.as_bytes(), partitions) as usize;
        let value = v.map(i64::to_be_bytes);
        builders[p].push(*ts, Some(k.as_bytes()), value.as_ref().map(|v| &v[..]));
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            log.append(&TopicPartition::new(topic, p as u32), b)
                .expect("append");
        }
    }
}

/// Every record of `topic`: key → its 8-byte big-endian values (`None`: a tombstone) in offset
/// order (each key lives in one partition, so the order it was written in).
pub fn longs_per_key(
    log: &Log,
    topic: &str,
) -> std::collections::BTreeMap<String, Vec<Option<i64>>> {
    let mut out: std::collections::BTreeMap<String, Vec<Option<i64>>> = Default::default();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
            for record in batch.records() {
                let record = record.expect("record");
                let key = String::from_utf8(record.key().expect("key").to_vec()).expect("utf8");
                let value = record
                    .value()
                    .map(|v| i64::from_be_bytes(v[..].try_into().expect("8 bytes")));
                out.entry(key).or_default().push(value);
            }
        }
    }
    out
}

/// `topic` read as a table: each key's last 8-byte big-endian value, a tombstone deleting it.
pub fn table_of_longs(log: &Log, topic: &str) -> std::collections::BTreeMap<String, i64> {
    longs_per_key(log, topic)
        .into_iter()
        .filter_map(|(k, values)| values.last().copied().flatten().map(|v| (k, v)))
        .collect()
}

/// Waits until `app` is idle (every thread caught up and committed), at most a minute.
pub fn wait_idle(app: &riffle::StreamsApp) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !app.is_idle() {
        assert!(std::time::Instant::now() < deadline, "never idle");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A test-speed configuration for two stream threads over `state`: 5 ms polls, 20 ms commits.
pub fn two_thread_config(application_id: &str, state: &std::path::Path) -> riffle::StreamsConfig {
    let mut config = riffle::StreamsConfig::new(application_id);
    config.state_dir = state.to_path_buf();
    config.num_stream_threads = 2;
    config.poll = std::time::Duration::from_millis(5);
    config.commit_interval = Some(std::time::Duration::from_millis(20));
    config
}

/// Copies the directory `from` (files and subdirectories) to `to`.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
