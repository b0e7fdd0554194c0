//! Transactions and plain appends from several threads on overlapping partitions: offsets stay
//! dense, every transaction's base offsets point at its own batches, a reader never sees one
//! partition of a transaction without the other, and everything is still there after reopening.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use common::read_all;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

const TXNS: usize = 60;

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("out", p)
}

fn value(record: &(u64, common::Model)) -> String {
    String::from_utf8_lossy(record.1.2.as_deref().unwrap_or_default()).into_owned()
}

/// The transaction ids whose records are in the partition (values `txn-<writer>-<i>-<j>`).
fn txn_ids(log: &Log, p: u32) -> BTreeSet<String> {
    read_all(log, &tp(p), 0, 1 << 20)
        .iter()
        .map(value)
        .filter(|v| v.starts_with("txn-"))
        .map(|v| v.rsplit_once('-').map(|(id, _)| id.to_owned()).unwrap_or(v))
        .collect()
}

#[test]
fn concurrent_transactions_and_appends_keep_offsets_dense_and_transactions_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Small segments and journal: rolls and checkpoints happen while the threads run.
    let options = LogOptions::default()
        .with_segment_bytes(2048)
        .with_txn_journal_bytes(8192);
    let log = Log::open(dir.path(), options.clone()).expect("open");
    log.create_topic("out", 2).expect("create");
    log.create_topic("in", 1).expect("create");
    let done = Arc::new(AtomicBool::new(false));

    let transactional = |writer: u32| {
        let log = log.clone();
        thread::spawn(move || {
            let group = format!("g{writer}");
            let (mut a, mut b) = (BatchBuilder::new(Compression::Lz4), BatchBuilder::default());
            let mut placed = Vec::new();
            for i in 0..TXNS {
                for j in 0..3 {
                    a.push(0, None, Some(format!("txn-{writer}-{i}-{j}").as_bytes()));
                }
                b.push(0, None, Some(format!("txn-{writer}-{i}-0").as_bytes()));
                let offset = [(TopicPartition::new("in", 0), i as u64 + 1)];
                let mut batches = [(tp(writer % 2), &mut a), (tp(1 - writer % 2), &mut b)];
                let bases = log
                    .commit_transaction(&group, &mut batches, &offset)
                    .expect("transaction");
                assert!(a.is_empty() && b.is_empty());
                placed.push((i, bases));
            }
            (writer, placed)
        })
    };
    let plain = |p: u32| {
        let log = log.clone();
        thread::spawn(move || {
            let mut b = BatchBuilder::default();
            for i in 0..TXNS {
                b.push(0, None, Some(format!("plain-{p}-{i}").as_bytes()));
                b.push(0, None, Some(format!("plain-{p}-{i}").as_bytes()));
                log.append(&tp(p), &mut b).expect("append");
            }
        })
    };
    let reader = {
        let (log, done) = (log.clone(), Arc::clone(&done));
        thread::spawn(move || {
            let mut checks = 0;
            while !done.load(Ordering::SeqCst) {
                // Both of a transaction's batches become visible together: whatever is in
                // out-0 now must be in out-1 when read afterwards, and the other way round.
                let first = txn_ids(&log, 0);
                assert!(txn_ids(&log, 1).is_superset(&first));
                let first = txn_ids(&log, 1);
                assert!(txn_ids(&log, 0).is_superset(&first));
                checks += 1;
            }
            checks
        })
    };
    let writers = [transactional(0), transactional(1)];
    let appenders = [plain(0), plain(1)];
    appenders
        .into_iter()
        .for_each(|h| h.join().expect("appender"));
    let placed: Vec<_> = writers
        .into_iter()
        .map(|h| h.join().expect("writer"))
        .collect();
    done.store(true, Ordering::SeqCst);
    assert!(reader.join().expect("reader") > 0);

    let check = |log: &Log| {
        let all: Vec<Vec<String>> = (0..2)
            .map(|p| read_all(log, &tp(p), 0, 1000).iter().map(value).collect())
            .collect();
        for p in 0..2 {
            // Dense: 2 writers × (3 + 1 records) spread over both, plus 2 per plain append.
            assert_eq!(
                log.end_offset(&tp(p)).expect("end"),
                all[p as usize].len() as u64
            );
        }
        assert_eq!(all[0].len() + all[1].len(), 2 * TXNS * 4 + 2 * TXNS * 2);
        for (writer, txns) in &placed {
            for (i, bases) in txns {
                let big = (writer % 2) as usize;
                for j in 0..3 {
                    let at = bases[0] as usize + j;
                    assert_eq!(all[big][at], format!("txn-{writer}-{i}-{j}"));
                }
                assert_eq!(
                    all[1 - big][bases[1] as usize],
                    format!("txn-{writer}-{i}-0")
                );
            }
            let g = format!("g{writer}");
            let committed = log.committed_offset(&g, &TopicPartition::new("in", 0));
            assert_eq!(committed.expect("offset"), Some(TXNS as u64));
        }
    };
    check(&log);
    drop(log);
    check(&Log::open(dir.path(), options).expect("reopen"));
}
