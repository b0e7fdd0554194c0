//! Transactions under crashes, on the in-memory backend: the storage fails every write after a
//! countdown (a disk that dies at that step), then the log is "crashed" (only what was synced
//! is kept) and reopened. Whatever the step, the transaction is there entirely — every batch in
//! every partition and the group's offsets — or not at all.

use crate::{BatchBuilder, Compression, FsyncPolicy, Log, LogOptions, Result, TopicPartition};

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn batch(prefix: &str, n: usize) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::Lz4);
    for i in 0..n {
        b.push(
            i as i64,
            Some(b"key"),
            Some(format!("{prefix}-{i}").as_bytes()),
        );
    }
    b
}

fn crash(log: &Log) -> Log {
    log.crash_and_reopen()
        .expect("reopen after crash")
        .expect("in-memory storage")
}

/// Every value in the partition, in offset order, checking offsets are dense.
fn values(log: &Log, tp: &TopicPartition) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let end = log.end_offset(tp)?;
    while (out.len() as u64) < end {
        for batch in log.fetch(tp, out.len() as u64, 1 << 20)? {
            for record in batch.records() {
                let record = record?;
                assert_eq!(record.offset(), out.len() as u64);
                let value = record
                    .value()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                out.push(value.unwrap_or_default());
            }
        }
    }
    Ok(out)
}

/// A log with plain data in every partition (made durable by a commit), and one earlier
/// transaction still only in the journal.
fn prepared(fsync: FsyncPolicy, journal_bytes: u64) -> Log {
    let options = LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(300)
        .with_txn_journal_bytes(journal_bytes);
    let log = Log::in_memory_with_options(options);
    log.create_topic("in", 1).expect("create");
    log.create_topic("out", 2).expect("create");
    log.create_topic("changelog", 1).expect("create");
    for t in [tp("in", 0), tp("out", 0), tp("out", 1), tp("changelog", 0)] {
        log.append(&t, &mut batch("plain", 3)).expect("append");
    }
    log.commit_offsets("g", &[(tp("in", 0), 1)])
        .expect("commit");
    let mut first = batch("first", 2);
    log.commit_transaction("g", &mut [(tp("out", 1), &mut first)], &[(tp("in", 0), 2)])
        .expect("first transaction");
    log.sync().expect("sync"); // durable under `Never` too (the journal keeps its record)
    log
}

/// The transaction under test: four batches in three partitions (two in `out`-0), and an offset.
fn transaction(log: &Log) -> Result<Vec<u64>> {
    let (mut a, mut b, mut c, mut d) = (batch("a", 4), batch("b", 1), batch("c", 5), batch("d", 2));
    let mut empty = BatchBuilder::default();
    let mut batches = [
        (tp("out", 0), &mut a),
        (tp("changelog", 0), &mut b),
        (tp("out", 1), &mut empty),
        (tp("out", 0), &mut c),
        (tp("out", 1), &mut d),
    ];
    log.commit_transaction("g", &mut batches, &[(tp("in", 0), 3)])
}

/// The expected partition contents without and with the transaction under test.
fn expected(with: bool) -> Vec<(TopicPartition, Vec<String>)> {
    let values = |parts: &[(&str, usize)]| -> Vec<String> {
        parts
            .iter()
            .flat_map(|&(p, n)| (0..n).map(move |i| format!("{p}-{i}")))
            .collect()
    };
    type Parts = &'static [(&'static str, usize)];
    let (out0, changelog, out1): (Parts, Parts, Parts) = if with {
        (
            &[("plain", 3), ("a", 4), ("c", 5)],
            &[("plain", 3), ("b", 1)],
            &[("plain", 3), ("first", 2), ("d", 2)],
        )
    } else {
        (
            &[("plain", 3)],
            &[("plain", 3)],
            &[("plain", 3), ("first", 2)],
        )
    };
    vec![
        (tp("out", 0), values(out0)),
        (tp("changelog", 0), values(changelog)),
        (tp("out", 1), values(out1)),
    ]
}

/// Asserts the log holds the transaction under test entirely or not at all; returns which.
fn all_or_nothing(log: &Log, step: u64) -> bool {
    let committed = log.committed_offset("g", &tp("in", 0)).expect("offset");
    let with = committed == Some(3);
    assert!(
        with || committed == Some(2),
        "step {step}: offset {committed:?}"
    );
    for (t, want) in expected(with) {
        assert_eq!(
            values(log, &t).expect("read"),
            want,
            "step {step}: {t}, transaction {with}"
        );
    }
    with
}

fn crash_at_every_step(fsync: FsyncPolicy, journal_bytes: u64) {
    let (mut committed, mut lost) = (0, 0);
    for step in 0.. {
        let log = prepared(fsync, journal_bytes);
        log.fail_storage_after(Some(step));
        let mut result = transaction(&log);
        if fsync == FsyncPolicy::Never {
            // Nothing is durable under `Never` until a sync; the sync's steps count too.
            result = result.and_then(|bases| log.sync().map(|()| bases));
        }
        let after = crash(&log);
        let with = all_or_nothing(&after, step);
        if let Ok(bases) = &result {
            assert_eq!(bases, &vec![3, 3, 5, 7, 5], "step {step}");
            assert!(with, "step {step}: an acknowledged transaction was lost");
        }
        if with {
            committed += 1
        } else {
            lost += 1
        }
        // Recovery is idempotent, and the recovered log takes new work at the right offsets.
        let again = crash(&after);
        assert_eq!(all_or_nothing(&again, step), with);
        let next = again
            .append(&tp("out", 0), &mut batch("next", 1))
            .expect("append");
        assert_eq!(next, if with { 12 } else { 3 });
        if result.is_ok() && step > 60 {
            break;
        }
    }
    assert!(
        committed > 0 && lost > 0,
        "{committed} committed, {lost} lost"
    );
}

#[test]
fn a_crash_at_any_step_of_a_transaction_keeps_all_of_it_or_none() {
    crash_at_every_step(FsyncPolicy::EveryCommit, 32 << 20);
}

#[test]
fn a_crash_at_any_step_is_all_or_nothing_under_every_append_and_never() {
    crash_at_every_step(FsyncPolicy::EveryAppend, 32 << 20);
    crash_at_every_step(FsyncPolicy::Never, 32 << 20);
}

#[test]
fn a_crash_during_the_checkpoint_that_truncates_the_journal_loses_nothing() {
    // A tiny journal limit: the transaction under test ends with a checkpoint.
    crash_at_every_step(FsyncPolicy::EveryCommit, 1);
}

#[test]
fn a_crash_during_recovery_is_recovered_by_the_next_open() {
    let log = prepared(FsyncPolicy::EveryCommit, 32 << 20);
    transaction(&log).expect("transaction");
    for step in 0.. {
        let (recovering, result) = log.crash_and_recover_failing_after(step).expect("memory");
        let again = crash(&recovering);
        assert!(all_or_nothing(&again, step), "step {step}");
        if result.is_ok() {
            break;
        }
    }
}

#[test]
fn under_never_a_crash_while_syncing_keeps_plain_appends_a_transaction_builds_on() {
    // The transaction's batch goes after a plain append that is not durable yet; whatever step
    // of the later sync a crash hits, recovery must not find the batch with a gap before it.
    for step in 0.. {
        let options = LogOptions::default().with_fsync(FsyncPolicy::Never);
        let log = Log::in_memory_with_options(options);
        log.create_topic("out", 1).expect("create");
        log.append(&tp("out", 0), &mut batch("plain", 2))
            .expect("append");
        let mut b = batch("txn", 3);
        let bases =
            log.commit_transaction("g", &mut [(tp("out", 0), &mut b)], &[(tp("out", 0), 2)]);
        assert_eq!(bases.expect("transaction"), vec![2]);
        log.fail_storage_after(Some(step));
        let synced = log.sync();
        let after = crash(&log);
        let got = values(&after, &tp("out", 0)).expect("read");
        let offset = after.committed_offset("g", &tp("out", 0)).expect("offset");
        let with_txn = ["plain-0", "plain-1", "txn-0", "txn-1", "txn-2"];
        match offset {
            Some(2) => assert_eq!(got, with_txn, "step {step}"),
            None => assert!(
                got.len() <= 2 && got.iter().zip(with_txn).all(|(g, w)| g == w),
                "step {step}: {got:?}"
            ),
            other => panic!("step {step}: offset {other:?}"),
        }
        if synced.is_ok() {
            assert_eq!(offset, Some(2));
            break;
        }
    }
}
