//! Shared by the Kafka scenarios: the groupByKey-count topology, input generation, reading
//! counts back, and waiting.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{
    Consumed, Materialized, Produced, Serdes, StreamsBuilder, StreamsConfig, dsl::StoreType,
};
use riffle_kafka::KafkaBackend;

/// stream(input).groupByKey().count().toStream().to(output), as the CLI sample builds it
/// (store `counts`, changelog `<app>-counts-changelog`).
pub fn count_topology(input: &str, output: &str, store: StoreType) -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream(input, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count_with(Materialized::named("counts").with_store_type(store))
        .to_stream()
        .to(output, Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().unwrap()
}

/// A test-speed configuration: quick heartbeats, commits and polls.
pub fn config(app_id: &str, state_dir: &std::path::Path, threads: usize) -> StreamsConfig {
    let mut config = StreamsConfig::new(app_id);
    config.state_dir = state_dir.to_owned();
    config.num_stream_threads = threads;
    config.heartbeat_interval = Duration::from_millis(300);
    config.commit_interval = Some(Duration::from_millis(300));
    config.poll = Duration::from_millis(50);
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
    produce_words_at(backend, topic, partitions, records, keys, seed, 0)
}

/// [`produce_words`] with timestamps from `first_timestamp` on (milliseconds since the epoch:
/// records of 1970 are past the broker's 7-day retention, so a long test gives them now).
pub fn produce_words_at(
    backend: &KafkaBackend,
    topic: &str,
    partitions: u32,
    records: u64,
    keys: u64,
    seed: u64,
    first_timestamp: i64,
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
        builders[p].push(first_timestamp + i as i64, Some(key.as_bytes()), Some(b"1"));
        *expected.entry(key).or_insert(0) += 1;
        if builders[p].size_bytes() >= 256 << 10 {
            backend
                .append(&TopicPartition::new(topic, p as u32), &mut builders[p])
                .unwrap();
        }
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

/// Visits every batch of `topic`'s partitions, in order, with the offset the partition was
/// read from (a batch may start before it: skip its records below it).
pub fn for_each_batch(
    backend: &KafkaBackend,
    topic: &str,
    mut f: impl FnMut(&riffle::batch::FetchedBatch, u64),
) {
    let Some(partitions) = backend.partitions(topic).unwrap() else {
        return;
    };
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let end = backend.end_offset(&tp).unwrap();
        let mut position = 0;
        while position < end {
            let batches = backend.fetch(&tp, position, 1 << 20).unwrap_or_else(|e| {
                panic!(
                    "{e}: start {:?} end {end} now {:?}",
                    backend.start_offset(&tp),
                    backend.end_offset(&tp)
                )
            });
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                f(&batch, position);
                position = batch.last_offset() + 1;
            }
        }
    }
}

/// The latest value per key of `topic` (values are 8-byte big-endian counts).
pub fn latest_counts(backend: &KafkaBackend, topic: &str) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for_each_batch(backend, topic, |batch, position| {
        for record in batch.records() {
            let record = record.unwrap();
            if record.offset() < position {
                continue;
            }
            let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
            let value = <[u8; 8]>::try_from(&record.value().unwrap()[..]).unwrap();
            counts.insert(key, i64::from_be_bytes(value));
        }
    });
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

/// Environment of a child instance (see [`child_instance`]).
pub const CHILD_ENV: &str = "RIFFLE_KAFKA_TEST_INSTANCE";

/// Numbers the instances' log files.
static NEXT_INSTANCE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One app instance in its own process, so a test can kill it with SIGKILL.
pub struct Instance {
    pub child: std::process::Child,
    pub stop_file: std::path::PathBuf,
    pub log: std::path::PathBuf,
}

impl Instance {
    /// Starts `test_name` of the current test binary as an instance of the count app.
    pub fn spawn(
        test_name: &str,
        bootstrap: &str,
        app_id: &str,
        state_dir: &std::path::Path,
        threads: usize,
        store: StoreType,
    ) -> Instance {
        Self::spawn_with(test_name, bootstrap, app_id, state_dir, threads, store, &[])
    }

    /// [`Instance::spawn`] with more environment: `GUARANTEE` (`exactly_once`) and
    /// `COMMIT_MS` (the commit interval) are read by [`child_instance`].
    pub fn spawn_with(
        test_name: &str,
        bootstrap: &str,
        app_id: &str,
        state_dir: &std::path::Path,
        threads: usize,
        store: StoreType,
        env: &[(&str, &str)],
    ) -> Instance {
        std::fs::create_dir_all(state_dir).unwrap();
        let stop_file = state_dir.join("stop");
        let _ = std::fs::remove_file(&stop_file);
        let log = state_dir.join(format!(
            "instance-{}-{}.log",
            std::process::id(),
            NEXT_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env("BOOTSTRAP", bootstrap)
            .env("APP_ID", app_id)
            .env("STATE_DIR", state_dir)
            .env("THREADS", threads.to_string())
            .env("STOP_FILE", &stop_file)
            .env(
                "STORE",
                if store == StoreType::Persistent {
                    "persistent"
                } else {
                    "memory"
                },
            )
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Instance {
            child,
            stop_file,
            log,
        }
    }

    /// Asks the instance to close cleanly (commit, leave the group) and waits for it.
    pub fn stop(mut self) {
        std::fs::write(&self.stop_file, b"stop").unwrap();
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "instance failed: {status}; log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// SIGKILL: no commit, no leave.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of a child instance: runs the count app ("words" → "counts") until the stop file
/// appears. Does nothing unless [`CHILD_ENV`] is set (the test harness runs it as a no-op).
pub fn child_instance() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let env = |k: &str| std::env::var(k).unwrap();
    let backend = KafkaBackend::connect(riffle_kafka::KafkaConfig::new(env("BOOTSTRAP"))).unwrap();
    let state_dir = std::path::PathBuf::from(env("STATE_DIR"));
    let mut config = config(&env("APP_ID"), &state_dir, env("THREADS").parse().unwrap());
    if let Ok(guarantee) = std::env::var("GUARANTEE") {
        config.set("processing_guarantee", &guarantee).unwrap();
    }
    if let Ok(ms) = std::env::var("COMMIT_MS") {
        config.commit_interval = Some(Duration::from_millis(ms.parse().unwrap()));
    }
    let store = match env("STORE").as_str() {
        "persistent" => StoreType::Persistent,
        _ => StoreType::InMemory,
    };
    let mut app = riffle::StreamsApp::new(
        count_topology("words", "counts", store),
        config,
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    let stop_file = std::path::PathBuf::from(env("STOP_FILE"));
    while !stop_file.exists() && !app.is_shutting_down() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let summary = app.close().unwrap();
    println!("instance processed {} records", summary.records_processed);
}

/// A broker whose streams groups notice a dead member within seconds (session timeout 6 s)
/// and ask for task offsets every 2 s, so failover scenarios run quickly.
pub fn fast_broker(standby_replicas: u32) -> riffle_kafka_testkit::KafkaBroker {
    riffle_kafka_testkit::KafkaBroker::builder()
        .config("group.streams.min.session.timeout.ms", "3000")
        .config("group.streams.session.timeout.ms", "6000")
        .config("group.streams.min.heartbeat.interval.ms", "500")
        .config("group.streams.heartbeat.interval.ms", "1000")
        .config("group.streams.min.task.offset.interval.ms", "1000")
        .config("group.streams.task.offset.interval.ms", "2000")
        .config(
            "group.streams.num.standby.replicas",
            &standby_replicas.to_string(),
        )
        .start()
        .unwrap()
}

/// Active tasks per member (by process id) once the group is Stable and every member owns
/// its target assignment.
pub fn stable_assignment(
    backend: &KafkaBackend,
    group: &str,
) -> Option<Vec<(String, Vec<riffle_kafka::TaskIds>)>> {
    let g = backend.describe_streams_group(group).ok()?;
    let settled = g.state == "Stable"
        && g.members
            .iter()
            .all(|m| m.assignment == m.target_assignment && m.member_epoch == g.assignment_epoch);
    settled.then(|| {
        g.members
            .iter()
            .map(|m| (m.process_id.clone(), m.assignment.active.clone()))
            .collect()
    })
}

/// How many active tasks a described member list holds.
pub fn task_count(tasks: &[riffle_kafka::TaskIds]) -> usize {
    tasks.iter().map(|t| t.partitions.len()).sum()
}

/// Logs to stderr as `RUST_LOG` says (default: warnings).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Records with timestamps of now, which the broker's time retention keeps.
pub fn produce_words_now(
    backend: &KafkaBackend,
    topic: &str,
    partitions: u32,
    records: u64,
    keys: u64,
    seed: u64,
) -> HashMap<String, i64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    produce_words_at(backend, topic, partitions, records, keys, seed, now)
}

/// Reads "counts" with Kafka's console consumer, read_committed, and checks every key's
/// counts: strictly rising in the order written, the last equal to `expected`. Returns how
/// many records it read.
pub fn check_read_committed_by_kafka(
    broker: &riffle_kafka_testkit::KafkaBroker,
    committed: &KafkaBackend,
    expected: &HashMap<String, i64>,
    what: &str,
) -> usize {
    // riffle's own read_committed fetch counts the records, so the console consumer can stop
    // at that many instead of waiting out its timeout.
    let mut records = 0;
    for_each_batch(committed, "counts", |batch, position| {
        records += batch
            .records()
            .filter(|r| r.as_ref().unwrap().offset() >= position)
            .count();
    });
    let lines = broker
        .console_consume_with(
            "counts",
            records,
            &[
                ("print.key", "true"),
                ("print.partition", "true"),
                (
                    "key.deserializer",
                    "org.apache.kafka.common.serialization.StringDeserializer",
                ),
                (
                    "value.deserializer",
                    "org.apache.kafka.common.serialization.LongDeserializer",
                ),
            ],
            &["--isolation-level", "read_committed"],
        )
        .unwrap();
    assert_eq!(lines.len(), records, "{what}: the console consumer's lines");
    let mut last: HashMap<String, i64> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        // "Partition:N<TAB>key<TAB>value"
        let mut fields = line.split('\t');
        let (_, key, value) = (
            fields.next().unwrap(),
            fields.next().unwrap(),
            fields.next().unwrap(),
        );
        let count: i64 = value.trim().parse().unwrap();
        if let Some(&before) = last.get(key) {
            assert!(
                count > before,
                "{what}: key {key} counted {before} then {count} (line {i} of {}): an update emitted twice",
                lines.len()
            );
        }
        last.insert(key.to_owned(), count);
    }
    assert_eq!(
        last.len(),
        expected.len(),
        "{what}: keys read back by Kafka's console consumer"
    );
    for (key, n) in expected {
        assert_eq!(last.get(key), Some(n), "{what}: the count of {key}");
    }
    records
}

/// Records of "counts" a read_uncommitted reader sees (aborted transactions included).
pub fn all_records(backend: &KafkaBackend) -> usize {
    let mut records = 0;
    for_each_batch(backend, "counts", |batch, position| {
        records += batch
            .records()
            .filter(|r| r.as_ref().unwrap().offset() >= position)
            .count();
    });
    records
}
