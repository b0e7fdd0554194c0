//! A store restored from a compacted changelog equals one restored from the whole changelog: a
//! persistent count runs over several rounds of input (every key in every round), its changelog
//! (`cleanup.policy=compact`, as Kafka Streams creates it) is compacted, and the application is
//! started again with no state, once on the compacted log and once on a copy taken before the
//! compaction. Both restore, both go on counting from there, and both end with the counts of a
//! `HashMap` over all input; the compacted one restores far fewer records.

mod common;

use std::collections::HashMap;

use riffle::log::{CleanupPolicy, Log, LogOptions, TopicPartition};

const CHANGELOG: &str = "durable-counts-changelog";

fn options() -> LogOptions {
    // Small segments, so the changelog has many sealed ones; compaction only when asked.
    LogOptions::default()
        .with_segment_bytes(1 << 10)
        .with_compaction_check_interval(None)
        .with_retention_check_interval(None)
}

fn input(round: usize, n: usize, keys: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("k{}", i % keys), format!("{round}")))
        .collect()
}

/// A partition's latest value per key.
type Latest = HashMap<Vec<u8>, Option<Vec<u8>>>;

/// Every changelog record, and the latest value per key, of each partition.
fn changelog(log: &Log) -> (usize, Vec<Latest>) {
    let mut records = 0;
    let mut latest = Vec::new();
    for p in 0..log.partitions(CHANGELOG).expect("changelog exists") {
        let tp = TopicPartition::new(CHANGELOG, p);
        let mut map = HashMap::new();
        let mut next = 0;
        loop {
            let batches = log.fetch(&tp, next, 1 << 20).expect("fetch");
            if batches.is_empty() {
                break;
            }
            for batch in &batches {
                for record in batch.records() {
                    let record = record.expect("record");
                    if record.offset() < next {
                        continue;
                    }
                    records += 1;
                    map.insert(
                        record.key().expect("key").to_vec(),
                        record.value().map(|v| v.to_vec()),
                    );
                }
                next = batch.last_offset() + 1;
            }
        }
        latest.push(map);
    }
    (records, latest)
}

#[test]
fn restoring_from_a_compacted_changelog_equals_restoring_from_the_whole_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), options()).expect("log");
    let mut all = Vec::new();
    for round in 0..10 {
        let records = input(round, 4000, 53);
        common::produce(&log, "in", 2, &records);
        all.extend(records);
        common::run_persistent_count(&log, &dir.path().join("state"));
    }
    let config = log
        .topic_config(CHANGELOG)
        .expect("config")
        .expect("changelog");
    assert_eq!(config.cleanup_policy, CleanupPolicy::Compact);
    let (whole_records, whole_latest) = changelog(&log);
    common::copy_dir(&dir.path().join("log"), &dir.path().join("log-uncompacted"));

    let report = log.compact(i64::MAX / 2).expect("compact");
    println!("{whole_records} changelog records; compaction: {report:?}");
    assert!(report.records_removed > 0, "{report:?}");
    let (compacted_records, compacted_latest) = changelog(&log);
    assert_eq!(
        compacted_latest, whole_latest,
        "compaction keeps every key's latest value"
    );
    assert!(
        compacted_records * 3 < whole_records,
        "{compacted_records} of {whole_records} changelog records left"
    );

    let uncompacted = Log::open(dir.path().join("log-uncompacted"), options()).expect("copy");
    let mut restored = Vec::new();
    for (name, log) in [("compacted", &log), ("uncompacted", &uncompacted)] {
        // No state at all: every store comes back from the changelog.
        let state = dir.path().join(format!("state-{name}"));
        let (processed, from_changelog) = common::run_persistent_count(log, &state);
        assert_eq!(processed, 0, "{name}: the input was committed");
        assert!(from_changelog > 0, "{name}: the stores were restored");
        restored.push(from_changelog);
        // Counting goes on from the restored values.
        let more = input(99, 530, 53);
        common::produce(log, "in", 2, &more);
        let (processed, _) = common::run_persistent_count(log, &state);
        assert_eq!(processed, 530, "{name}");
        let mut expected_input = all.clone();
        expected_input.extend(more);
        let model = common::count_model(expected_input.iter().map(|(k, _)| k.as_str()));
        assert_eq!(common::latest_longs(log, "out"), model, "{name}");
    }
    println!("restored {restored:?}");
    assert!(
        restored[0] * 3 < restored[1],
        "restored {} records from the compacted changelog, {} from the whole one",
        restored[0],
        restored[1]
    );
}
