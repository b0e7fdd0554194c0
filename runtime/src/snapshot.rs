//! A stream thread's view of its tasks for the heartbeat: its [`TaskRegistry`], the live
//! changelog offsets of its tasks, and the [`OffsetSumSnapshot`] built from them and the state
//! directory's local offset map.
//!
//! The thread calls [`ThreadSnapshot::refresh`] on every loop iteration, as Kafka Streams does;
//! with the incremental strategy that costs three integer comparisons when nothing changed.

use std::sync::Arc;

use riffle_log::TopicPartition;
use riffle_state_dir::{ChangelogPartition, Checkpoint, StateDirectory, TaskId};
use riffle_task_manager::{
    LiveOffsets, OffsetSumSnapshot, SnapshotMetrics, TaskKind, TaskRegistry, TaskState,
};

use crate::app::AppShared;
use crate::error::Result;

pub(crate) struct ThreadSnapshot {
    state_dir: Arc<StateDirectory>,
    registry: TaskRegistry,
    live: Arc<LiveOffsets>,
    snapshot: OffsetSumSnapshot,
}

fn changelog_partition(tp: &TopicPartition) -> ChangelogPartition {
    ChangelogPartition::new(&*tp.topic, tp.partition)
}

impl ThreadSnapshot {
    pub(crate) fn new(shared: &AppShared) -> Self {
        ThreadSnapshot {
            state_dir: shared.state_dir.clone(),
            registry: TaskRegistry::new(),
            live: Arc::new(LiveOffsets::new()),
            snapshot: OffsetSumSnapshot::new(shared.config.snapshot_strategy),
        }
    }

    /// Brings the snapshot up to date; whether it changed.
    pub(crate) fn refresh(&mut self) -> bool {
        self.snapshot
            .refresh(&self.registry, &self.state_dir, &self.live)
    }

    /// The latest snapshot and its version (an O(1) clone).
    pub(crate) fn published(&self) -> (u64, imbl::HashMap<TaskId, i64>) {
        self.snapshot.published()
    }

    pub(crate) fn metrics(&self) -> SnapshotMetrics {
        self.snapshot.metrics()
    }

    /// A new active task, about to restore.
    pub(crate) fn task_created(&mut self, id: TaskId, changelogs: &[TopicPartition]) -> Result<()> {
        self.registry.add(
            id,
            TaskKind::Active,
            changelogs.iter().map(changelog_partition).collect(),
        )?;
        self.registry.transition(id, TaskState::Restoring)?;
        Ok(())
    }

    /// Restoration progress of a task: its store reflects `tp` up to `offset`.
    pub(crate) fn restored(&mut self, id: TaskId, tp: &TopicPartition, offset: u64) {
        self.live.set(id, &changelog_partition(tp), offset);
    }

    /// The task finished restoring and processes records now.
    pub(crate) fn task_running(&mut self, id: TaskId) -> Result<()> {
        self.registry.transition(id, TaskState::Running)?;
        Ok(())
    }

    /// The task was closed on this thread (revoked or shut down).
    pub(crate) fn task_closed(&mut self, id: TaskId) -> Result<()> {
        if let Some(task) = self.registry.get(id) {
            if matches!(task.state, TaskState::Running | TaskState::Restoring) {
                self.registry.transition(id, TaskState::Suspended)?;
            }
            self.registry.transition(id, TaskState::Closed)?;
            self.registry.remove(id);
        }
        self.live.forget(id);
        Ok(())
    }

    /// A commit made `offsets` durable in the task's changelogs. Persistent stores record them
    /// in the task's checkpoint (and so in the state directory's local offset map).
    pub(crate) fn committed(
        &mut self,
        id: TaskId,
        offsets: &[(TopicPartition, u64)],
        persistent: bool,
    ) -> Result<()> {
        for (tp, offset) in offsets {
            self.live.set(id, &changelog_partition(tp), *offset);
        }
        if persistent && !offsets.is_empty() {
            let mut checkpoint = Checkpoint::new();
            for (tp, offset) in offsets {
                checkpoint.insert(changelog_partition(tp), *offset);
            }
            self.state_dir.write_checkpoint(id, &checkpoint)?;
        }
        Ok(())
    }
}
