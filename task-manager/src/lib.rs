//! riffle's tasks: task states, the per-thread task registry, the state updater, and the
//! incremental offset-sum snapshot that the heartbeat reports (design.md §1–3, KAFKA-21171).
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
//! ```
//! use std::sync::Arc;
//! use riffle_state_dir::{ChangelogPartition, StateDirectory, TaskId};
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
//! let changelog = ChangelogPartition::new("app-store-changelog", 1);
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
pub use riffle_state_dir::{ChangelogPartition, TaskId};
