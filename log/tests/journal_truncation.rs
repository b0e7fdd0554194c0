//! The transaction journal does not grow without bound: past `txn_journal_bytes` a checkpoint
//! empties it, opening a log empties it after replaying it, and nothing committed is lost on
//! the way, across several reopens.

mod common;

use common::read_all;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

fn journal_len(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("txn/journal")).map_or(0, |m| m.len())
}

#[test]
fn the_journal_is_truncated_at_checkpoints_and_on_open_and_keeps_working_across_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limit = 4096;
    let options = LogOptions::default().with_txn_journal_bytes(limit);
    let out = TopicPartition::new("out", 0);
    let input = TopicPartition::new("in", 0);
    let mut committed = 0u64;
    let mut b = BatchBuilder::new(Compression::Zstd);
    for round in 0..3 {
        let log = Log::open(dir.path(), options.clone()).expect("open");
        // Opening replayed whatever the last run left in the journal, then emptied it.
        assert_eq!(journal_len(dir.path()), 0, "round {round}");
        log.create_topic("out", 1).expect("create");
        log.create_topic("in", 1).expect("create");
        let mut largest = 0;
        // At least 100 transactions, and end with some only in the journal (not checkpointed).
        for i in 0.. {
            if i >= 100 && journal_len(dir.path()) > 0 {
                break;
            }
            for _ in 0..5 {
                b.push(0, Some(b"k"), Some(format!("value-{committed}").as_bytes()));
            }
            committed += 1;
            let bases = log
                .commit_transaction(
                    "g",
                    &mut [(out.clone(), &mut b)],
                    &[(input.clone(), committed)],
                )
                .expect("transaction");
            assert_eq!(bases, vec![(committed - 1) * 5]);
            largest = largest.max(journal_len(dir.path()));
        }
        // Checkpoints kept it near the limit (one record of ~150 bytes past it at most).
        assert!(
            largest > 0 && largest <= limit + 512,
            "journal reached {largest} bytes"
        );
        assert!(
            journal_len(dir.path()) > 0,
            "the last transactions are only in the journal"
        );
        assert_eq!(
            log.committed_offset("g", &input).expect("offset"),
            Some(committed)
        );
        // No close: the next open replays the journal's tail as after a crash.
    }
    let log = Log::open(dir.path(), options).expect("open");
    assert_eq!(journal_len(dir.path()), 0);
    assert_eq!(
        log.committed_offset("g", &input).expect("offset"),
        Some(committed)
    );
    let records = read_all(&log, &out, 0, 1 << 16);
    assert_eq!(records.len() as u64, committed * 5);
    for (i, (offset, (_, _, value))) in records.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        assert_eq!(
            value.as_deref(),
            Some(format!("value-{}", i / 5).as_bytes())
        );
    }
    // A plain commit of the same group checkpoints first: the journal cannot roll it back.
    let mut b = BatchBuilder::default();
    b.push(0, None, Some(b"x"));
    log.commit_transaction("g", &mut [(out.clone(), &mut b)], &[(input.clone(), 1000)])
        .expect("transaction");
    log.commit_offsets("g", &[(input.clone(), 7)])
        .expect("commit");
    assert_eq!(journal_len(dir.path()), 0);
    drop(log);
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    assert_eq!(log.committed_offset("g", &input).expect("offset"), Some(7));
    assert_eq!(log.end_offset(&out).expect("end"), committed * 5 + 1);
}
