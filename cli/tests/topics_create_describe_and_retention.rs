//! `riffle topics --create --config` stores Kafka's topic configs and refuses unknown ones by
//! name; `--describe` shows them and each partition's start and end offsets; after retention
//! deleted old segments, `consume --from-beginning` prints exactly the records from the start
//! offset on and the listing counts only those. A compacted topic's description shows how far
//! the cleaner got. Creating a topic that exists with another configuration is an error
//! naming both configurations, and changes nothing.

use std::collections::HashMap;
use std::process::{Command, Output};

use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

fn riffle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .expect("run riffle")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn configs_are_stored_shown_and_applied_by_retention() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8");
    let created = riffle(&[
        "topics",
        "--log-dir",
        dir,
        "--create",
        "--topic",
        "events",
        "--partitions",
        "2",
        "--config",
        "retention.ms=1000",
        "--config",
        "segment.bytes=4096",
    ]);
    assert!(stdout(&created).contains("Created topic events."));
    let refused = riffle(&[
        "topics",
        "--log-dir",
        dir,
        "--create",
        "--topic",
        "other",
        "--config",
        "min.insync.replicas=2",
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("min.insync.replicas"), "{stderr}");

    // 1,000 old records in partition 0, then retention.
    let log = Log::open(
        tmp.path(),
        LogOptions::default().with_retention_check_interval(None),
    )
    .expect("open");
    assert_eq!(log.partitions("other"), None);
    let tp = TopicPartition::new("events", 0);
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..1000 {
        b.push(
            1,
            Some(format!("k{i}").as_bytes()),
            Some(format!("v{i}").as_bytes()),
        );
        if b.len() == 10 {
            log.append(&tp, &mut b).expect("append");
        }
    }
    let report = log.enforce_retention(1_000_000).expect("retention");
    assert!(report.segments_deleted > 0, "{report:?}");
    let start = log.start_offset(&tp).expect("start");
    assert!(start > 0 && start < 1000);
    drop(log);

    let described = stdout(&riffle(&["topics", "--log-dir", dir, "--describe"]));
    assert!(
        described.contains(
            "Topic: events\tPartitionCount: 2\tConfigs: retention.ms=1000,segment.bytes=4096"
        ),
        "{described}"
    );
    assert!(
        described.contains(&format!(
            "Partition: 0\tStartOffset: {start}\tEndOffset: 1000\tSegments: 1\t"
        )),
        "{described}"
    );
    assert!(
        described.contains("Partition: 1\tStartOffset: 0\tEndOffset: 0\tSegments: 1\tBytes: 0"),
        "{described}"
    );

    let consumed = stdout(&riffle(&[
        "consume",
        "--log-dir",
        dir,
        "--topic",
        "events",
        "--from-beginning",
    ]));
    let expected: Vec<String> = (start..1000).map(|i| format!("k{i}\tv{i}")).collect();
    assert_eq!(consumed.lines().collect::<Vec<_>>(), expected);

    let listed = stdout(&riffle(&["topics", "--log-dir", dir]));
    let line = listed
        .lines()
        .find(|l| l.starts_with("events "))
        .expect("events listed");
    assert!(
        line.split_whitespace().nth(2) == Some(&(1000 - start).to_string()),
        "{line}"
    );
}

#[test]
fn a_compacted_topic_shows_how_far_the_cleaner_got() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8");
    let created = riffle(&[
        "topics",
        "--log-dir",
        dir,
        "--create",
        "--topic",
        "counts",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "segment.bytes=4096",
    ]);
    assert!(stdout(&created).contains("Created topic counts."));
    // 1,000 updates of 10 keys.
    let options = LogOptions::default()
        .with_retention_check_interval(None)
        .with_compaction_check_interval(None);
    let log = Log::open(tmp.path(), options.clone()).expect("open");
    let tp = TopicPartition::new("counts", 0);
    let mut b = BatchBuilder::new(Compression::None);
    let mut latest = HashMap::new();
    for i in 0..1000 {
        let (key, value) = (format!("k{}", i % 10), format!("v{i}"));
        b.push(1, Some(key.as_bytes()), Some(value.as_bytes()));
        latest.insert(key, value);
        if b.len() == 10 {
            log.append(&tp, &mut b).expect("append");
        }
    }
    drop(log);
    let partition_line = |described: &str| {
        described
            .lines()
            .find(|l| l.contains("Partition: 0"))
            .expect("partition 0 described")
            .to_owned()
    };
    let described = stdout(&riffle(&["topics", "--log-dir", dir, "--describe"]));
    let line = partition_line(&described);
    assert!(
        line.ends_with("\tCleanedTo: 0\tDirtyRatio: 1.00"),
        "{described}"
    );

    let log = Log::open(tmp.path(), options).expect("open");
    let report = log.compact(1_000_000).expect("compact");
    assert!(report.records_removed > 0, "{report:?}");
    let active = log.partition_info(&tp).expect("info").active_segment_base;
    drop(log);
    let described = stdout(&riffle(&["topics", "--log-dir", dir, "--describe"]));
    let line = partition_line(&described);
    assert!(
        line.ends_with(&format!("\tCleanedTo: {active}\tDirtyRatio: 0.00")),
        "{described}"
    );
    // What a consumer reads: fewer records, and every key's latest value last.
    let consumed = stdout(&riffle(&[
        "consume",
        "--log-dir",
        dir,
        "--topic",
        "counts",
        "--from-beginning",
    ]));
    let lines: Vec<&str> = consumed.lines().collect();
    assert!(lines.len() < 1000, "{} records", lines.len());
    let mut read = HashMap::new();
    for line in lines {
        let (key, value) = line.split_once('\t').expect("key and value");
        read.insert(key.to_owned(), value.to_owned());
    }
    assert_eq!(read, latest);
}

#[test]
fn creating_an_existing_topic_with_another_config_is_an_error_naming_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8");
    let create = |configs: &[&str]| {
        let mut args = vec!["topics", "--log-dir", dir, "--create", "--topic", "t"];
        for c in configs {
            args.extend(["--config", c]);
        }
        riffle(&args)
    };
    let first = create(&["retention.ms=1000"]);
    assert!(stdout(&first).contains("Created topic t."));
    let same = create(&["retention.ms=1000"]);
    assert!(
        stdout(&same).contains("Topic t already exists with this configuration."),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
    let other = create(&["cleanup.policy=compact"]);
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success(), "{err}");
    assert!(
        err.contains("[retention.ms=1000]") && err.contains("[cleanup.policy=compact]"),
        "{err}"
    );
    let described = riffle(&["topics", "--log-dir", dir, "--describe", "--topic", "t"]);
    assert!(
        stdout(&described).contains("Configs: retention.ms=1000\n"),
        "{}",
        String::from_utf8_lossy(&described.stdout)
    );
}
