//! Target `txn_journal`: the transaction journal read by recovery.
//!
//! Input: one mode byte, then the rest: bit 0 clear, the rest describes the model's transactions
//! and edits; set, the rest is a raw journal (bit 1: with each record's checksum fixed).
//!
//! - *Model*: random transactions (batches to three partitions, offsets of two groups) are
//!   committed to an in-memory log; its journal is then put, damaged by random edits (cuts,
//!   flips, overwrites; optionally each record's checksum fixed afterwards), next to empty
//!   partitions — a crash after the commit points and before any partition write was durable.
//!   An open must either fail with a corruption error or redo exactly the first *k*
//!   transactions, each whole: the partitions hold those batches and the groups those offsets.
//!   With only a cut, it must redo every transaction wholly before the cut; unedited, all of
//!   them. (With checksums fixed an edit can change what a record says, so only the error kind
//!   and the second open are checked.) A second open changes no file and sees the same.
//! - *Raw*: the fuzzer's bytes as the journal next to a topic of three partitions: no panic, an
//!   error is a corruption error, and a second open agrees with the first and changes nothing.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use riffle_log::fuzzing::MemDir;
use riffle_log::{BatchBuilder, Log, LogOptions, TopicPartition};

use crate::model::{Rec, read_all};
use crate::{assert_data_error, codec, tp};

const PARTITIONS: u32 = 3;
const GROUPS: [&str; 2] = ["g1", "g2"];
const JOURNAL: &str = "txn/journal";

#[derive(Arbitrary, Debug)]
struct Txn {
    group: bool,
    batches: Vec<(u8, u8, Vec<Rec>)>,
    offsets: Vec<(u8, u64)>,
}

#[derive(Arbitrary, Debug)]
enum Edit {
    Cut(u16),
    Flip { at: u16, bit: u8 },
    Set { at: u16, byte: u8 },
}

#[derive(Arbitrary, Debug)]
struct ModelInput {
    txns: Vec<Txn>,
    edits: Vec<Edit>,
    fix_crcs: bool,
}

/// The log's state after some transactions: records per partition, offsets per group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct State {
    records: Vec<Vec<Rec>>,
    offsets: BTreeMap<(String, u32), u64>,
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        if let Ok(m) = ModelInput::arbitrary_take_rest(Unstructured::new(rest)) {
            model(&m.txns, &m.edits, m.fix_crcs);
        }
    } else {
        raw(rest.to_vec(), mode & 2 != 0);
    }
}

fn options() -> LogOptions {
    LogOptions::default().with_txn_journal_bytes(u64::MAX)
}

/// A log directory with topic `t` of three empty partitions (one empty segment each) and
/// `journal`.
fn dir_with(journal: &[u8]) -> MemDir {
    let dir = MemDir::new();
    dir.write("topics/t/partitions", format!("{PARTITIONS}\n").as_bytes());
    for p in 0..PARTITIONS {
        for ext in ["log", "index"] {
            dir.write(&format!("topics/t/{p}/00000000000000000000.{ext}"), b"");
        }
    }
    dir.write(JOURNAL, journal);
    dir
}

/// Rewrites each record's CRC (FORMAT.md: magic, body length, CRC of the body) to match.
fn fix_journal_crcs(j: &mut [u8]) {
    let mut pos = 0usize;
    while j.len() - pos >= 12 {
        let len = u32::from_be_bytes([j[pos + 4], j[pos + 5], j[pos + 6], j[pos + 7]]) as usize;
        let Some(body) = j.get(pos + 12..).and_then(|b| b.get(..len)) else {
            return;
        };
        let crc = crc32c::crc32c(body);
        j[pos + 8..pos + 12].copy_from_slice(&crc.to_be_bytes());
        pos += 12 + len;
    }
}

fn state_of(log: &Log) -> State {
    let mut s = State::default();
    for p in 0..PARTITIONS {
        let got = read_all(log, &tp(p), 0, 1 << 20).expect("replayed partitions read back");
        s.records.push(got.into_iter().map(|(_, r)| r).collect());
    }
    for g in GROUPS {
        for p in 0..PARTITIONS {
            if let Some(o) = log.committed_offset(g, &tp(p)).expect("committed offset") {
                s.offsets.insert((g.to_owned(), p), o);
            }
        }
    }
    s
}

fn model(txns: &[Txn], edits: &[Edit], fix_crcs: bool) {
    let source = MemDir::new();
    let log = source.open(options()).expect("open an empty log");
    log.create_topic(crate::TOPIC, PARTITIONS)
        .expect("create topic");
    // states[k]: after the first k transactions.
    let mut states = vec![State {
        records: vec![Vec::new(); PARTITIONS as usize],
        ..State::default()
    }];
    let mut ends = vec![0u64]; // journal length after each transaction
    for txn in txns.iter().take(6) {
        let group = GROUPS[usize::from(txn.group)];
        let mut next = states.last().cloned().unwrap_or_default();
        let mut builders: Vec<(TopicPartition, BatchBuilder)> = Vec::new();
        for (p, c, records) in txn.batches.iter().take(4) {
            let p = u32::from(*p) % PARTITIONS;
            if builders.iter().any(|(t, _)| t.partition == p) {
                continue; // one batch per partition and transaction
            }
            let mut b = crate::builder(codec(*c));
            for r in records {
                r.push(&mut b);
            }
            next.records[p as usize].extend(records.iter().cloned());
            builders.push((tp(p), b));
        }
        let offsets: Vec<(TopicPartition, u64)> = txn
            .offsets
            .iter()
            .take(4)
            .map(|&(p, o)| (tp(u32::from(p) % PARTITIONS), o))
            .collect();
        for (t, o) in &offsets {
            next.offsets.insert((group.to_owned(), t.partition), *o);
        }
        let mut refs: Vec<(TopicPartition, &mut BatchBuilder)> =
            builders.iter_mut().map(|(t, b)| (t.clone(), b)).collect();
        log.commit_transaction(group, &mut refs, &offsets)
            .expect("commit a transaction");
        for (_, b) in builders {
            crate::give_back(b);
        }
        states.push(next);
        ends.push(source.read(JOURNAL).map_or(0, |j| j.len() as u64));
    }
    drop(log);
    let original = source.read(JOURNAL).unwrap_or_default();
    let mut journal = original.clone();
    let mut cut_only = true;
    for e in edits.iter().take(8) {
        match *e {
            Edit::Cut(at) => journal.truncate(usize::from(at)),
            Edit::Flip { at, bit } if !journal.is_empty() => {
                let i = usize::from(at) % journal.len();
                journal[i] ^= 1 << (bit % 8);
                cut_only = false;
            }
            Edit::Set { at, byte } if !journal.is_empty() => {
                let i = usize::from(at) % journal.len();
                cut_only &= journal[i] == byte;
                journal[i] = byte;
            }
            _ => {}
        }
    }
    if fix_crcs {
        fix_journal_crcs(&mut journal);
        cut_only &= original.starts_with(&journal);
    }
    let dir = dir_with(&journal);
    let opened = dir.open(options());
    let log = match opened {
        Ok(log) => log,
        Err(e) => {
            assert!(
                !cut_only,
                "a journal cut at {} must open: {e}",
                journal.len()
            );
            assert_data_error(&e, "journal replay");
            return;
        }
    };
    let got = state_of(&log);
    let whole = ends
        .iter()
        .filter(|&&end| end <= journal.len() as u64)
        .count()
        - 1;
    if cut_only {
        assert!(
            got == states[whole],
            "a journal cut at {} must redo the {whole} transactions before it",
            journal.len()
        );
    } else if !fix_crcs {
        // A damaged record: the transactions before it, each whole, and nothing after.
        assert!(
            states.contains(&got),
            "recovery redid something other than whole transactions from the start"
        );
    }
    drop(log);
    let before = dir.snapshot();
    let log = dir.open(options()).expect("a recovered log reopens");
    assert!(dir.snapshot() == before, "a second open changed the files");
    assert!(state_of(&log) == got, "a second open sees another state");
}

fn raw(mut journal: Vec<u8>, fix_crcs: bool) {
    if fix_crcs {
        fix_journal_crcs(&mut journal);
    }
    let dir = dir_with(&journal);
    let first = dir.open(options());
    let after = dir.snapshot();
    let second = dir.open(options());
    assert!(dir.snapshot() == after, "a second open changed the files");
    match (first, second) {
        (Ok(_), Ok(_)) => {}
        (Err(a), Err(b)) => {
            assert_data_error(&a, "journal replay");
            assert_eq!(a.to_string(), b.to_string(), "two opens disagree");
        }
        (a, b) => panic!("two opens of the same files disagree: {a:?} / {b:?}"),
    }
}
