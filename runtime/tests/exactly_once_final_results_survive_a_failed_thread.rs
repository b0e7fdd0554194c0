//! Under exactly_once, final windowed results — emitted on window close, and through a
//! changelogged suppression buffer — are neither lost nor repeated when a stream thread dies
//! between commits and is replaced: each closed window comes out exactly once, with the count a
//! brute-force replay of Kafka's window rules gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod window_model;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, ProcessingGuarantee, Produced, Serdes, StreamsApp,
    StreamsBuilder, StreamsConfig, TimeWindows, Windowed, dsl::BufferConfig, dsl::StoreType,
    dsl::Suppressed, errors::StreamThreadExceptionResponse, window::EmitStrategy,
};
use window_model::{Kind, Spec};

const SIZE: i64 = 50;
const GRACE: i64 = 30;
const PARTITIONS: u32 = 3;

fn topology(panic_at: &'static [u64], store: StoreType) -> riffle::Topology {
    let seen = Arc::new(AtomicU64::new(0));
    let builder = StreamsBuilder::new();
    let windows = TimeWindows::of_size_and_grace(
        Duration::from_millis(SIZE as u64),
        Duration::from_millis(GRACE as u64),
    );
    let serde = || Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE as u64));
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .peek(move |_, _| {
            if panic_at.contains(&seen.fetch_add(1, Ordering::Relaxed)) {
                panic!("injected failure between commits");
            }
        })
        .group_by_key();
    grouped
        .windowed_by(windows)
        .emit_strategy(EmitStrategy::on_window_close())
        .count_with(Materialized::named("final").with_store_type(store))
        .to_stream()
        .to("final-out", Produced::with(serde(), Serdes::i64()));
    grouped
        .windowed_by(windows)
        .count_with(Materialized::named("updates").with_store_type(store))
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
        .to_stream()
        .to("suppressed-out", Produced::with(serde(), Serdes::i64()));
    builder.build().unwrap()
}

/// 12,000 records over 40 keys, timestamps rising 1 ms per record with every 11th 45 ms back
/// (some beyond grace).
fn input() -> Vec<(String, i64)> {
    (0..12_000i64)
        .map(|i| {
            let ts = if i % 11 == 5 { (i - 45).max(0) } else { i };
            (format!("k{}", (i * 17) % 40), ts)
        })
        .collect()
}

fn emitted(log: &Log, topic: &str) -> BTreeMap<(String, i64, i64), Vec<i64>> {
    let serde = Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE as u64));
    let mut out: BTreeMap<_, Vec<i64>> = BTreeMap::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new(topic, p), 0, usize::MAX)
            .unwrap()
        {
            for r in batch.records() {
                let r = r.unwrap();
                let k: Windowed<String> = serde.deserialize(r.key().map(|b| &b[..])).unwrap();
                let v = i64::from_be_bytes(r.value().unwrap()[..].try_into().unwrap());
                out.entry((k.key, k.window.start, k.window.end))
                    .or_default()
                    .push(v);
            }
        }
    }
    out
}

#[test]
fn final_results_come_out_exactly_once_across_replaced_threads() {
    static PANICS: [u64; 0] = [];
    for store in [StoreType::InMemory, StoreType::Persistent] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
        log.create_topic("in", PARTITIONS).unwrap();
        let records = input();
        let mut per_partition: BTreeMap<u32, Vec<(String, i64)>> = BTreeMap::new();
        for chunk in records.chunks(500) {
            let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
                .map(|_| BatchBuilder::new(Compression::None))
                .collect();
            for (k, ts) in chunk {
                let p = partition_for_key(k.as_bytes(), PARTITIONS);
                builders[p as usize].push(*ts, Some(k.as_bytes()), Some(b""));
                per_partition.entry(p).or_default().push((k.clone(), *ts));
            }
            for (p, b) in builders.iter_mut().enumerate() {
                if !b.is_empty() {
                    log.append(&TopicPartition::new("in", p as u32), b).unwrap();
                }
            }
        }
        let mut config = StreamsConfig::new("eos-windows");
        config.state_dir = dir.path().join("state");
        config.num_stream_threads = 2;
        config.poll = Duration::from_millis(5);
        config.processing_guarantee = ProcessingGuarantee::ExactlyOnce;
        config.commit_interval = Some(Duration::from_millis(10));
        let mut app = StreamsApp::new(
            topology(&PANICS, store),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .unwrap();
        app.set_uncaught_exception_handler(|_| StreamThreadExceptionResponse::ReplaceThread)
            .unwrap();
        app.start().unwrap();
        while !app.is_idle() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(app.threads_replaced(), 0, "{store:?}");
        app.close().unwrap();

        let spec = Spec {
            kind: Kind::Time {
                size: SIZE,
                advance: SIZE,
            },
            grace: GRACE,
        };
        let mut expected: BTreeMap<(String, i64, i64), Vec<i64>> = BTreeMap::new();
        for recs in per_partition.values() {
            let outcome = spec.run(recs);
            for (w, v) in spec.closed(&outcome) {
                expected.insert(w, vec![v]);
            }
        }
        assert!(expected.len() > 1_000, "{} windows", expected.len());
        assert_eq!(
            emitted(&log, "final-out"),
            expected,
            "emit on close, {store:?}"
        );
        let suppressed = emitted(&log, "suppressed-out");
        let differ: Vec<_> = expected
            .iter()
            .filter(|(w, v)| suppressed.get(*w) != Some(v))
            .map(|(w, v)| (w.clone(), v.clone(), suppressed.get(w).cloned()))
            .chain(
                suppressed
                    .iter()
                    .filter(|(w, _)| !expected.contains_key(*w))
                    .map(|(w, v)| (w.clone(), Vec::new(), Some(v.clone()))),
            )
            .collect();
        assert!(
            differ.is_empty(),
            "suppress(until_window_closes), {store:?}: (window, expected, got) {differ:?}"
        );
    }
}
