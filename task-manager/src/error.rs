//! The task manager's errors.

use riffle_state_dir::{TaskId, TopicPartition};

use crate::task::TaskState;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a [`ChangelogReader`](crate::ChangelogReader) or a
/// [`RestoreTarget`](crate::RestoreTarget) implementation.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the task manager.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A state transition outside docs/design.md §2 — a bug in the caller.
    #[error("task {task}: illegal transition {from} -> {to}")]
    IllegalTransition {
        /// The task.
        task: TaskId,
        /// Its state.
        from: TaskState,
        /// The state asked for.
        to: TaskState,
    },
    /// The task is not in the registry.
    #[error("task {0} is not registered")]
    UnknownTask(TaskId),
    /// The task is already in the registry.
    #[error("task {0} is already registered")]
    DuplicateTask(TaskId),
    /// Reading a changelog failed.
    #[error("task {task}: reading changelog {partition}: {source}")]
    Changelog {
        /// The task.
        task: TaskId,
        /// The changelog partition.
        partition: TopicPartition,
        /// The reader's error.
        #[source]
        source: BoxError,
    },
    /// Applying restored records failed.
    #[error("task {task}: applying changelog {partition}: {source}")]
    Restore {
        /// The task.
        task: TaskId,
        /// The changelog partition.
        partition: TopicPartition,
        /// The target's error.
        #[source]
        source: BoxError,
    },
    /// The state updater thread is gone (it panicked or was shut down).
    #[error("the state updater thread has stopped")]
    UpdaterStopped,
    /// Spawning the state updater thread failed.
    #[error("spawning the state updater thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// From the state directory.
    #[error(transparent)]
    StateDir(#[from] riffle_state_dir::Error),
}
