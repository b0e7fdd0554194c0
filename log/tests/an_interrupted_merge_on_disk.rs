//! A compaction that merged segments and stopped after its commit point, on real files: the
//! segment at the range's base covers the merged segments, which are still on disk, and the
//! `cleaning` file names the range. A read-only open reads past the leftovers, a writable open
//! removes them, and `riffle log repair` (run before any open) removes exactly them, reporting
//! why. Without the `cleaning` file the same overlap is corruption.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use riffle_log::{
    Compression, CutAction, Error, Log, LogOptions, RepairOptions, TopicConfig, TopicPartition,
};

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn options() -> LogOptions {
    LogOptions::default()
        .with_retention_check_interval(None)
        .with_compaction_check_interval(None)
}

fn partition_dir(dir: &Path) -> PathBuf {
    dir.join("topics").join("t").join("0")
}

fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(partition_dir(dir))
        .expect("read_dir")
        .map(|e| e.expect("entry"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| n.ends_with(".log") || n.ends_with(".index"))
        .map(|(n, p)| (n, std::fs::read(p).expect("read")))
        .collect()
}

/// A partition compacted once (small segments), then more appends, then the state a crash
/// right after the merging pass's commit point leaves: (dir, what the finished pass reads).
fn interrupted_merge() -> (tempfile::TempDir, Vec<(u64, common::Model)>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let log = Log::open(dir, options()).expect("open");
    let config = TopicConfig::from_pairs([
        ("cleanup.policy", "compact"),
        ("segment.bytes", "600"),
        ("min.cleanable.dirty.ratio", "0"),
    ])
    .expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let batch = |round: usize| -> Vec<common::Model> {
        (0..3)
            .map(|i| {
                let key = format!("key-{}", (round * 3 + i) % 5).into_bytes();
                (
                    round as i64,
                    Some(key),
                    Some(format!("value-{round}-{i}").into_bytes()),
                )
            })
            .collect()
    };
    for round in 0..30 {
        common::append(&log, &tp(), Compression::None, &batch(round));
    }
    log.compact(1_000).expect("first pass");
    for round in 30..40 {
        common::append(&log, &tp(), Compression::None, &batch(round));
    }
    log.sync().expect("sync");
    let before = segment_files(dir);
    let report = log.compact(1_000).expect("merging pass");
    assert!(
        report.segments_cleaned > report.segments_written,
        "{report:?}"
    );
    let after = segment_files(dir);
    let finished = common::read_all(&log, &tp(), 0, 1 << 20);
    drop(log);
    // Put back the segments the pass removed, and the `cleaning` file: the first segment
    // whose file changed is the merged one, and it covers up to the first base kept after it.
    let removed: Vec<&String> = before.keys().filter(|n| !after.contains_key(*n)).collect();
    assert!(!removed.is_empty());
    let base_of = |n: &str| n[..20].parse::<u64>().expect("base");
    let first_removed = removed.iter().map(|n| base_of(n)).min().expect("removed");
    let merged = after
        .keys()
        .filter(|n| n.ends_with(".log"))
        .map(|n| base_of(n))
        .filter(|&b| b < first_removed)
        .max()
        .expect("merged segment");
    let end = after
        .keys()
        .filter(|n| n.ends_with(".log"))
        .map(|n| base_of(n))
        .find(|&b| b > first_removed)
        .expect("a segment after the merged range");
    for name in &removed {
        let base = base_of(name);
        if base > merged && base < end {
            std::fs::write(partition_dir(dir).join(name), &before[*name]).expect("put back");
        }
    }
    std::fs::write(
        partition_dir(dir).join("cleaning"),
        format!("{merged} {end}\n"),
    )
    .expect("cleaning file");
    (tmp, finished)
}

#[test]
fn a_read_only_open_skips_the_leftovers_and_a_writable_one_removes_them() {
    let (tmp, finished) = interrupted_merge();
    let dir = tmp.path();
    let with_leftovers = segment_files(dir);
    let read_only = Log::open(dir, options().with_read_only(true)).expect("read-only open");
    assert_eq!(common::read_all(&read_only, &tp(), 0, 700), finished);
    assert_eq!(
        segment_files(dir),
        with_leftovers,
        "a read-only open changes nothing"
    );
    drop(read_only);
    let log = Log::open(dir, options()).expect("open");
    assert_eq!(common::read_all(&log, &tp(), 0, 700), finished);
    assert!(segment_files(dir).len() < with_leftovers.len());
    assert!(!partition_dir(dir).join("cleaning").exists());
}

#[test]
fn repair_removes_exactly_the_leftovers_of_a_merge() {
    let (tmp, finished) = interrupted_merge();
    let dir = tmp.path();
    let report = riffle_log::repair(dir, &RepairOptions::default()).expect("repair");
    assert!(!report.cuts.is_empty());
    for cut in &report.cuts {
        assert!(
            matches!(cut.action, CutAction::Delete { .. })
                && cut.reason.contains("a compaction merged it"),
            "{cut:?}"
        );
    }
    let log = Log::open(dir, options()).expect("open");
    assert_eq!(common::read_all(&log, &tp(), 0, 700), finished);
}

#[test]
fn the_same_overlap_without_the_cleaning_file_is_corruption() {
    let (tmp, _) = interrupted_merge();
    let dir = tmp.path();
    std::fs::remove_file(partition_dir(dir).join("cleaning")).expect("remove");
    let result = Log::open(dir, options()).and_then(|log| log.fetch(&tp(), 0, 700).map(|_| ()));
    match result {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(reason.contains("no compaction in progress"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
