//! Under exactly_once a commit's outputs, changelog writes and input offsets are one transaction
//! of the embedded log: a thread that dies between commits leaves nothing of its uncommitted
//! work behind, and the counts come out exact.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use riffle::log::{Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, ProcessingGuarantee, Produced, Serdes, StreamsApp,
    StreamsBuilder, StreamsConfig, dsl::StoreType, errors::StreamThreadExceptionResponse,
};

fn topology(panic_at: Option<u64>, store: StoreType) -> riffle::Topology {
    let seen = Arc::new(AtomicU64::new(0));
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .peek(move |_, _| {
            if Some(seen.fetch_add(1, Ordering::Relaxed)) == panic_at {
                panic!("injected failure between commits");
            }
        })
        .map(|k, v| (format!("{k}!"), v))
        .group_by_key()
        .count_with(Materialized::named("counts").with_store_type(store))
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().expect("topology")
}

fn config(state: &std::path::Path) -> StreamsConfig {
    let mut config = StreamsConfig::new("eos");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    config.processing_guarantee = ProcessingGuarantee::ExactlyOnce;
    config.commit_interval = Some(Duration::from_millis(10));
    config
}

fn input() -> Vec<(String, String)> {
    (0..12_000)
        .map(|i| (format!("k{}", (i * 17) % 211), String::new()))
        .collect()
}

#[test]
fn a_replaced_thread_under_exactly_once_counts_every_record_once() {
    for store in [StoreType::InMemory, StoreType::Persistent] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let records = input();
        common::produce(&log, "in", 3, &records);
        let mut app = StreamsApp::new(
            topology(Some(7_000), store),
            config(&dir.path().join("state")),
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .expect("app");
        app.set_uncaught_exception_handler(|_| StreamThreadExceptionResponse::ReplaceThread)
            .expect("handler");
        app.start().expect("start");
        while !app.is_idle() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(app.threads_replaced(), 1);
        app.close().expect("close");
        let mapped: Vec<String> = records.iter().map(|(k, _)| format!("{k}!")).collect();
        let expected = common::count_model(mapped.iter().map(String::as_str));
        assert_eq!(common::latest_longs(&log, "out"), expected, "{store:?}");
        // Every changelog record reflects a committed count: replaying the changelog gives the
        // same counts as the output.
        let mut changelog = std::collections::HashMap::new();
        for p in 0..3 {
            let tp = TopicPartition::new("eos-counts-changelog", p);
            for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
                for r in batch.records() {
                    let r = r.expect("record");
                    let v: [u8; 8] = r.value().expect("value")[..].try_into().expect("8 bytes");
                    changelog.insert(
                        String::from_utf8(r.key().expect("key").to_vec()).expect("utf8"),
                        i64::from_be_bytes(v),
                    );
                }
            }
        }
        assert_eq!(changelog, expected, "{store:?}");
    }
}
