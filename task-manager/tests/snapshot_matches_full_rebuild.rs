//! The invariant of docs/design.md §4: after every refresh, the incremental snapshot equals a
//! from-scratch full rebuild — over random operation sequences, with several simulated stream
//! threads (one registry, live-offset map and snapshot each) sharing one `StateDirectory`.
//!
//! Journals are tiny (8 changes) so truncation, and the fallback rebuild, happen all the time.
//! Case count: `PROPTEST_CASES`, default 10,000 (the floor for CI; about 10 s on 2 cores).

use std::path::Path;
use std::sync::{Arc, Barrier};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use riffle_state_dir::{
    Checkpoint, Durability, StateDirectory, StateDirectoryConfig, TaskId, TopicPartition,
};
use riffle_task_manager::{
    Error, LiveOffsets, OffsetSumSnapshot, SnapshotMetrics, SnapshotStrategy, TaskKind,
    TaskRegistry, TaskState, full_rebuild,
};

const THREADS: u32 = 3;
const TASKS_PER_THREAD: u32 = 4;
const JOURNAL: usize = 8;

#[derive(Clone, Copy, Debug)]
enum Source {
    Registry,
    LocalOffsets,
    LiveOffsets,
}

#[derive(Clone, Debug)]
enum Op {
    Add {
        p: u32,
        kind: TaskKind,
        changelogs: u32,
    },
    Remove {
        p: u32,
    },
    Transition {
        p: u32,
        to: TaskState,
    },
    SetKind {
        p: u32,
        kind: TaskKind,
    },
    WriteCheckpoint {
        p: u32,
        offsets: Vec<u64>,
    },
    DeleteTaskDir {
        p: u32,
    },
    AdvanceLive {
        p: u32,
        changelog: u32,
        offset: u64,
    },
    ForgetLive {
        p: u32,
    },
    OverflowJournal {
        source: Source,
        p: u32,
    },
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..1_000,
        1 => (i64::MAX as u64 - 3)..=(i64::MAX as u64),
        1 => Just(u64::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..TASKS_PER_THREAD;
    let kind = prop_oneof![Just(TaskKind::Active), Just(TaskKind::Standby)];
    let state = prop_oneof![
        Just(TaskState::Created),
        Just(TaskState::Restoring),
        Just(TaskState::Running),
        Just(TaskState::Suspended),
        Just(TaskState::Closed),
    ];
    let source = prop_oneof![
        Just(Source::Registry),
        Just(Source::LocalOffsets),
        Just(Source::LiveOffsets)
    ];
    prop_oneof![
        3 => (p.clone(), kind.clone(), 0..3u32)
            .prop_map(|(p, kind, changelogs)| Op::Add { p, kind, changelogs }),
        1 => p.clone().prop_map(|p| Op::Remove { p }),
        5 => (p.clone(), state).prop_map(|(p, to)| Op::Transition { p, to }),
        1 => (p.clone(), kind).prop_map(|(p, kind)| Op::SetKind { p, kind }),
        3 => (p.clone(), proptest::collection::vec(offset(), 0..3))
            .prop_map(|(p, offsets)| Op::WriteCheckpoint { p, offsets }),
        1 => p.clone().prop_map(|p| Op::DeleteTaskDir { p }),
        4 => (p.clone(), 0..2u32, offset())
            .prop_map(|(p, changelog, offset)| Op::AdvanceLive { p, changelog, offset }),
        1 => p.clone().prop_map(|p| Op::ForgetLive { p }),
        1 => (source, p).prop_map(|(source, p)| Op::OverflowJournal { source, p }),
    ]
}

/// One simulated stream thread.
struct StreamThread {
    thread: u32,
    registry: TaskRegistry,
    live: LiveOffsets,
    incremental: OffsetSumSnapshot,
    reference: OffsetSumSnapshot,
}

impl StreamThread {
    fn new(thread: u32) -> Self {
        let mut incremental = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
        let mut reference = OffsetSumSnapshot::new(SnapshotStrategy::FullRebuild);
        // Each refresh is checked against the very inputs it read.
        incremental.retain_inputs(true);
        reference.retain_inputs(true);
        Self {
            thread,
            registry: TaskRegistry::with_journal_capacity(JOURNAL),
            live: LiveOffsets::with_journal_capacity(JOURNAL),
            incremental,
            reference,
        }
    }

    /// Each thread works on its own tasks `<thread>_<p>`, as ownership guarantees in the runtime;
    /// it sees every other thread's tasks through the shared local offset map.
    fn task(&self, p: u32) -> TaskId {
        TaskId::new(self.thread, p)
    }

    fn changelog(&self, c: u32) -> TopicPartition {
        TopicPartition::new(format!("app-s{}-changelog", self.thread), c)
    }

    fn apply(&mut self, dir: &StateDirectory, op: &Op) {
        match *op {
            Op::Add {
                p,
                kind,
                changelogs,
            } => {
                let parts = (0..changelogs).map(|c| self.changelog(c)).collect();
                let had = self.registry.contains(self.task(p));
                let added = self.registry.add(self.task(p), kind, parts);
                assert_eq!(added.is_err(), had);
            }
            Op::Remove { p } => {
                self.registry.remove(self.task(p));
            }
            Op::Transition { p, to } => {
                let from = self.registry.get(self.task(p)).map(|t| t.state);
                match (self.registry.transition(self.task(p), to), from) {
                    (Ok(prev), Some(from)) => {
                        assert!(from.can_transition_to(to));
                        assert_eq!(prev, from);
                    }
                    (Err(Error::IllegalTransition { from: f, to: t, .. }), Some(from)) => {
                        assert!(!from.can_transition_to(to));
                        assert_eq!((f, t), (from, to));
                    }
                    (Err(Error::UnknownTask(_)), None) => {}
                    (other, from) => panic!("transition from {from:?} to {to}: {other:?}"),
                }
            }
            Op::SetKind { p, kind } => {
                let _ = self.registry.set_kind(self.task(p), kind);
            }
            Op::WriteCheckpoint { p, ref offsets } => {
                let cp: Checkpoint = offsets
                    .iter()
                    .enumerate()
                    .map(|(c, o)| (self.changelog(c as u32), *o))
                    .collect();
                let before = dir.local_offsets().get(self.task(p));
                match dir.write_checkpoint(self.task(p), &cp) {
                    Ok(()) => assert!(offsets.iter().all(|o| i64::try_from(*o).is_ok())),
                    Err(riffle_state_dir::Error::InvalidCheckpoint { .. }) => {
                        // Offsets past i64::MAX are refused, and nothing changes.
                        assert!(offsets.iter().any(|o| i64::try_from(*o).is_err()));
                        assert_eq!(dir.local_offsets().get(self.task(p)), before);
                    }
                    Err(e) => panic!("write: {e}"),
                }
            }
            Op::DeleteTaskDir { p } => dir.delete_task_dir(self.task(p)).expect("delete"),
            Op::AdvanceLive {
                p,
                changelog,
                offset,
            } => {
                self.live
                    .set(self.task(p), &self.changelog(changelog), offset);
            }
            Op::ForgetLive { p } => self.live.forget(self.task(p)),
            Op::OverflowJournal { source, p } => self.overflow(dir, source, p),
        }
    }

    /// More changes than the journal holds, so the next refresh must rebuild.
    fn overflow(&mut self, dir: &StateDirectory, source: Source, p: u32) {
        let task = self.task(p);
        for i in 0..=JOURNAL as u64 {
            match source {
                Source::Registry => {
                    // A task id outside the normal range comes and goes.
                    let spare = TaskId::new(self.thread, TASKS_PER_THREAD);
                    self.registry
                        .add(spare, TaskKind::Active, vec![])
                        .expect("add");
                    self.registry.remove(spare);
                }
                Source::LocalOffsets => {
                    let cp: Checkpoint = [(self.changelog(0), i)].into_iter().collect();
                    dir.write_checkpoint(task, &cp).expect("write");
                }
                Source::LiveOffsets => self.live.set(task, &self.changelog(1), 1_000 + i),
            }
        }
    }

    /// Refreshes both snapshots and checks each against the rules applied from scratch to the
    /// very inputs it read.
    fn refresh_and_check(&mut self, dir: &StateDirectory) {
        for snapshot in [&mut self.incremental, &mut self.reference] {
            let (old_version, old_map) = snapshot.published();
            let changed = snapshot.refresh(&self.registry, dir, &self.live);
            let (local, live) = snapshot.inputs().expect("refreshed");
            let expected = full_rebuild(&self.registry, &local.sums, &live.sums);
            assert_eq!(
                snapshot.map(),
                &expected,
                "{} snapshot",
                snapshot.strategy()
            );
            assert_eq!(changed, old_map != expected, "changed flag");
            assert_eq!(
                snapshot.version(),
                old_version + u64::from(changed),
                "version"
            );
        }
    }
}

fn check_local_map_matches_disk(dir: &StateDirectory) {
    let map = dir.local_offsets().view().sums;
    let on_disk: Vec<TaskId> = dir.list_task_dirs().expect("list");
    assert_eq!(
        map.len(),
        on_disk.len(),
        "every task dir has a checkpoint here"
    );
    for task in on_disk {
        let cp = Checkpoint::read(&dir.checkpoint_path(task)).expect("readable");
        assert_eq!(
            map.get(&task).copied(),
            cp.map(|c| c.offset_sum()),
            "{task}"
        );
    }
}

/// Runs one case; returns the incremental snapshots' metrics.
fn run(root: &Path, plans: &[Vec<Op>]) -> Vec<SnapshotMetrics> {
    let config = StateDirectoryConfig {
        journal_capacity: JOURNAL,
        durability: Durability::Buffered,
        ..StateDirectoryConfig::default()
    };
    let dir = StateDirectory::open_with(root, "app", config).expect("open");
    // Start together, so the threads' operations interleave rather than run one after another.
    let start = Barrier::new(plans.len());
    let mut threads: Vec<StreamThread> = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .iter()
            .zip(0..)
            .map(|(plan, thread)| {
                let (dir, start) = (Arc::clone(&dir), &start);
                s.spawn(move || {
                    let mut st = StreamThread::new(thread);
                    start.wait();
                    st.refresh_and_check(&dir);
                    for op in plan {
                        st.apply(&dir, op);
                        st.refresh_and_check(&dir);
                    }
                    st
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    // Quiescent now: the latest inputs are final, so compare with freshly read sources too.
    let local = dir.local_offsets().view().sums;
    for st in &mut threads {
        st.refresh_and_check(&dir);
        let expected = full_rebuild(&st.registry, &local, &st.live.sums().view().sums);
        assert_eq!(st.incremental.map(), &expected);
    }
    check_local_map_matches_disk(&dir);
    threads.iter().map(|t| t.incremental.metrics()).collect()
}

fn plans() -> impl Strategy<Value = Vec<Vec<Op>>> {
    proptest::collection::vec(proptest::collection::vec(op(), 0..16), THREADS as usize)
}

fn tempdir() -> tempfile::TempDir {
    // tmpfs when there is one: the case count is in the thousands.
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tempdir")
}

proptest! {
    // Thread interleavings make a failure hard to replay exactly: don't persist seeds.
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(10_000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn incremental_snapshot_equals_full_rebuild(plans in plans()) {
        let root = tempdir();
        run(root.path(), &plans);
    }
}

/// Guards the property test against silently exercising only one path: over a fixed set of
/// generated cases, every kind of refresh happens many times.
#[test]
fn generated_cases_exercise_every_refresh_path() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut total = SnapshotMetrics::default();
    for _ in 0..300 {
        let plans = plans().new_tree(&mut runner).expect("generate").current();
        let root = tempdir();
        for m in run(root.path(), &plans) {
            total.unchanged_refreshes += m.unchanged_refreshes;
            total.incremental_updates += m.incremental_updates;
            total.full_rebuilds += m.full_rebuilds;
            total.truncated_journal_rebuilds += m.truncated_journal_rebuilds;
        }
    }
    assert!(total.unchanged_refreshes > 100, "{total:?}");
    assert!(total.incremental_updates > 1_000, "{total:?}");
    assert!(total.truncated_journal_rebuilds > 50, "{total:?}");
}
