//! The groupByKey-count sample's output equals a plain HashMap count of its input, for random
//! inputs and several partition and thread counts; without a cache, every record updates its
//! count.

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

/// A count and a tumbling-window count of `in` (8-byte values, ignored) to `out` and
/// `windowed-out`.
fn counts_topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::i64()))
        .group_by_key();
    grouped
        .count()
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let size = Duration::from_millis(10);
    grouped
        .windowed_by(riffle::TimeWindows::of_size_and_grace(
            size,
            Duration::from_secs(1),
        ))
        .count()
        .to_stream()
        .to(
            "windowed-out",
            Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
        );
    builder.build().expect("topology")
}

/// Every record of `topic` in offset order, per partition: key bytes, 8-byte value, timestamp.
fn records_of(log: &Log, topic: &str) -> Vec<(Vec<u8>, i64, i64)> {
    let mut out = Vec::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        let tp = riffle::log::TopicPartition::new(topic, p);
        for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
            for r in batch.records() {
                let r = r.expect("record");
                let value = r.value().expect("value");
                out.push((
                    r.key().expect("key").to_vec(),
                    i64::from_be_bytes(value[..].try_into().expect("8 bytes")),
                    r.timestamp(),
                ));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// With `statestore_cache_max_bytes = 0` (caching disabled, as in Kafka Streams) every
    /// record updates its count and its window's count at once: per key (and window), the
    /// outputs are 1, 2, … n, each with the largest timestamp of the records so far, over 1 to
    /// 3 partitions and whatever the commit interval.
    #[test]
    fn without_a_cache_every_record_updates_its_counts(
        records in prop::collection::vec((0u32..6, 0i64..60), 1..200),
        partitions in 1u32..4,
        short_commits in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let input: Vec<(String, Option<i64>, i64)> =
            records.iter().map(|(k, ts)| (format!("k{k}"), Some(0), *ts)).collect();
        common::produce_longs(&log, "in", partitions, &input);
        let mut config = config("uncached-counts", &dir.path().join("state"), 2);
        config.statestore_cache_max_bytes = 0;
        if !short_commits {
            config.commit_interval = Some(Duration::from_secs(30));
        }
        let app = StreamsApp::new(counts_topology(), config, EmbeddedBackend::new(log.clone()).shared())
            .expect("app");
        app.run_until_idle().expect("run");
        // The model: one update per record, per key and per window, in input order.
        let mut counts: std::collections::HashMap<String, (i64, i64)> = Default::default();
        let mut windows: std::collections::HashMap<(String, i64), (i64, i64)> = Default::default();
        let mut want: std::collections::BTreeMap<Vec<u8>, Vec<(i64, i64)>> = Default::default();
        let mut want_windowed: std::collections::BTreeMap<Vec<u8>, Vec<(i64, i64)>> = Default::default();
        for (k, _, ts) in &input {
            let (n, t) = counts.entry(k.clone()).or_insert((0, *ts));
            *n += 1;
            *t = (*t).max(*ts);
            want.entry(k.as_bytes().to_vec()).or_default().push((*n, *t));
            let start = ts - ts % 10;
            let (n, t) = windows.entry((k.clone(), start)).or_insert((0, *ts));
            *n += 1;
            *t = (*t).max(*ts);
            let mut wkey = k.as_bytes().to_vec();
            wkey.extend(start.to_be_bytes());
            want_windowed.entry(wkey).or_default().push((*n, *t));
        }
        let per_key = |topic: &str| {
            let mut got: std::collections::BTreeMap<Vec<u8>, Vec<(i64, i64)>> = Default::default();
            for (k, v, ts) in records_of(&log, topic) {
                got.entry(k).or_default().push((v, ts));
            }
            got
        };
        prop_assert_eq!(per_key("out"), want);
        prop_assert_eq!(per_key("windowed-out"), want_windowed);
    }
}
