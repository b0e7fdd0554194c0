//! Crashes during retention and [`Log::delete_records`], on the in-memory backend (which keeps
//! what a crash would leave, and fails writes on request): whatever step a crash or a dying
//! disk cuts, the reopened log has the old start offset or the new one, every record from it
//! on reads back as written, and no segment is left wholly below it.

use std::path::PathBuf;

use crate::topic_config::TopicConfig;
use crate::{
    BatchBuilder, Compression, Error, FsyncPolicy, Log, LogOptions, Result, TopicPartition,
};

const NOW: i64 = 1_000_000;

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// A log whose partition `t-0` holds 30 batches of 3 records over several segments: the first
/// 18 batches old (timestamp 0), the rest new. Returns it and each record's key, by offset.
fn log_with_history(fsync: FsyncPolicy) -> (Log, Vec<String>) {
    let options = LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(600);
    let log = Log::in_memory_with_options(options);
    let config = TopicConfig::from_pairs([("retention.ms", "1000")]).expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let mut keys = Vec::new();
    let mut b = BatchBuilder::new(Compression::None);
    for batch in 0..30 {
        let ts = if batch < 18 { 0 } else { NOW };
        for _ in 0..3 {
            let key = format!("key-{}", keys.len());
            b.push(ts, Some(key.as_bytes()), Some(&[9u8; 30]));
            keys.push(key);
        }
        log.append(&tp(), &mut b).expect("append");
    }
    log.sync().expect("sync");
    (log, keys)
}

fn crash(log: &Log) -> Log {
    log.crash_and_reopen()
        .expect("reopen after crash")
        .expect("in-memory storage")
}

fn partition_dir(log: &Log) -> PathBuf {
    log.shared.root.join("topics").join("t").join("0")
}

/// Segment base offsets in the partition directory.
fn segment_bases(log: &Log) -> Vec<u64> {
    let dir = partition_dir(log);
    let mut bases: Vec<u64> = log
        .shared
        .storage
        .list(&dir)
        .expect("list")
        .iter()
        .filter_map(|n| crate::segment::parse_segment_file_name(n))
        .collect();
    bases.sort_unstable();
    bases
}

/// Every record from the start offset on equals the model; a fetch below it is out of range;
/// no segment lies wholly below it.
fn check(log: &Log, keys: &[String]) -> Result<u64> {
    let start = log.start_offset(&tp())?;
    let end = log.end_offset(&tp())?;
    assert_eq!(end, keys.len() as u64);
    let mut next = start;
    while next < end {
        for batch in log.fetch(&tp(), next, 1 << 20)? {
            for record in batch.records() {
                let record = record?;
                if record.offset() < next {
                    continue;
                }
                assert_eq!(record.offset(), next);
                let key = record.key().expect("key");
                assert_eq!(&key[..], keys[next as usize].as_bytes());
                next += 1;
            }
        }
    }
    if start > 0 {
        assert!(matches!(
            log.fetch(&tp(), start - 1, 1 << 20),
            Err(Error::OffsetOutOfRange { .. })
        ));
    }
    let bases = segment_bases(log);
    assert!(
        bases.first().is_some_and(|&b| b <= start),
        "{bases:?} {start}"
    );
    assert!(
        bases.get(1).is_none_or(|&b| b > start),
        "a segment wholly below the start offset {start} is left: {bases:?}"
    );
    Ok(start)
}

/// Where `delete` moves the start offset when it succeeds (computed on an undisturbed copy).
fn target(fsync: FsyncPolicy, delete: &dyn Fn(&Log) -> Result<()>) -> u64 {
    let (log, _) = log_with_history(fsync);
    delete(&log).expect("delete");
    log.start_offset(&tp()).expect("start")
}

fn crash_at_every_step(delete: &dyn Fn(&Log) -> Result<()>) {
    for fsync in [FsyncPolicy::EveryCommit, FsyncPolicy::Never] {
        let moved_to = target(fsync, delete);
        assert!(moved_to > 0);
        let mut completed = false;
        for ops in 0.. {
            let (log, keys) = log_with_history(fsync);
            log.fail_storage_after(Some(ops));
            let result = delete(&log);
            log.fail_storage_after(None);
            let after = crash(&log);
            let start = check(&after, &keys).expect("the reopened log reads back");
            assert!(
                start == 0 || start == moved_to,
                "start offset {start} after a crash at step {ops}: neither 0 nor {moved_to}"
            );
            if result.is_ok() {
                // Returned: durable.
                assert_eq!(start, moved_to, "{fsync:?}, step {ops}");
                completed = true;
                break;
            }
            // Whatever a failed deletion left, a later one finishes the job.
            delete(&after).expect("delete again");
            assert_eq!(check(&after, &keys).expect("read"), moved_to);
            assert!(ops < 100, "the deletion never completed");
        }
        assert!(completed);
    }
}

#[test]
fn a_crash_at_any_step_of_delete_records_leaves_the_old_or_the_new_start() {
    crash_at_every_step(&|log| log.delete_records(&tp(), 40).map(|_| ()));
}

#[test]
fn a_crash_at_any_step_of_retention_leaves_the_old_or_the_new_start() {
    crash_at_every_step(&|log| log.enforce_retention(NOW).map(|_| ()));
}

#[test]
fn a_crash_while_recovery_removes_leftover_segments_is_recovered_again() {
    // A deletion that moved the start offset but removed no file (the disk died right after
    // the `start` file was replaced): its crash image has segments below the start.
    let (log, keys) = log_with_history(FsyncPolicy::EveryCommit);
    let before = segment_bases(&log);
    let mut image = None;
    for ops in 0.. {
        let (attempt, _) = log_with_history(FsyncPolicy::EveryCommit);
        attempt.fail_storage_after(Some(ops));
        let failed = attempt.enforce_retention(NOW).is_err();
        attempt.fail_storage_after(None);
        let Some(storage) = attempt.shared.storage.crash_image() else {
            panic!("in-memory storage");
        };
        let start =
            crate::partition::read_start(&*storage, &partition_dir(&attempt)).expect("start file");
        if failed && start > 0 {
            image = Some(attempt);
            break;
        }
        assert!(ops < 100);
    }
    let crashed = image.expect("a crash between the start file and the removals");
    assert_eq!(segment_bases(&crashed), before, "no file was removed yet");
    drop(log);
    for ops in 0..8 {
        let Some((recovering, _)) = crashed.crash_and_recover_failing_after(ops) else {
            panic!("in-memory storage");
        };
        // Whatever the failing recovery did, the next open finishes it.
        let again = crash(&recovering);
        assert!(check(&again, &keys).expect("read") > 0);
    }
}
