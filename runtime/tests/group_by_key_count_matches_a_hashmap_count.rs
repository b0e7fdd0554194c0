//! The groupByKey-count sample's output equals a plain HashMap count of its input, for random
//! inputs and several partition and thread counts.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use riffle::backend::Backend;
use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
};

fn count_topology(input: &str, output: &str) -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream(input, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to(output, Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().expect("topology")
}

fn config(app: &str, state: &std::path::Path, threads: usize) -> StreamsConfig {
    let mut config = StreamsConfig::new(app);
    config.state_dir = state.to_owned();
    config.num_stream_threads = threads;
    config.poll = Duration::from_millis(5);
    config.commit_interval = Some(Duration::from_millis(50));
    config
}

fn records_strategy() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((0u32..40, "[a-z]{0,8}"), 0..1500).prop_map(|v| {
        v.into_iter()
            .map(|(k, val)| (format!("k{k}"), val))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn counts_equal_the_model(records in records_strategy(), partitions in 1u32..6, threads in 1usize..4) {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        common::produce(&log, "in", partitions, &records);
        let app = StreamsApp::new(count_topology("in", "out"), config("count", &dir.path().join("state"), threads), EmbeddedBackend::new(log.clone()).shared()).expect("app");
        let summary = app.run_until_idle().expect("run");
        prop_assert_eq!(summary.records_processed, records.len() as u64);
        let expected = common::count_model(records.iter().map(|(k, _)| k.as_str()));
        prop_assert_eq!(common::latest_longs(&log, "out"), expected);
    }
}

#[test]
fn group_by_a_new_key_goes_through_a_repartition_topic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let records: Vec<(String, String)> = (0..3000)
        .map(|i| (format!("user-{}", i % 97), format!("page-{}", i % 13)))
        .collect();
    common::produce(&log, "views", 3, &records);
    let builder = StreamsBuilder::new();
    builder
        .stream("views", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by(
            |_user, page| page.clone(),
            Grouped::with(Serdes::string(), Serdes::string()).named("by-page"),
        )
        .count()
        .to_stream()
        .to(
            "page-counts",
            Produced::with(Serdes::string(), Serdes::i64()),
        );
    let topology = builder.build().expect("topology");
    assert_eq!(topology.subtopology_count(), 2);
    let backend = EmbeddedBackend::new(log.clone());
    let app = StreamsApp::new(
        topology,
        config("pages", &dir.path().join("state"), 2),
        backend.clone().shared(),
    )
    .expect("app");
    app.run_until_idle().expect("run");
    assert_eq!(
        backend
            .partitions("pages-by-page-repartition")
            .expect("partitions"),
        Some(3)
    );
    let expected = common::count_model(records.iter().map(|(_, page)| page.as_str()));
    assert_eq!(common::latest_longs(&log, "page-counts"), expected);
}

#[test]
fn a_value_that_does_not_decode_stops_the_app_with_topic_partition_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    common::produce(
        &log,
        "nums",
        1,
        &[("a".into(), "12345678".into()), ("b".into(), "bad".into())],
    );
    let builder = StreamsBuilder::new();
    builder
        .stream("nums", Consumed::with(Serdes::string(), Serdes::i64()))
        .to("copy", Produced::with(Serdes::string(), Serdes::i64()));
    let app = StreamsApp::new(
        builder.build().expect("topology"),
        config("bad", &dir.path().join("state"), 1),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    let err = app
        .run_until_idle()
        .expect_err("the second record cannot decode");
    let message = err.to_string();
    assert!(message.contains("nums-0 offset 1"), "{message}");
    assert!(message.contains("value"), "{message}");
}

#[test]
fn a_missing_source_topic_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::in_memory();
    let err = StreamsApp::new(
        count_topology("nope", "out"),
        config("missing", dir.path(), 1),
        EmbeddedBackend::new(log).shared(),
    )
    .expect_err("missing topic");
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn the_topology_description_is_deterministic() {
    let a = count_topology("in", "out").describe().to_string();
    let b = count_topology("in", "out").describe().to_string();
    assert_eq!(a, b);
    assert!(a.contains("Sub-topology: 0"), "{a}");
    assert!(
        a.contains("KSTREAM-AGGREGATE-STATE-STORE-0000000001"),
        "{a}"
    );
}

#[test]
fn a_partition_with_more_records_than_one_loop_takes_is_drained() {
    // One task gets 20,000 records: many loop iterations, with fetched records left over
    // between them. Regression: leftovers were once stranded when no new data arrived.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let records: Vec<(String, String)> = (0..20_000)
        .map(|i| (format!("k{}", i % 101), String::new()))
        .collect();
    common::produce(&log, "big", 1, &records);
    let app = StreamsApp::new(
        count_topology("big", "out"),
        config("big", &dir.path().join("state"), 1),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    assert_eq!(app.run_until_idle().expect("run").records_processed, 20_000);
    assert_eq!(
        common::latest_longs(&log, "out"),
        common::count_model(records.iter().map(|(k, _)| k.as_str()))
    );
}

/// A stream thread stops a processing pass once its caches hold `statestore_cache_max_bytes`
/// and commits before it processes its other busy tasks, taking them up where it stopped:
/// with a one-byte cache every task's records are committed apart, and every record is still
/// counted once.
#[test]
fn a_full_cache_commits_before_the_other_busy_tasks_are_processed() {
    full_cache_run(1);
}

/// With no cache at all a pass still processes one task before it stops for a commit.
#[test]
fn a_thread_without_a_cache_still_makes_progress() {
    full_cache_run(0);
}

fn full_cache_run(cache_max_bytes: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let partitions = 64;
    let records: Vec<(String, String)> = (0..2_000)
        .map(|i| (format!("key-{}", i % 300), String::new()))
        .collect();
    common::produce(&log, "in", partitions, &records);
    let mut config = config("full-cache", &dir.path().join("state"), 1);
    config.commit_interval = Some(Duration::from_secs(600));
    config.statestore_cache_max_bytes = cache_max_bytes;
    let mut app = StreamsApp::new(
        count_topology("in", "out"),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.start().expect("start");
    while !app.is_idle() {
        assert!(!app.is_shutting_down(), "the app stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let commits: f64 = app
        .metrics()
        .iter()
        .filter(|m| m.group == "stream-thread-metrics" && m.name == "commit-total")
        .map(|m| m.value)
        .sum();
    let busy_tasks = records
        .iter()
        .map(|(k, _)| riffle::log::partition_for_key(k.as_bytes(), partitions))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(
        commits >= busy_tasks as f64,
        "{commits} commits for {busy_tasks} tasks with records: a pass went past a full cache"
    );
    let summary = app.close().expect("close");
    assert_eq!(summary.records_processed, records.len() as u64);
    let expected = common::count_model(records.iter().map(|(k, _)| k.as_str()));
    assert_eq!(common::latest_longs(&log, "out"), expected);
}
