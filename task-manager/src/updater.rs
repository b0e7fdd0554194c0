//! The state updater: restores RESTORING active tasks and keeps standby tasks up to date from
//! their changelogs, reporting positions to [`LiveOffsets`] as they advance.
//!
//! [`StateUpdater`] is the pure core (no threads; I/O only through the [`ChangelogReader`] and
//! [`RestoreTarget`] it is given), driven by [`tick`](StateUpdater::tick). [`StateUpdaterThread`]
//! runs it on its own named thread and hands restored tasks back to the stream thread.

use std::collections::BTreeMap;

use riffle_state_dir::{TaskId, TopicPartition};
use tracing::debug;

use crate::error::{BoxError, Error};
use crate::live_offsets::LiveOffsets;
use crate::task::TaskKind;

/// One changelog record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogRecord {
    /// Its offset in the changelog partition.
    pub offset: u64,
    /// The store key; `None`: the record had no key. A store's own changelog always has keys;
    /// a table's source topic, which serves as its changelog, may not, and restoring skips
    /// such records as processing does.
    pub key: Option<Vec<u8>>,
    /// The value; `None` is a delete (tombstone).
    pub value: Option<Vec<u8>>,
    /// The record's timestamp (a timestamped store keeps it with the value).
    pub timestamp: i64,
}

/// Where changelogs are read from. Implemented by the backends (riffle-log, riffle-kafka); tests use a `Vec`.
pub trait ChangelogReader: Send {
    /// The offset the next record appended to `partition` will get.
    fn end_offset(&mut self, partition: &TopicPartition) -> Result<u64, BoxError>;

    /// Appends to `out` up to `max_records` records of `partition` with offsets `>= from`, in
    /// offset order. Appending nothing while `from < end_offset` means the rest was compacted.
    fn read(
        &mut self,
        partition: &TopicPartition,
        from: u64,
        max_records: usize,
        out: &mut Vec<ChangelogRecord>,
    ) -> Result<(), BoxError>;
}

/// Where one task's restored records go (its stores).
pub trait RestoreTarget: Send {
    /// Applies a batch of records of `partition`, in offset order.
    fn apply(
        &mut self,
        partition: &TopicPartition,
        records: &[ChangelogRecord],
    ) -> Result<(), BoxError>;
}

/// A task handed to the state updater.
pub struct UpdaterTask {
    /// The task.
    pub id: TaskId,
    /// Active (restore, then hand back) or standby (follow forever).
    pub kind: TaskKind,
    /// Each changelog partition and the position to resume from (its checkpointed offset, or 0).
    pub positions: BTreeMap<TopicPartition, u64>,
    /// Where an active task's restoration of a partition stops short of its end offset: a
    /// table's source topic, which serves as the table's changelog, is restored up to the
    /// committed offset of the input, and what follows is processed again (Kafka Streams'
    /// source-topic changelogs). A standby follows every partition to its end.
    pub limits: BTreeMap<TopicPartition, u64>,
    /// Where the records go.
    pub target: Box<dyn RestoreTarget>,
}

impl std::fmt::Debug for UpdaterTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdaterTask")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("positions", &self.positions)
            .finish_non_exhaustive()
    }
}

/// What the updater hands back to the stream thread.
#[derive(Debug)]
#[non_exhaustive]
pub enum UpdaterEvent {
    /// An active task caught up with every changelog partition's end offset: the stream thread
    /// transitions it RESTORING → RUNNING.
    Restored(UpdaterTask),
    /// Restoring or updating a task failed; the task is no longer in the updater.
    Failed {
        /// The task, as far as it got.
        task: UpdaterTask,
        /// Why.
        error: Error,
    },
}

/// The state updater's pure core.
#[derive(Debug)]
pub struct StateUpdater {
    tasks: BTreeMap<TaskId, UpdaterTask>,
    batch_size: usize,
    buf: Vec<ChangelogRecord>,
    /// Changelog records the active tasks had left to restore after the last tick.
    remaining: u64,
}

/// Default number of records read per partition per tick.
pub const DEFAULT_RESTORE_BATCH: usize = 1000;

impl StateUpdater {
    /// An updater that reads at most `batch_size` records per partition per tick.
    pub fn new(batch_size: usize) -> Self {
        Self {
            tasks: BTreeMap::new(),
            batch_size: batch_size.max(1),
            buf: Vec::new(),
            remaining: 0,
        }
    }

    /// Takes ownership of a task's restoration or standby updates; reports its starting
    /// positions to `live`. A task already held is replaced and returned.
    pub fn add(&mut self, task: UpdaterTask, live: &LiveOffsets) -> Option<UpdaterTask> {
        for (p, o) in &task.positions {
            live.set(task.id, p, *o);
        }
        self.tasks.insert(task.id, task)
    }

    /// Gives a task back (e.g. revoked, or a standby promoted to active).
    pub fn remove(&mut self, task: TaskId) -> Option<UpdaterTask> {
        self.tasks.remove(&task)
    }

    /// The tasks held.
    pub fn task_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.keys().copied()
    }

    /// Changelog records the active (restoring) tasks had left to read after the last tick
    /// (Kafka Streams' `restore-remaining-records-total`), from the end offsets that tick saw.
    pub fn remaining_records(&self) -> u64 {
        self.remaining
    }

    /// Number of tasks held.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no task is held.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// One round: for every task and partition behind its end offset, read and apply one batch
    /// and report the new position to `live`. Returns the tasks that finished restoring or
    /// failed (they leave the updater) and whether any record was applied.
    pub fn tick(
        &mut self,
        reader: &mut dyn ChangelogReader,
        live: &LiveOffsets,
    ) -> (Vec<UpdaterEvent>, bool) {
        let mut done: Vec<(TaskId, Option<Error>)> = Vec::new();
        let mut progressed = false;
        let mut remaining = 0;
        for (id, task) in &mut self.tasks {
            let active = task.kind == TaskKind::Active;
            match advance(task, reader, live, self.batch_size, &mut self.buf) {
                Ok((caught_up, moved, left)) => {
                    progressed |= moved;
                    if active {
                        remaining += left;
                    }
                    if caught_up && task.kind == TaskKind::Active {
                        done.push((*id, None));
                    }
                }
                Err(e) => done.push((*id, Some(e))),
            }
        }
        self.remaining = remaining;
        let events = done
            .into_iter()
            .filter_map(|(id, error)| {
                let task = self.tasks.remove(&id)?;
                Some(match error {
                    None => {
                        debug!(task = %id, "restored");
                        UpdaterEvent::Restored(task)
                    }
                    Some(error) => UpdaterEvent::Failed { task, error },
                })
            })
            .collect();
        (events, progressed)
    }
}

/// Advances one task by at most one batch per partition; returns (caught up, applied any,
/// records left behind the end offsets seen).
fn advance(
    task: &mut UpdaterTask,
    reader: &mut dyn ChangelogReader,
    live: &LiveOffsets,
    batch: usize,
    buf: &mut Vec<ChangelogRecord>,
) -> Result<(bool, bool, u64), Error> {
    let mut caught_up = true;
    let mut moved = false;
    let mut left = 0;
    for (partition, position) in &mut task.positions {
        let changelog_err = |source| Error::Changelog {
            task: task.id,
            partition: partition.clone(),
            source,
        };
        let mut end = reader.end_offset(partition).map_err(changelog_err)?;
        if task.kind == TaskKind::Active
            && let Some(&limit) = task.limits.get(partition)
        {
            end = end.min(limit);
        }
        if *position >= end {
            continue;
        }
        buf.clear();
        reader
            .read(partition, *position, batch, buf)
            .map_err(|source| Error::Changelog {
                task: task.id,
                partition: partition.clone(),
                source,
            })?;
        // Ignore anything the reader returned out of range rather than trusting it blindly.
        buf.retain(|r| r.offset >= *position && r.offset < end);
        let next = match buf.last() {
            Some(last) => {
                task.target
                    .apply(partition, buf)
                    .map_err(|source| Error::Restore {
                        task: task.id,
                        partition: partition.clone(),
                        source,
                    })?;
                moved = true;
                last.offset + 1
            }
            None => end, // the rest of the range was compacted away
        };
        *position = next;
        live.set(task.id, partition, next);
        caught_up &= next >= end;
        left += end.saturating_sub(next);
    }
    Ok((caught_up, moved, left))
}
