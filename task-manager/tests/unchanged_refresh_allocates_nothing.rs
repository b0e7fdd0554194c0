//! An unchanged refresh at 5,000 tasks allocates nothing (KAFKA-21171 measured ~1.7–4.1 MB).
//!
//! Its own test binary, because it installs a counting global allocator.

use std::sync::Arc;

use riffle_state_dir::{
    Checkpoint, Durability, StateDirectory, StateDirectoryConfig, TaskId, TopicPartition,
};
use riffle_task_manager::alloc_counter::{CountingAllocator, measure};
use riffle_task_manager::{
    LiveOffsets, OffsetSumSnapshot, SnapshotStrategy, TaskKind, TaskRegistry, TaskState,
};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const TASKS: u32 = 5_000;

const UNOWNED: u32 = 1_000;

fn changelog(p: u32) -> TopicPartition {
    TopicPartition::new("app-store-changelog", p)
}

/// A state directory with a checkpoint for each of `TASKS` tasks `0_p` and `UNOWNED` tasks `1_p`.
fn state_dir() -> (tempfile::TempDir, Arc<StateDirectory>) {
    // tmpfs when there is one: 12k file writes on a VM disk take seconds even without fsync.
    let root = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tempdir");
    let config = StateDirectoryConfig {
        durability: Durability::Buffered,
        ..StateDirectoryConfig::default()
    };
    let dir = StateDirectory::open_with(root.path(), "app", config).expect("open");
    for (sub, n) in [(0, TASKS), (1, UNOWNED)] {
        for p in 0..n {
            let cp: Checkpoint = [(changelog(p), u64::from(p))].into_iter().collect();
            dir.write_checkpoint(TaskId::new(sub, p), &cp)
                .expect("checkpoint");
        }
    }
    (root, dir)
}

/// `TASKS` owned tasks `0_p` of `kind` in `state`, each with one changelog partition.
fn owned(kind: TaskKind, state: TaskState) -> (TaskRegistry, LiveOffsets) {
    let mut registry = TaskRegistry::new();
    let live = LiveOffsets::new();
    let path: &[TaskState] = match state {
        TaskState::Created => &[],
        TaskState::Restoring => &[TaskState::Restoring],
        TaskState::Running => &[TaskState::Restoring, TaskState::Running],
        TaskState::Suspended => &[TaskState::Restoring, TaskState::Suspended],
        TaskState::Closed => &[
            TaskState::Restoring,
            TaskState::Suspended,
            TaskState::Closed,
        ],
    };
    for p in 0..TASKS {
        let task = TaskId::new(0, p);
        registry.add(task, kind, vec![changelog(p)]).expect("add");
        for s in path {
            registry.transition(task, *s).expect("legal");
        }
        live.set(task, &changelog(p), u64::from(p) + 1);
    }
    (registry, live)
}

#[test]
fn unchanged_refresh_at_5000_tasks_allocates_zero_bytes() {
    let (_root, dir) = state_dir();
    for (kind, state, expected_len) in [
        (TaskKind::Active, TaskState::Running, UNOWNED),
        (TaskKind::Active, TaskState::Restoring, TASKS + UNOWNED),
        (TaskKind::Standby, TaskState::Running, TASKS + UNOWNED),
        (TaskKind::Active, TaskState::Suspended, TASKS + UNOWNED),
        (TaskKind::Active, TaskState::Created, TASKS + UNOWNED),
    ] {
        let (registry, live) = owned(kind, state);
        let mut snapshot = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
        assert!(snapshot.refresh(&registry, &dir, &live));
        assert_eq!(
            snapshot.map().len(),
            expected_len as usize,
            "{kind} {state}"
        );

        let (bytes, allocations, changed) = measure(|| {
            let mut changed = false;
            for _ in 0..1_000 {
                changed |= snapshot.refresh(&registry, &dir, &live);
                // Reading the published snapshot is an O(1) clone: no allocation either.
                let (_version, map) = snapshot.published();
                drop(map);
            }
            changed
        });
        assert!(!changed);
        assert_eq!(
            (bytes, allocations),
            (0, 0),
            "{kind} {state}: unchanged refreshes allocated"
        );
        assert_eq!(snapshot.metrics().unchanged_refreshes, 1_000);
        assert_eq!(snapshot.metrics().full_rebuilds, 1);
    }
}

#[test]
fn the_counter_sees_what_full_rebuild_and_a_one_task_update_allocate() {
    let (_root, dir) = state_dir();
    let (registry, live) = owned(TaskKind::Active, TaskState::Restoring);
    let mut full = OffsetSumSnapshot::new(SnapshotStrategy::FullRebuild);
    full.refresh(&registry, &dir, &live);
    let (full_bytes, _, _) = measure(|| full.refresh(&registry, &dir, &live));
    assert!(
        full_bytes > 100_000,
        "full rebuild of 6k entries allocated only {full_bytes} B"
    );

    let mut inc = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
    inc.refresh(&registry, &dir, &live);
    let task = TaskId::new(0, 7);
    live.set(task, &changelog(7), 1_000);
    let (one_bytes, _, changed) = measure(|| inc.refresh(&registry, &dir, &live));
    assert!(changed);
    assert_eq!(inc.map().get(&task), Some(&1_000));
    assert!(
        one_bytes * 20 < full_bytes,
        "one-task update allocated {one_bytes} B vs {full_bytes} B for a full rebuild"
    );
    assert_eq!(inc.metrics().incremental_updates, 1);
}
