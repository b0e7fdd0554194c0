//! Repartition topics are purged up to the application's committed offsets after commits (Kafka
//! Streams' `deleteRecords` on `repartition.purge.interval.ms`), and internal topics are created
//! with Kafka Streams' topic configs; the counts still equal a HashMap count, across a restart.

mod common;

use std::time::Duration;

use riffle::log::{Log, LogOptions, TopicConfig, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
};

const REPARTITION: &str = "pages-by-page-repartition";
const CHANGELOG: &str = "pages-KSTREAM-AGGREGATE-STATE-STORE-0000000002-changelog";

fn topology() -> riffle::Topology {
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
    builder.build().expect("topology")
}

fn config(state: &std::path::Path, purge: Duration) -> StreamsConfig {
    let mut config = StreamsConfig::new("pages");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    config.commit_interval = Some(Duration::from_millis(20));
    config.repartition_purge_interval = purge;
    config
}

fn views(from: usize, n: usize) -> Vec<(String, String)> {
    (from..from + n)
        .map(|i| (format!("user-{}", i % 97), format!("page-{}", i % 13)))
        .collect()
}

fn run(log: &Log, state: &std::path::Path, purge: Duration) {
    let app = StreamsApp::new(
        topology(),
        config(state, purge),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.run_until_idle().expect("run");
}

/// Per repartition partition: (start offset, committed offset, end offset).
fn repartition_offsets(log: &Log) -> Vec<(u64, u64, u64)> {
    (0..3)
        .map(|p| {
            let tp = TopicPartition::new(REPARTITION, p);
            (
                log.start_offset(&tp).expect("start"),
                log.committed_offset("pages", &tp)
                    .expect("committed")
                    .expect("a committed offset"),
                log.end_offset(&tp).expect("end"),
            )
        })
        .collect()
}

#[test]
fn a_repartition_topic_is_purged_up_to_the_committed_offsets_and_counts_stay_right() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut records = views(0, 3000);
    common::produce(&log, "views", 3, &records);
    run(&log, &state, Duration::ZERO);
    for (p, (start, committed, end)) in repartition_offsets(&log).into_iter().enumerate() {
        assert_eq!(committed, end, "partition {p} was read to its end");
        assert_eq!(
            start, committed,
            "partition {p} is purged up to its committed offset"
        );
        assert!(start > 0);
    }
    // Kafka Streams' configs for its internal topics.
    let repartition = log
        .topic_config(REPARTITION)
        .expect("config")
        .expect("topic");
    assert_eq!(
        repartition,
        TopicConfig::from_pairs([
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("segment.bytes", "52428800"),
        ])
        .expect("config")
    );
    let changelog = log.topic_config(CHANGELOG).expect("config").expect("topic");
    assert!(changelog.cleanup_policy.compacts() && !changelog.cleanup_policy.deletes());
    // A restart reads on from the committed offsets, which are the start offsets now.
    let more = views(3000, 1000);
    common::produce(&log, "views", 3, &more);
    records.extend(more);
    run(&log, &state, Duration::ZERO);
    let expected = common::count_model(records.iter().map(|(_, page)| page.as_str()));
    assert_eq!(common::latest_longs(&log, "page-counts"), expected);
    for (start, committed, end) in repartition_offsets(&log) {
        assert_eq!((start, committed), (end, end));
    }
    // The source topic is not the application's to purge.
    assert_eq!(
        log.start_offset(&TopicPartition::new("views", 0))
            .expect("start"),
        0
    );
}

#[test]
fn nothing_is_purged_before_the_purge_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let records = views(0, 2000);
    common::produce(&log, "views", 3, &records);
    run(&log, &dir.path().join("state"), Duration::from_secs(3600));
    for (start, committed, end) in repartition_offsets(&log) {
        assert_eq!((start, committed), (0, end));
    }
    let expected = common::count_model(records.iter().map(|(_, page)| page.as_str()));
    assert_eq!(common::latest_longs(&log, "page-counts"), expected);
}
