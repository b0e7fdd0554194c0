//! riffle's tasks: task states, the per-thread task registry, the state updater, and the
//! incremental offset-sum snapshot that the heartbeat reports (docs/design.md §2–4, KAFKA-21171).
//!
//! What this crate owns:
//! - [`TaskKind`], [`TaskState`] and the legal transitions; an illegal one is an
//!   [`Error::IllegalTransition`] naming the task and both states;
//! - [`TaskRegistry`]: one per stream thread, pure state, with a version and a bounded journal of
//!   changed tasks;
//! - [`LiveOffsets`]: changelog positions of a thread's non-running tasks, shared with its state
//!   updater, versioned and journaled per task sum;
//! - the state updater: [`StateUpdater`] (pure core, driven by `tick`) and
//!   [`StateUpdaterThread`] (the named thread `riffle-state-updater`), reading changelogs through
//!   the [`ChangelogReader`] trait and applying them through [`RestoreTarget`];
//! - [`OffsetSumSnapshot`]: the task → offset-sum map, refreshed from three versioned sources and
//!   published as an `imbl::HashMap` plus a version.
//!
//! What it must never do: the snapshot **never iterates the task set, takes a lock or allocates
//! when no version moved** — a refresh is then three integer comparisons. The registry and the
//! snapshot do no I/O and start no threads; only `StateUpdaterThread` does.
//!
//! # How a stream thread drives it
//!
//! Per process: one `Arc<StateDirectory>` (crate `riffle-state-dir`). Per stream thread: one
//! [`TaskRegistry`], one `Arc<`[`LiveOffsets`]`>`, one [`StateUpdaterThread`] sharing those live
//! offsets, one [`OffsetSumSnapshot`] (strategy from `snapshot_strategy`).
//!
//! - assignment: [`TaskRegistry::add`] / [`remove`](TaskRegistry::remove) /
//!   [`set_kind`](TaskRegistry::set_kind); state changes with
//!   [`TaskRegistry::transition`] (errors on an illegal one);
//! - initialising a stateful task: [`LiveOffsets::seed`] from its checkpoint, transition to
//!   RESTORING, [`StateUpdaterThread::add`] an [`UpdaterTask`];
//! - each loop: [`StateUpdaterThread::drain_events`] → for each
//!   [`UpdaterEvent::Restored`], transition RESTORING → RUNNING; processing positions of
//!   non-running tasks go to [`LiveOffsets::set`]; commits call
//!   `StateDirectory::write_checkpoint`;
//! - then [`OffsetSumSnapshot::refresh`], and the heartbeat reads
//!   [`OffsetSumSnapshot::published`] — `(version, imbl::HashMap<TaskId, i64>)` — and sends only
//!   if the version differs from the last one sent.
//!
//! # The three versions
//!
//! Each source counts its changes in a `u64` version and records the changed task in a bounded
//! journal ([`riffle_state_dir::ChangeJournal`]); a version moves only when something actually
//! changed (a checkpoint rewritten with the same sum does not move it):
//! - [`TaskRegistry::version`] — add, remove, transition, kind change (single-threaded);
//! - `StateDirectory::local_offsets().version()` — checkpoint written or read, task directory
//!   deleted (process-wide, an atomic mirror of a mutex-guarded map);
//! - [`LiveOffsets::version`] — a task's live offset sum changed (the state updater and the
//!   stream thread).
//!
//! The snapshot remembers the three versions it last saw. If a journal was truncated past the
//! version it needs, or it is handed a different source, it rebuilds from scratch
//! ([`SnapshotMetrics::truncated_journal_rebuilds`]).
//!
//! Feature `alloc-counter` adds the module `alloc_counter`, a counting global allocator for tests and
//! benchmarks.
//!
//! ```
//! use std::sync::Arc;
//! use riffle_state_dir::{TopicPartition, StateDirectory, TaskId};
//! use riffle_task_manager::{
//!     LiveOffsets, OffsetSumSnapshot, SnapshotStrategy, TaskKind, TaskRegistry, TaskState,
//! };
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = tempfile::tempdir()?;
//! let dir = StateDirectory::open(root.path(), "app")?;   // shared by all stream threads
//! let live = Arc::new(LiveOffsets::new());               // shared with this thread's updater
//! let mut registry = TaskRegistry::new();                // this thread's tasks
//! let mut snapshot = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
//!
//! let task = TaskId::new(0, 1);
//! let changelog = TopicPartition::new("app-store-changelog", 1);
//! registry.add(task, TaskKind::Active, vec![changelog.clone()])?;
//! registry.transition(task, TaskState::Restoring)?;
//! live.set(task, &changelog, 500); // the state updater's progress
//!
//! assert!(snapshot.refresh(&registry, &dir, &live));
//! let (version, offsets) = snapshot.published();
//! assert_eq!(offsets.get(&task), Some(&500));
//!
//! // Nothing moved: O(1), no allocation, same version.
//! assert!(!snapshot.refresh(&registry, &dir, &live));
//! assert_eq!(snapshot.version(), version);
//!
//! // A running active task is caught up by definition, so it is omitted.
//! registry.transition(task, TaskState::Running)?;
//! assert!(snapshot.refresh(&registry, &dir, &live));
//! assert!(snapshot.map().is_empty());
//! # Ok(()) }
//! ```

#[cfg(feature = "alloc-counter")]
pub mod alloc_counter;
mod error;
mod live_offsets;
mod registry;
mod snapshot;
mod task;
mod updater;
mod updater_thread;

pub use crate::{
    error::{BoxError, Error, Result},
    live_offsets::LiveOffsets,
    registry::TaskRegistry,
    snapshot::{
        OffsetSumSnapshot, SnapshotMetrics, SnapshotStrategy, full_rebuild, owned_task_sum,
    },
    task::{Task, TaskKind, TaskState},
    updater::{
        ChangelogReader, ChangelogRecord, DEFAULT_RESTORE_BATCH, RestoreTarget, StateUpdater,
        UpdaterEvent, UpdaterTask,
    },
    updater_thread::{StateUpdaterConfig, StateUpdaterThread},
};
pub use riffle_state_dir::{TaskId, TopicPartition};
