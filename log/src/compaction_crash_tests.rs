//! Crashes during compaction, on the in-memory backend (which keeps what a crash would leave,
//! and fails writes on request): whatever step a crash or a dying disk cuts, the reopened log
//! holds every record the finished pass keeps and nothing that was not appended at its offset
//! (some groups swapped, others not), no leftover of a swap stays after a writable open, and a
//! pass on the reopened log reaches the finished pass's result.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::topic_config::TopicConfig;
use crate::{BatchBuilder, Compression, FsyncPolicy, Log, LogOptions, Result, TopicPartition};

const NOW: i64 = 1_000_000;

type Record = (Option<Vec<u8>>, Option<Vec<u8>>);

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// A compacted partition `t-0` of 40 batches of 3 records over 7 keys (every 10th record a
/// tombstone, every 13th a null key), in 600-byte segments. Returns it and each record by
/// offset.
fn log_with_history(fsync: FsyncPolicy) -> (Log, Vec<Record>) {
    let options = LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(600)
        .with_index_interval_bytes(100);
    let log = Log::in_memory_with_options(options);
    let config = TopicConfig::from_pairs([
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0"),
    ])
    .expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let mut records = Vec::new();
    let mut b = BatchBuilder::new(Compression::None);
    for _ in 0..40 {
        for _ in 0..3 {
            let i = records.len();
            let key = (i % 13 != 12).then(|| format!("key-{}", i % 7).into_bytes());
            let value = (i % 10 != 9).then(|| format!("value-{i}").into_bytes());
            b.push(NOW, key.as_deref(), value.as_deref());
            records.push((key, value));
        }
        log.append(&tp(), &mut b).expect("append");
    }
    log.sync().expect("sync");
    (log, records)
}

fn crash(log: &Log) -> Log {
    log.crash_and_reopen()
        .expect("reopen after crash")
        .expect("in-memory storage")
}

fn partition_dir(log: &Log) -> PathBuf {
    log.shared.root.join("topics").join("t").join("0")
}

/// Every record, by offset, as the log reads it (each checked against what was appended there).
fn read(log: &Log, appended: &[Record]) -> Result<BTreeMap<u64, Record>> {
    let end = log.end_offset(&tp())?;
    assert_eq!(end, appended.len() as u64);
    let mut out = BTreeMap::new();
    let mut next = 0;
    while next < end {
        for batch in log.fetch(&tp(), next, 700)? {
            for record in batch.records() {
                let record = record?;
                if record.offset() < next {
                    continue;
                }
                let got = (
                    record.key().map(|k| k.to_vec()),
                    record.value().map(|v| v.to_vec()),
                );
                assert_eq!(
                    got,
                    appended[record.offset() as usize],
                    "at {}",
                    record.offset()
                );
                out.insert(record.offset(), got);
                next = record.offset() + 1;
            }
            next = next.max(batch.last_offset() + 1);
        }
    }
    Ok(out)
}

fn leftovers(log: &Log) -> Vec<String> {
    log.shared
        .storage
        .list(&partition_dir(log))
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(".cleaned") || n == "cleaning")
        .collect()
}

#[test]
fn a_crash_at_any_step_of_a_compaction_leaves_the_old_or_the_cleaned_segments() {
    crash_at_every_step(log_with_history);
}

#[test]
fn a_crash_at_any_step_of_a_merging_compaction_leaves_the_old_or_the_merged_segments() {
    crash_at_every_step(log_compacted_once);
}

fn crash_at_every_step(history: fn(FsyncPolicy) -> (Log, Vec<Record>)) {
    for fsync in [FsyncPolicy::EveryCommit, FsyncPolicy::Never] {
        let (clean, appended) = history(fsync);
        let before = read(&clean, &appended).expect("read");
        let report = clean.compact(NOW).expect("compact");
        assert!(
            report.records_removed > 0 && report.segments_cleaned > 2,
            "{report:?}"
        );
        let after = read(&clean, &appended).expect("read");
        assert!(
            after.len() < before.len() / 2,
            "{} of {}",
            after.len(),
            before.len()
        );
        let mut completed = false;
        let mut partial = 0;
        for ops in 0.. {
            let (log, _) = history(fsync);
            log.fail_storage_after(Some(ops));
            let result = log.compact(NOW);
            log.fail_storage_after(None);
            let reopened = crash(&log);
            let got = read(&reopened, &appended).expect("the reopened log reads back");
            for (offset, record) in &after {
                assert_eq!(
                    got.get(offset),
                    Some(record),
                    "{fsync:?}, step {ops}: kept record {offset} lost"
                );
            }
            assert!(
                leftovers(&reopened).is_empty(),
                "{:?}",
                leftovers(&reopened)
            );
            if result.is_ok() {
                assert_eq!(
                    got, after,
                    "{fsync:?}, step {ops}: a finished pass is durable"
                );
                completed = true;
                break;
            }
            if got != before && got != after {
                partial += 1;
            }
            // Whatever a failed pass left, the next pass gets the same result.
            reopened.compact(NOW).expect("compact again");
            assert_eq!(read(&reopened, &appended).expect("read"), after);
            let again = crash(&reopened);
            assert_eq!(read(&again, &appended).expect("read"), after);
            assert!(ops < 500, "the pass never completed");
        }
        assert!(completed);
        assert!(
            partial > 0,
            "{fsync:?}: no crash left some groups swapped and others not"
        );
    }
}

/// [`log_with_history`] compacted once (its sealed segments are small now, so the next pass
/// merges them), then 20 more batches.
fn log_compacted_once(fsync: FsyncPolicy) -> (Log, Vec<Record>) {
    let (log, mut records) = log_with_history(fsync);
    log.compact(NOW).expect("compact");
    let mut b = BatchBuilder::new(Compression::None);
    for _ in 0..20 {
        for _ in 0..3 {
            let i = records.len();
            let key = format!("key-{}", i % 5).into_bytes();
            let value = format!("value-{i}").into_bytes();
            b.push(NOW, Some(&key), Some(&value));
            records.push((Some(key), Some(value)));
        }
        log.append(&tp(), &mut b).expect("append");
    }
    log.sync().expect("sync");
    (log, records)
}

#[test]
fn a_crash_while_recovery_finishes_a_swap_is_recovered_again() {
    // A crash image with a committed merge whose merged segments are still there: the
    // `cleaning` file and the segments inside the new one.
    let (original, appended) = log_compacted_once(FsyncPolicy::EveryCommit);
    let original_bytes = |base: u64| {
        original
            .shared
            .storage
            .read(&partition_dir(&original).join(crate::segment::segment_file_name(base)))
            .expect("read")
    };
    let mut image = None;
    for ops in 0.. {
        let (attempt, _) = log_compacted_once(FsyncPolicy::EveryCommit);
        attempt.fail_storage_after(Some(ops));
        let failed = attempt.compact(NOW).is_err();
        attempt.fail_storage_after(None);
        let Some(storage) = attempt.shared.storage.crash_image() else {
            panic!("in-memory storage");
        };
        let dir = partition_dir(&attempt);
        let marked = crate::partition::read_cleaning(&*storage, &dir)
            .expect("cleaning file")
            .is_some_and(|(base, end)| {
                let inside = storage
                    .list(&dir)
                    .expect("list")
                    .iter()
                    .filter_map(|n| crate::segment::parse_segment_file_name(n))
                    .filter(|&b| b > base && b < end)
                    .count();
                // The swap committed: the segment at `base` is the cleaned one.
                let now = storage
                    .read(&dir.join(crate::segment::segment_file_name(base)))
                    .expect("read");
                inside > 0 && now != original_bytes(base)
            });
        if failed && marked {
            image = Some(attempt);
            break;
        }
        assert!(ops < 500, "no crash left a committed merge unfinished");
    }
    let crashed = image.expect("a committed merge left unfinished");
    let expected = {
        let (clean, _) = log_compacted_once(FsyncPolicy::EveryCommit);
        clean.compact(NOW).expect("compact");
        read(&clean, &appended).expect("read")
    };
    for ops in 0..12 {
        let Some((recovering, _)) = crashed.crash_and_recover_failing_after(ops) else {
            panic!("in-memory storage");
        };
        // The partition opens (and recovers) on first use; whatever a failing recovery did,
        // the next open finishes it.
        recovering.fail_storage_after(Some(ops));
        let _ = read(&recovering, &appended);
        recovering.fail_storage_after(None);
        let again = crash(&recovering);
        let got = read(&again, &appended).expect("read");
        for (offset, record) in &expected {
            assert_eq!(got.get(offset), Some(record), "recovery step {ops}");
        }
        assert!(leftovers(&again).is_empty(), "{:?}", leftovers(&again));
        again.compact(NOW).expect("compact");
        assert_eq!(read(&again, &appended).expect("read"), expected);
    }
}

/// Batches written by transactions stay in the journal until a checkpoint; compaction may
/// rewrite them and retention may delete them before that. A crash then: recovery replays the
/// journal against partitions that no longer hold those bytes, and must accept them (the
/// partition reaching past a batch is what says it was written), not refuse to open.
#[test]
fn journaled_batches_compacted_or_deleted_before_a_checkpoint_are_recovered() {
    let options = LogOptions::default()
        .with_segment_bytes(400)
        .with_txn_journal_bytes(64 << 20);
    let log = Log::in_memory_with_options(options);
    let compacted = TopicConfig::from_pairs([
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0"),
    ])
    .expect("config");
    log.create_topic_with("changelog", 1, &compacted)
        .expect("create");
    log.create_topic("repartition", 1).expect("create");
    let changelog = TopicPartition::new("changelog", 0);
    let repartition = TopicPartition::new("repartition", 0);
    for round in 0..30u64 {
        let mut a = BatchBuilder::new(Compression::None);
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..4u64 {
            let key = format!("key-{}", (round * 4 + i) % 3);
            a.push(
                NOW,
                Some(key.as_bytes()),
                Some(format!("v{round}-{i}").as_bytes()),
            );
            b.push(NOW, Some(key.as_bytes()), Some(b"x"));
        }
        log.commit_transaction(
            "app",
            &mut [(changelog.clone(), &mut a), (repartition.clone(), &mut b)],
            &[(repartition.clone(), (round + 1) * 4)],
        )
        .expect("commit");
    }
    let report = log.compact(NOW).expect("compact");
    assert!(report.records_removed > 0, "{report:?}");
    log.delete_records(&repartition, 100)
        .expect("delete records");
    let expected = records_of(&log, &changelog);
    // Reopening replays the journal (`recover_journal`): it must accept what it finds.
    let reopened = crash(&log);
    let got = records_of(&reopened, &changelog);
    assert_eq!(got, expected);
    assert_eq!(
        reopened.start_offset(&repartition).expect("start"),
        log.start_offset(&repartition).expect("start")
    );
}

/// Every record of `tp`, in order.
fn records_of(log: &Log, tp: &TopicPartition) -> Vec<Record> {
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let batches = log.fetch(tp, next, 1 << 20).expect("fetch");
        if batches.is_empty() {
            return out;
        }
        for batch in &batches {
            for record in batch.records() {
                let record = record.expect("record");
                if record.offset() >= next {
                    out.push((
                        record.key().map(|k| k.to_vec()),
                        record.value().map(|v| v.to_vec()),
                    ));
                }
            }
            next = batch.last_offset() + 1;
        }
    }
}
