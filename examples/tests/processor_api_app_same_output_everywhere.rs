//! The "done" scenario of the processor API: one application written only against it — the
//! de-duplicating processor of `riffle_examples::dedup`, with a persistent store and a
//! wall-clock punctuator — gives the same output in the topology test driver, on the embedded
//! log (real stream threads, files) and on a real Kafka 4.4 broker, and that output is the
//! brute-force model's. Then headers from Kafka's console producer go through a riffle
//! application on Kafka and come out of Kafka's console consumer unchanged.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::backend::{Backend, TopicKind};
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
    TopologyTestDriver,
};
use riffle_examples::dedup;
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

type Rec = (String, String, i64);

const TTL: Duration = Duration::from_millis(100);
const EXPIRE_EVERY: Duration = Duration::from_millis(5);
const PARTITIONS: u32 = 3;

/// Records over 37 keys, timestamps rising by 0–3 ms: keys come back within and after the TTL.
fn input() -> Vec<Rec> {
    let mut rng = StdRng::seed_from_u64(0x2545_f491);
    let mut ts = 0;
    (0..4_000)
        .map(|i| {
            ts += rng.random_range(0..4);
            (format!("k{}", rng.random_range(0..37)), format!("v{i}"), ts)
        })
        .collect()
}

fn config(app: &str, state: &std::path::Path) -> StreamsConfig {
    let mut config = StreamsConfig::new(app);
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.heartbeat_interval = Duration::from_millis(300);
    config.commit_interval = Some(Duration::from_millis(200));
    config.poll = Duration::from_millis(50);
    config
}

fn produce(backend: &dyn Backend, topic: &str, records: &[Rec]) {
    backend
        .create_topic(topic, PARTITIONS, TopicKind::User)
        .unwrap();
    let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (k, v, ts) in records {
        let p = partition_for_key(k.as_bytes(), PARTITIONS) as usize;
        builders[p].push(*ts, Some(k.as_bytes()), Some(v.as_bytes()));
        if builders[p].len() >= 200 {
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
}

/// Every record of `topic`, sorted.
fn read_all(backend: &dyn Backend, topic: &str) -> Vec<Rec> {
    let text = |b: Option<&bytes::Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
    let mut out = Vec::new();
    for p in 0..backend.partitions(topic).unwrap().unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        let mut at = 0;
        loop {
            let batches = backend.fetch(&tp, at, 1 << 20).unwrap();
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for r in batch.records() {
                    let r = r.unwrap();
                    if r.offset() >= at {
                        at = r.offset() + 1;
                        out.push((text(r.key()), text(r.value()), r.timestamp()));
                    }
                }
            }
        }
    }
    out.sort();
    out
}

fn run_on(backend: std::sync::Arc<dyn Backend>, app: &str, expected: usize) -> Vec<Rec> {
    let state = tempfile::tempdir().unwrap();
    let topology = dedup::topology("events", "unique", TTL, EXPIRE_EVERY).unwrap();
    let mut app = StreamsApp::new(topology, config(app, state.path()), backend.clone()).unwrap();
    app.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = read_all(&*backend, "unique");
        if out.len() >= expected || Instant::now() > deadline {
            // A little longer: nothing more may come.
            std::thread::sleep(Duration::from_millis(500));
            app.close().unwrap();
            return read_all(&*backend, "unique");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_processor_api_app_gives_the_same_output_in_the_driver_on_the_embedded_log_and_on_kafka() {
    let input = input();
    let mut expected = dedup::model(&input, TTL);
    expected.sort();
    assert!(
        expected.len() > 200 && expected.len() < input.len() / 2,
        "the input exercises the dedup: {} of {}",
        expected.len(),
        input.len()
    );

    // The test driver: wall-clock punctuation every 50 records.
    let driver = TopologyTestDriver::with_wall_clock(
        dedup::topology("events", "unique", TTL, EXPIRE_EVERY).unwrap(),
        StreamsConfig::new("dedup-driver"),
        0,
    )
    .unwrap();
    let events = driver.create_input_topic("events", Serdes::string(), Serdes::string());
    let unique = driver.create_output_topic("unique", Serdes::string(), Serdes::string());
    for (i, (k, v, ts)) in input.iter().enumerate() {
        events.pipe_input_at(k.clone(), v.clone(), *ts).unwrap();
        if i % 50 == 0 {
            driver.advance_wall_clock_time(EXPIRE_EVERY).unwrap();
        }
    }
    let mut in_driver: Vec<Rec> = unique
        .read_records_to_list()
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.value, r.timestamp))
        .collect();
    in_driver.sort();
    assert_eq!(in_driver, expected, "test driver");
    let seen = driver
        .get_key_value_store::<String, i64>(dedup::STORE)
        .unwrap()
        .approximate_num_entries()
        .unwrap();
    assert!(seen <= 37, "the punctuator expired old keys: {seen} left");

    // The embedded log, on disk, two stream threads.
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let embedded = EmbeddedBackend::new(log).shared();
    produce(&*embedded, "events", &input);
    let on_log = run_on(embedded, "dedup-log", expected.len());
    assert_eq!(on_log, expected, "embedded log");

    // A real Kafka broker.
    let broker = KafkaBroker::start().unwrap();
    let kafka = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap()))
        .unwrap()
        .shared();
    produce(&*kafka, "events", &input);
    let on_kafka = run_on(kafka.clone(), "dedup-kafka", expected.len());
    assert_eq!(on_kafka, expected, "Kafka");

    // Headers: Kafka's console producer → a riffle application on Kafka → Kafka's console
    // consumer.
    let lines = [
        "trace:abc,span:1\tuser-1\tclick",
        "a:1,a:2\tuser-2\trepeated",
        "empty:,nil:NULL\tuser-3\tv",
        "NULL\tuser-4\tplain",
    ];
    let reader = [
        ("parse.key", "true"),
        ("parse.headers", "true"),
        ("null.marker", "NULL"),
    ];
    broker.create_topic("clicks", 1).unwrap();
    broker.console_produce("clicks", &lines, &reader).unwrap();
    let builder = StreamsBuilder::new();
    builder
        .stream("clicks", Consumed::with(Serdes::string(), Serdes::string()))
        .map_values(|v| v.to_uppercase())
        .to("loud", Produced::with(Serdes::string(), Serdes::string()));
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        builder.build().unwrap(),
        config("headers-app", state.path()),
        kafka.clone(),
    )
    .unwrap();
    app.start().unwrap();
    let printed = broker
        .console_consume(
            "loud",
            lines.len(),
            &[("print.key", "true"), ("print.headers", "true")],
        )
        .unwrap();
    app.close().unwrap();
    assert_eq!(
        printed,
        [
            "trace:abc,span:1\tuser-1\tCLICK",
            "a:1,a:2\tuser-2\tREPEATED",
            "empty:,nil:null\tuser-3\tV",
            "NO_HEADERS\tuser-4\tPLAIN",
        ]
    );
}
