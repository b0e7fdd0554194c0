//! Random sequences of transactions, plain appends, offset commits, syncs and crashes — a crash
//! either plain or after a storage failure in the middle of an operation — checked against a
//! simple model: after every crash each partition holds a prefix of what was written, every
//! transaction is there entirely or not at all, nothing acknowledged as durable is missing, and
//! the group's offset is that of the last commit that survived.

use proptest::prelude::*;

use crate::{BatchBuilder, Compression, FsyncPolicy, Log, LogOptions, Result, TopicPartition};

const PARTS: [(&str, u32); 3] = [("out", 0), ("out", 1), ("changelog", 0)];

#[derive(Debug, Clone)]
enum Op {
    Append {
        part: usize,
        n: usize,
    },
    /// `(part, records)`; zero records is an empty builder.
    Txn {
        batches: Vec<(usize, usize)>,
        offset: u64,
    },
    Commit {
        offset: u64,
    },
    Sync,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..PARTS.len(), 1..4usize).prop_map(|(part, n)| Op::Append { part, n }),
        5 => (proptest::collection::vec((0..PARTS.len(), 0..4usize), 1..5), any::<u16>())
            .prop_map(|(batches, offset)| Op::Txn { batches, offset: offset.into() }),
        1 => any::<u16>().prop_map(|offset| Op::Commit { offset: offset.into() }),
        1 => Just(Op::Sync),
        1 => Just(Op::Crash),
    ]
}

fn tp(part: usize) -> TopicPartition {
    let (topic, p) = PARTS.get(part).copied().unwrap_or(PARTS[0]);
    TopicPartition::new(topic, p)
}

fn input() -> TopicPartition {
    TopicPartition::new("in", 0)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Survived,
    Unknown,
}

#[derive(Default)]
struct Model {
    /// What each partition holds if every operation so far succeeded.
    live: Vec<Vec<String>>,
    /// How much of each partition a crash must keep.
    durable: Vec<usize>,
    /// Transactions since the last crash: `(part, base, records)` of their non-empty batches.
    txns: Vec<Vec<(usize, usize, usize)>>,
    /// Offset commits since the last crash: value, outcome (a transaction's: its index).
    commits: Vec<(Option<u64>, Result<Outcome, usize>)>,
}

fn values(log: &Log, tp: &TopicPartition) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let end = log.end_offset(tp)?;
    while (out.len() as u64) < end {
        for batch in log.fetch(tp, out.len() as u64, 1 << 20)? {
            for record in batch.records() {
                let value = record?
                    .value()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                out.push(value.unwrap_or_default());
            }
        }
    }
    Ok(out)
}

impl Model {
    /// Checks the crashed log `after` against the model, then makes it the model's new start.
    fn crashed(&mut self, after: &Log) -> Result<(), TestCaseError> {
        let mut recovered = Vec::new();
        for part in 0..PARTS.len() {
            let got = values(after, &tp(part)).expect("read");
            let live = &self.live[part];
            prop_assert!(
                got.len() <= live.len() && got[..] == live[..got.len()],
                "{}",
                tp(part)
            );
            prop_assert!(
                got.len() >= self.durable[part],
                "{} lost durable data",
                tp(part)
            );
            recovered.push(got);
        }
        let present: Vec<Option<bool>> = self
            .txns
            .iter()
            .map(|placed| {
                let there =
                    |&(part, base, n): &(usize, usize, usize)| recovered[part].len() >= base + n;
                let all = placed.iter().all(there);
                let none = !placed.iter().any(there);
                (all || none).then_some(all && !placed.is_empty())
            })
            .collect();
        prop_assert!(
            present.iter().all(Option::is_some),
            "a transaction is partly there: {present:?}"
        );
        let survived = |outcome: &Result<Outcome, usize>| match outcome {
            Ok(o) => Some(*o == Outcome::Survived),
            Err(txn) if self.txns[*txn].is_empty() => None,
            Err(txn) => present[*txn],
        };
        let last = self
            .commits
            .iter()
            .rposition(|(_, o)| survived(o) == Some(true))
            .unwrap_or(0);
        let candidates: Vec<Option<u64>> = self.commits[last..]
            .iter()
            .enumerate()
            .filter(|(i, (_, o))| *i == 0 || survived(o).is_none())
            .map(|(_, (v, _))| *v)
            .collect();
        let offset = after.committed_offset("g", &input()).expect("offset");
        prop_assert!(
            candidates.contains(&offset),
            "offset {offset:?}, expected one of {candidates:?}"
        );
        self.durable = recovered.iter().map(Vec::len).collect();
        self.live = recovered;
        self.txns.clear();
        self.commits = vec![(offset, Ok(Outcome::Survived))];
        Ok(())
    }

    fn all_durable(&mut self) {
        self.durable = self.live.iter().map(Vec::len).collect();
    }
}

fn run(
    fsync: FsyncPolicy,
    journal_bytes: u64,
    ops: &[(Op, Option<u8>)],
) -> Result<(), TestCaseError> {
    let options = LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(300)
        .with_txn_journal_bytes(journal_bytes);
    let mut log = Log::in_memory_with_options(options);
    log.create_topic("in", 1).expect("create");
    log.create_topic("out", 2).expect("create");
    log.create_topic("changelog", 1).expect("create");
    let mut m = Model {
        live: vec![Vec::new(); PARTS.len()],
        durable: vec![0; PARTS.len()],
        commits: vec![(None, Ok(Outcome::Survived))],
        ..Model::default()
    };
    for (step, (op, fault)) in ops.iter().enumerate() {
        log.fail_storage_after(fault.map(u64::from));
        let value = |batch: usize, i: usize| format!("{step}-{batch}-{i}");
        let outcome = |ok: bool| {
            if ok {
                Outcome::Survived
            } else {
                Outcome::Unknown
            }
        };
        let ok = match op {
            Op::Append { part, n } => {
                let mut b = BatchBuilder::new(Compression::Lz4);
                (0..*n).for_each(|i| b.push(0, None, Some(value(0, i).as_bytes())));
                let result = log.append(&tp(*part), &mut b);
                if let Ok(base) = &result {
                    prop_assert_eq!(*base as usize, m.live[*part].len());
                }
                m.live[*part].extend((0..*n).map(|i| value(0, i)));
                result.is_ok()
            }
            Op::Txn { batches, offset } => {
                let mut builders: Vec<BatchBuilder> = batches
                    .iter()
                    .enumerate()
                    .map(|(j, &(_, n))| {
                        let mut b = BatchBuilder::new(Compression::None);
                        (0..n).for_each(|i| b.push(0, None, Some(value(j, i).as_bytes())));
                        b
                    })
                    .collect();
                let mut args: Vec<(TopicPartition, &mut BatchBuilder)> = batches
                    .iter()
                    .zip(builders.iter_mut())
                    .map(|(&(part, _), b)| (tp(part), b))
                    .collect();
                let result = log.commit_transaction("g", &mut args, &[(input(), *offset)]);
                let mut placed = Vec::new();
                let mut bases = Vec::new();
                for (j, &(part, n)) in batches.iter().enumerate() {
                    bases.push(m.live[part].len() as u64);
                    if n > 0 {
                        placed.push((part, m.live[part].len(), n));
                        m.live[part].extend((0..n).map(|i| value(j, i)));
                    }
                }
                if let Ok(got) = &result {
                    prop_assert_eq!(got, &bases);
                }
                m.commits.push((Some(*offset), Err(m.txns.len())));
                m.txns.push(placed);
                result.is_ok()
            }
            Op::Commit { offset } => {
                let ok = log.commit_offsets("g", &[(input(), *offset)]).is_ok();
                m.commits.push((Some(*offset), Ok(outcome(ok))));
                ok
            }
            Op::Sync => log.sync().is_ok(),
            Op::Crash => true,
        };
        let durable_now = matches!(
            (op, fsync),
            (Op::Sync, _)
                | (Op::Append { .. } | Op::Txn { .. }, FsyncPolicy::EveryAppend)
                | (Op::Txn { .. } | Op::Commit { .. }, FsyncPolicy::EveryCommit)
        );
        if ok && durable_now {
            m.all_durable();
        }
        if fault.is_some() || matches!(op, Op::Crash) {
            log = log.crash_and_reopen().expect("recovery").expect("memory");
            m.crashed(&log)?;
        } else {
            prop_assert!(ok, "step {step}: {op:?} failed without a fault");
        }
    }
    let last = log.crash_and_reopen().expect("recovery").expect("memory");
    m.crashed(&last)
}

fn policy() -> impl Strategy<Value = FsyncPolicy> {
    prop_oneof![
        Just(FsyncPolicy::EveryCommit),
        Just(FsyncPolicy::EveryAppend),
        Just(FsyncPolicy::Never)
    ]
}

proptest! {
    // 64 cases by default; PROPTEST_CASES=<n> for a longer run.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn transactions_appends_and_crashes_match_the_model(
        fsync in policy(),
        journal_bytes in prop_oneof![Just(1u64), 200u64..3000, Just(32 << 20)],
        ops in proptest::collection::vec(
            (op(), proptest::option::weighted(0.2, 0u8..40)), 1..40),
    ) {
        run(fsync, journal_bytes, &ops)?;
    }
}
