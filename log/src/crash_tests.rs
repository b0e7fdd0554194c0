//! Crash scenarios on the in-memory backend, which keeps a live and a durable copy of every file:
//! "crash" keeps only what was made durable, and the log reopened on that must keep its promises.

use crate::{BatchBuilder, Compression, FsyncPolicy, Log, LogOptions, Result, TopicPartition};

/// Crash and fault hooks, for tests on the in-memory backend.
impl Log {
    /// The log a crash right now would leave, reopened; `None` unless the storage can tell.
    pub(crate) fn crash_and_reopen(&self) -> Result<Option<Log>> {
        let Some(storage) = self.shared.storage.crash_image() else {
            return Ok(None);
        };
        let shared = &self.shared;
        let log = Log::with_storage(storage, shared.root.clone(), None, shared.options.clone());
        log.load_topics()?;
        Ok(Some(log))
    }

    /// Makes every storage write fail once `ops` more succeeded (`None`: never), as a disk that
    /// dies would; a no-op unless the storage can inject failures.
    pub(crate) fn fail_storage_after(&self, ops: Option<u64>) {
        self.shared.storage.fail_after(ops);
    }

    /// Like [`crash_and_reopen`](Self::crash_and_reopen), but the recovery's storage writes fail
    /// after `ops` of them: the log as recovery left it, and recovery's result.
    pub(crate) fn crash_and_recover_failing_after(&self, ops: u64) -> Option<(Log, Result<()>)> {
        let storage = self.shared.storage.crash_image()?;
        storage.fail_after(Some(ops));
        let shared = &self.shared;
        let log = Log::with_storage(storage, shared.root.clone(), None, shared.options.clone());
        let recovered = log.load_topics();
        log.fail_storage_after(None);
        Some((log, recovered))
    }
}

fn log(fsync: FsyncPolicy) -> Log {
    let options = LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(400);
    let log = Log::in_memory_with_options(options);
    log.create_topic("t", 2).expect("create");
    log
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn append(log: &Log, p: u32, n: usize) -> u64 {
    let mut b = BatchBuilder::new(Compression::Lz4);
    for i in 0..n {
        b.push(
            i as i64,
            Some(format!("key-{i}").as_bytes()),
            Some(&[7u8; 40]),
        );
    }
    log.append(&tp(p), &mut b).expect("append")
}

fn crash(log: &Log) -> Log {
    log.crash_and_reopen()
        .expect("reopen after crash")
        .expect("in-memory storage")
}

fn record_count(log: &Log, p: u32) -> Result<u64> {
    let mut next = 0;
    let end = log.end_offset(&tp(p))?;
    while next < end {
        for batch in log.fetch(&tp(p), next, 1 << 20)? {
            for record in batch.records() {
                assert_eq!(record?.offset(), next);
                next += 1;
            }
        }
    }
    Ok(next)
}

#[test]
fn every_commit_makes_all_partitions_durable_before_the_offsets() {
    let log = log(FsyncPolicy::EveryCommit);
    for _ in 0..10 {
        append(&log, 0, 3);
        append(&log, 1, 2);
    }
    log.commit_offsets("g", &[(tp(0), 30)]).expect("commit");
    append(&log, 0, 5); // not durable: no commit after it
    append(&log, 1, 5);
    let after = crash(&log);
    assert_eq!(
        after.committed_offset("g", &tp(0)).expect("committed"),
        Some(30)
    );
    assert_eq!(after.end_offset(&tp(0)).expect("end"), 30);
    // The other partition was synced by the same commit, though the group did not name it.
    assert_eq!(after.end_offset(&tp(1)).expect("end"), 20);
    assert_eq!(record_count(&after, 0).expect("read"), 30);
    assert_eq!(record_count(&after, 1).expect("read"), 20);
    // Appends continue at the recovered end.
    assert_eq!(append(&after, 0, 1), 30);
}

#[test]
fn without_a_commit_unsynced_appends_are_lost_but_the_log_stays_consistent() {
    let log = log(FsyncPolicy::EveryCommit);
    for _ in 0..10 {
        append(&log, 0, 3); // rolls several segments: sealed ones are synced on roll
    }
    let after = crash(&log);
    let end = after.end_offset(&tp(0)).expect("end");
    // Everything up to the last roll was synced by the roll.
    assert!((12..30).contains(&end), "end offset {end}");
    assert_eq!(record_count(&after, 0).expect("read"), end);
    assert_eq!(append(&after, 0, 1), end);
}

#[test]
fn every_append_is_durable_when_append_returns() {
    let log = log(FsyncPolicy::EveryAppend);
    for i in 0..10 {
        assert_eq!(append(&log, 0, 3), 3 * i);
        assert_eq!(crash(&log).end_offset(&tp(0)).expect("end"), 3 * (i + 1));
    }
    assert_eq!(record_count(&crash(&log), 0).expect("read"), 30);
}

#[test]
fn never_syncs_only_on_request() {
    let log = log(FsyncPolicy::Never);
    append(&log, 0, 3);
    log.commit_offsets("g", &[(tp(0), 3)]).expect("commit");
    let after = crash(&log);
    // Offsets are always written durably; the data was not: what `Never` means.
    assert_eq!(
        after.committed_offset("g", &tp(0)).expect("committed"),
        Some(3)
    );
    assert_eq!(after.end_offset(&tp(0)).expect("end"), 0);
    append(&log, 0, 3);
    log.sync().expect("sync");
    assert_eq!(crash(&log).end_offset(&tp(0)).expect("end"), 6);
}

#[test]
fn topics_survive_a_crash_right_after_creation() {
    let log = log(FsyncPolicy::EveryCommit);
    log.create_topic("u", 3).expect("create");
    let after = crash(&log);
    assert_eq!(
        after.topics(),
        vec![("t".to_owned(), 2), ("u".to_owned(), 3)]
    );
}

/// A deletion that fails or crashes at any storage operation leaves, once reopened, either
/// the whole topic with every record (and the deletion reported failed), or no topic and no
/// group offsets of it; either way the other topic and its offsets are untouched, and the name
/// can be created again, empty.
#[test]
fn a_topic_deletion_crashing_anywhere_leaves_the_topic_whole_or_gone() {
    let mut saw_kept = false;
    let mut saw_gone = false;
    for ops in 0..60 {
        let log = log(FsyncPolicy::EveryCommit);
        log.create_topic("u", 1).expect("create");
        append(&log, 0, 5);
        append(&log, 1, 4);
        let u = TopicPartition::new("u", 0);
        let mut b = BatchBuilder::new(Compression::None);
        b.push(0, Some(b"k"), Some(b"v"));
        log.append(&u, &mut b).expect("append u");
        log.commit_offsets("g", &[(tp(0), 5), (tp(1), 2), (u.clone(), 1)])
            .expect("commit");
        log.sync().expect("sync");
        log.fail_storage_after(Some(ops));
        let deleted = log.delete_topic("t");
        log.fail_storage_after(None);
        let after = crash(&log);
        match after.partitions("t") {
            Some(2) => {
                saw_kept = true;
                assert!(
                    deleted.is_err(),
                    "ops {ops}: deleted, but the topic is back"
                );
                assert_eq!(record_count(&after, 0).expect("read"), 5, "ops {ops}");
                assert_eq!(record_count(&after, 1).expect("read"), 4, "ops {ops}");
            }
            None => {
                saw_gone = true;
                assert_eq!(after.committed_offset("g", &tp(0)).expect("offset"), None);
                assert_eq!(after.committed_offset("g", &tp(1)).expect("offset"), None);
                after.create_topic("t", 3).expect("recreate");
                assert_eq!(after.end_offset(&tp(2)).expect("end"), 0, "ops {ops}");
                assert_eq!(after.end_offset(&tp(0)).expect("end"), 0, "ops {ops}");
            }
            other => panic!("ops {ops}: topic t with {other:?} partitions"),
        }
        assert_eq!(after.committed_offset("g", &u).expect("offset"), Some(1));
        assert_eq!(after.end_offset(&u).expect("end"), 1);
    }
    assert!(saw_kept && saw_gone, "both outcomes reached");
}
