//! The offset-sum rules of docs/design.md §4, one scenario each, checked on both strategies.

use riffle_state_dir::{SharedOffsetSums, TaskId, TopicPartition};
use riffle_task_manager::{
    LiveOffsets, OffsetSumSnapshot, SnapshotStrategy, TaskKind, TaskRegistry, TaskState,
    full_rebuild,
};

fn cl(p: u32) -> TopicPartition {
    TopicPartition::new("app-store-changelog", p)
}

/// A thread's world without a disk: the local offset map is a bare `SharedOffsetSums`.
struct World {
    registry: TaskRegistry,
    local: SharedOffsetSums,
    live: LiveOffsets,
    incremental: OffsetSumSnapshot,
    full: OffsetSumSnapshot,
}

impl World {
    fn new(journal: usize) -> Self {
        Self {
            registry: TaskRegistry::with_journal_capacity(journal),
            local: SharedOffsetSums::new(journal),
            live: LiveOffsets::with_journal_capacity(journal),
            incremental: OffsetSumSnapshot::new(SnapshotStrategy::Incremental),
            full: OffsetSumSnapshot::new(SnapshotStrategy::FullRebuild),
        }
    }

    /// Refreshes both snapshots, checks they agree with each other and with `full_rebuild`,
    /// and returns the published map as sorted pairs.
    fn refresh(&mut self) -> Vec<(TaskId, i64)> {
        self.incremental
            .refresh_from(&self.registry, &self.local, self.live.sums());
        self.full
            .refresh_from(&self.registry, &self.local, self.live.sums());
        let reference = full_rebuild(
            &self.registry,
            &self.local.view().sums,
            &self.live.sums().view().sums,
        );
        assert_eq!(self.incremental.map(), &reference);
        assert_eq!(self.full.map(), &reference);
        let mut out: Vec<_> = reference.into_iter().collect();
        out.sort_unstable();
        out
    }

    fn add(&mut self, task: TaskId, kind: TaskKind, changelogs: Vec<TopicPartition>) {
        self.registry.add(task, kind, changelogs).expect("add");
    }

    fn walk(&mut self, task: TaskId, states: &[TaskState]) {
        for s in states {
            self.registry.transition(task, *s).expect("legal");
        }
    }
}

use TaskState::*;

const T: TaskId = TaskId::new(0, 1);
const U: TaskId = TaskId::new(0, 2);

#[test]
fn unowned_tasks_report_their_checkpointed_sum() {
    let mut w = World::new(16);
    w.local.set(T, Some(40));
    w.local.set(U, Some(7));
    assert_eq!(w.refresh(), [(T, 40), (U, 7)]);
    w.local.set(U, None); // task directory deleted
    assert_eq!(w.refresh(), [(T, 40)]);
}

#[test]
fn running_active_task_is_omitted_even_with_a_checkpoint() {
    let mut w = World::new(16);
    w.local.set(T, Some(40));
    w.add(T, TaskKind::Active, vec![cl(1)]);
    w.walk(T, &[Restoring, Running]);
    w.live.set(T, &cl(1), 99);
    assert_eq!(w.refresh(), []);
}

#[test]
fn created_and_closed_tasks_keep_the_checkpoint_sum() {
    let mut w = World::new(16);
    w.local.set(T, Some(40));
    w.add(T, TaskKind::Active, vec![cl(1)]);
    w.live.set(T, &cl(1), 99); // ignored: a CREATED task has no live offsets yet
    assert_eq!(w.refresh(), [(T, 40)]);
    w.walk(T, &[Restoring]);
    assert_eq!(w.refresh(), [(T, 99)]);
    w.walk(T, &[Suspended, Closed]);
    assert_eq!(w.refresh(), [(T, 40)]);
}

#[test]
fn restoring_suspended_and_standby_tasks_report_live_sums_over_the_map() {
    let mut w = World::new(16);
    w.local.set(T, Some(40));
    w.add(T, TaskKind::Active, vec![cl(1), cl(2)]);
    w.add(U, TaskKind::Standby, vec![cl(3)]);
    w.walk(T, &[Restoring]);
    w.walk(U, &[Restoring, Running]);
    // No position known yet: the sum of no known offsets is 0, as in Kafka.
    assert_eq!(w.refresh(), [(T, 0), (U, 0)]);
    w.live.set(T, &cl(1), 10);
    w.live.set(T, &cl(2), 5);
    w.live.set(U, &cl(3), 3);
    assert_eq!(w.refresh(), [(T, 15), (U, 3)]);
    w.walk(T, &[Suspended]);
    w.walk(U, &[Suspended]);
    assert_eq!(w.refresh(), [(T, 15), (U, 3)]);
}

#[test]
fn tasks_without_a_changelog_are_absent_unless_created_or_closed() {
    let mut w = World::new(16);
    w.local.set(T, Some(40)); // a stale directory from when it had a store
    w.add(T, TaskKind::Standby, vec![]);
    assert_eq!(w.refresh(), [(T, 40)]);
    w.walk(T, &[Restoring]);
    assert_eq!(w.refresh(), []);
}

#[test]
fn sums_saturate_at_i64_max() {
    let mut w = World::new(16);
    w.add(T, TaskKind::Standby, vec![cl(1), cl(2)]);
    w.walk(T, &[Restoring]);
    w.live.set(T, &cl(1), i64::MAX as u64);
    w.live.set(T, &cl(2), 1);
    assert_eq!(w.refresh(), [(T, i64::MAX)]);
}

#[test]
fn unchanged_refreshes_keep_the_version_and_count_as_unchanged() {
    let mut w = World::new(16);
    w.local.set(T, Some(1));
    w.refresh();
    let v = w.incremental.version();
    for _ in 0..10 {
        w.refresh();
    }
    assert_eq!(w.incremental.version(), v);
    let m = w.incremental.metrics();
    assert_eq!(
        (
            m.full_rebuilds,
            m.incremental_updates,
            m.unchanged_refreshes
        ),
        (1, 0, 10)
    );
    assert_eq!(
        w.full.metrics().full_rebuilds,
        11,
        "the reference rebuilds every time"
    );

    // A change that cancels out moves a source's version but not the snapshot's.
    w.add(U, TaskKind::Active, vec![]);
    w.registry.remove(U);
    w.refresh();
    assert_eq!(w.incremental.version(), v);
    assert_eq!(w.incremental.metrics().incremental_updates, 1);
}

#[test]
fn a_truncated_journal_forces_a_counted_full_rebuild() {
    let mut w = World::new(4);
    w.add(T, TaskKind::Standby, vec![cl(1)]);
    w.walk(T, &[Restoring]);
    w.refresh();
    for offset in 1..=10 {
        w.live.set(T, &cl(1), offset); // 10 changes through a journal of 4
    }
    assert_eq!(w.refresh(), [(T, 10)]);
    let m = w.incremental.metrics();
    assert_eq!((m.full_rebuilds, m.truncated_journal_rebuilds), (2, 1));
}

#[test]
fn published_map_is_an_independent_o1_copy() {
    let mut w = World::new(16);
    w.local.set(T, Some(1));
    w.refresh();
    let (v1, before) = w.incremental.published();
    w.local.set(T, Some(2));
    w.refresh();
    let (v2, after) = w.incremental.published();
    assert_eq!((before.get(&T), after.get(&T)), (Some(&1), Some(&2)));
    assert_eq!(v2, v1 + 1);
}

#[test]
fn strategy_parses_from_config_names() {
    assert_eq!("full-rebuild".parse(), Ok(SnapshotStrategy::FullRebuild));
    assert_eq!("incremental".parse(), Ok(SnapshotStrategy::Incremental));
    assert!("fast".parse::<SnapshotStrategy>().is_err());
    assert_eq!(SnapshotStrategy::FullRebuild.to_string(), "full-rebuild");
}
