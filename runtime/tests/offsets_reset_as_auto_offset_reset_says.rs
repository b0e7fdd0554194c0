//! `auto_offset_reset` on the embedded log: where a source partition without a committed offset,
//! or with one below its start (records deleted), starts. `earliest` (the default) reads
//! everything, `latest` only what is written after the task started, `none` stops the
//! application with an error naming the partition. A committed offset past the end is lost data
//! on the embedded log: the application stops whatever the setting. Checked against the records written, by key: each record has its own
//! key, so the counted keys say exactly which offsets were read.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use riffle::log::{Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Error, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
    config::AutoOffsetReset,
};

mod common;

const PARTITIONS: u32 = 2;

/// `stream(in).groupByKey().count().toStream().to(out)`.
fn topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().expect("topology")
}

fn app(log: &Log, state: &std::path::Path, reset: AutoOffsetReset) -> StreamsApp {
    let mut config = StreamsConfig::new("resets");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    config.commit_interval = Some(Duration::from_millis(20));
    config.auto_offset_reset = reset;
    StreamsApp::new(
        topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app")
}

/// Writes one record per key; returns the keys by partition in offset order.
fn write(log: &Log, keys: impl IntoIterator<Item = String>) -> Vec<Vec<String>> {
    let records: Vec<(String, String)> = keys.into_iter().map(|k| (k, "v".into())).collect();
    common::produce(log, "in", PARTITIONS, &records);
    let mut by_partition = vec![Vec::new(); PARTITIONS as usize];
    for (k, _) in records {
        by_partition[partition_for_key(k.as_bytes(), PARTITIONS) as usize].push(k);
    }
    by_partition
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn counted(log: &Log) -> HashSet<String> {
    let counts = common::latest_longs(log, "out");
    assert!(
        counts.values().all(|&n| n == 1),
        "a key counted twice: {counts:?}"
    );
    counts.into_keys().collect()
}

/// Starts `app` and waits until it stops on its own; returns its error.
fn run_to_failure(mut app: StreamsApp) -> Error {
    app.start().expect("start");
    wait_until("the application to stop", || app.is_shutting_down());
    app.close().expect_err("it stops on an error")
}

#[test]
fn earliest_reads_everything_written_before_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    write(&log, (0..300).map(|i| format!("before-{i}")));
    common::run_until_idle(app(
        &log,
        &dir.path().join("state"),
        AutoOffsetReset::Earliest,
    ));
    let expected: HashSet<String> = (0..300).map(|i| format!("before-{i}")).collect();
    assert_eq!(counted(&log), expected);
}

/// Under latest, what was written before the tasks started is never read: per partition the
/// counted records are exactly those from some offset at or after the old end to the new end.
#[test]
fn latest_reads_only_what_is_written_after_the_tasks_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let mut partitions = write(&log, (0..300).map(|i| format!("before-{i}")));
    let before: Vec<usize> = partitions.iter().map(Vec::len).collect();
    let mut app = app(&log, &dir.path().join("state"), AutoOffsetReset::Latest);
    app.start().expect("start");
    // Write until the application reads some; when its tasks started is not known outside.
    let mut next = 0;
    wait_until("the first records read", || {
        for (p, keys) in write(&log, (next..next + 10).map(|i| format!("after-{i}")))
            .into_iter()
            .enumerate()
        {
            partitions[p].extend(keys);
        }
        next += 10;
        std::thread::sleep(Duration::from_millis(20));
        !common::latest_longs(&log, "out").is_empty()
    });
    for (p, keys) in write(&log, (next..next + 200).map(|i| format!("after-{i}")))
        .into_iter()
        .enumerate()
    {
        partitions[p].extend(keys);
    }
    wait_until("the application to catch up", || app.is_idle());
    app.close().expect("close");
    let counted = counted(&log);
    for (p, keys) in partitions.iter().enumerate() {
        let first = keys
            .iter()
            .position(|k| counted.contains(k))
            .unwrap_or_else(|| panic!("partition {p}: nothing read"));
        assert!(
            first >= before[p],
            "partition {p}: read offset {first}, written before the start (end was {})",
            before[p]
        );
        let missed: Vec<&String> = keys[first..]
            .iter()
            .filter(|k| !counted.contains(*k))
            .collect();
        assert!(
            missed.is_empty(),
            "partition {p}: skipped after reading from offset {first}: {missed:?}"
        );
    }
    let read: usize = partitions
        .iter()
        .map(|keys| keys.iter().filter(|k| counted.contains(*k)).count())
        .sum();
    assert_eq!(read, counted.len(), "counted keys never written");
}

/// Under none, a partition without a committed offset stops the application, naming it; once
/// the offsets are committed, it reads from them.
#[test]
fn none_without_a_committed_offset_stops_the_application_naming_the_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let partitions = write(&log, (0..100).map(|i| format!("k-{i}")));
    let state = dir.path().join("state");
    let err = run_to_failure(app(&log, &state, AutoOffsetReset::None));
    let Error::NoOffsetForPartition {
        topic, partition, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(topic, "in");
    assert!(*partition < PARTITIONS);
    let text = err.to_string();
    assert!(
        text.contains(&format!("in-{partition}")) && text.contains("no committed offset"),
        "{text}"
    );

    let offsets: Vec<(TopicPartition, u64)> = (0..PARTITIONS)
        .map(|p| (TopicPartition::new("in", p), 5))
        .collect();
    log.commit_offsets("resets", &offsets).expect("commit");
    common::run_until_idle(app(&log, &state, AutoOffsetReset::None));
    let expected: HashSet<String> = partitions
        .iter()
        .flat_map(|keys| keys[5..].iter().cloned())
        .collect();
    assert_eq!(counted(&log), expected, "read from the committed offsets");
}

/// A committed offset past the partition's end: on the embedded log, which never loses records
/// below a committed offset (a commit fsyncs the partitions first, and deleting a topic removes
/// its groups' offsets), that is lost data or a bad commit, not a partition that legitimately
/// became shorter. Whatever `auto_offset_reset` says, the application stops naming the group,
/// the partition, the committed offset and the end — it never rereads the partition silently.
#[test]
fn a_committed_offset_past_the_end_stops_the_application_whatever_auto_offset_reset_says() {
    for reset in [
        AutoOffsetReset::Earliest,
        AutoOffsetReset::Latest,
        AutoOffsetReset::None,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let partitions = write(&log, (0..100).map(|i| format!("k-{i}")));
        let ends: Vec<u64> = partitions.iter().map(|k| k.len() as u64).collect();
        log.commit_offsets(
            "resets",
            &[
                (TopicPartition::new("in", 0), ends[0] + 1000),
                (TopicPartition::new("in", 1), 3),
            ],
        )
        .expect("commit");
        let state = dir.path().join("state");
        let err = run_to_failure(app(&log, &state, reset));
        let text = err.to_string();
        assert!(
            matches!(err, Error::OffsetPastEnd { partition: 0, .. })
                && text.contains(&format!(
                    "group \"resets\"'s position in in-0 is offset {}, past the partition's end {}",
                    ends[0] + 1000,
                    ends[0]
                ))
                && text.contains("auto_offset_reset does not apply"),
            "{reset:?}: {text}"
        );
    }
}

/// Records deleted under a committed offset (retention, or `delete_records`): the committed
/// offset is below the partition's start offset, and `auto_offset_reset` decides — earliest
/// reads from the new start, latest from the end, none stops naming the range. Under earliest
/// a partition without a committed offset starts at the start offset.
#[test]
fn records_deleted_below_the_committed_offset_reset_from_the_new_start() {
    for reset in [
        AutoOffsetReset::Earliest,
        AutoOffsetReset::Latest,
        AutoOffsetReset::None,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let partitions = write(&log, (0..100).map(|i| format!("k-{i}")));
        let ends: Vec<u64> = partitions.iter().map(|k| k.len() as u64).collect();
        let mut commits = vec![(TopicPartition::new("in", 0), 3)];
        if reset != AutoOffsetReset::Earliest {
            // Under earliest partition 1 has no committed offset: it starts at the start.
            commits.push((TopicPartition::new("in", 1), 12));
        }
        log.commit_offsets("resets", &commits).expect("commit");
        for p in 0..PARTITIONS {
            log.delete_records(&TopicPartition::new("in", p), 10)
                .expect("delete records");
        }
        let state = dir.path().join("state");
        let from_ten = |p: usize| partitions[p][10..].iter().cloned();
        match reset {
            AutoOffsetReset::None => {
                let err = run_to_failure(app(&log, &state, reset));
                let text = err.to_string();
                assert!(
                    text.contains(&format!(
                        "in-0, and auto_offset_reset is none: offset 3 is out of its range 10..{}",
                        ends[0]
                    )),
                    "{text}"
                );
            }
            AutoOffsetReset::Earliest => {
                common::run_until_idle(app(&log, &state, reset));
                let expected: HashSet<String> = from_ten(0).chain(from_ten(1)).collect();
                assert_eq!(counted(&log), expected, "both partitions from offset 10");
            }
            _ => {
                common::run_until_idle(app(&log, &state, reset));
                // Partition 0 from its end; partition 1 from its committed offset.
                let expected: HashSet<String> = partitions[1][12..].iter().cloned().collect();
                assert_eq!(counted(&log), expected);
                let committed = log
                    .committed_offset("resets", &TopicPartition::new("in", 0))
                    .expect("offset");
                assert_eq!(committed, Some(ends[0]), "the reset offset is committed");
            }
        }
    }
}
