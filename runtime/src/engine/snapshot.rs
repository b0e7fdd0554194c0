//! A stream thread's view of its tasks for the heartbeat: its [`TaskRegistry`], the live
//! changelog offsets of its tasks (shared with its state updater), and the
//! [`OffsetSumSnapshot`] built from them and the state directory's local offset map.
//!
//! The thread calls [`ThreadSnapshot::refresh`] on every loop iteration, as Kafka Streams does;
//! with the incremental strategy that costs three integer comparisons when nothing changed.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use riffle_state_dir::{StateDirectory, TaskId, TopicPartition};
use riffle_task_manager::{
    LiveOffsets, OffsetSumSnapshot, SnapshotStrategy, TaskKind, TaskRegistry, TaskState,
};

use crate::backend::Backend;
use crate::engine::metrics::ThreadMetrics;
use crate::engine::task::TaskStores;
use crate::types::error::Result;

pub(crate) struct ThreadSnapshot {
    state_dir: Arc<StateDirectory>,
    registry: TaskRegistry,
    live: Arc<LiveOffsets>,
    snapshot: OffsetSumSnapshot,
}

impl ThreadSnapshot {
    pub(crate) fn new(state_dir: Arc<StateDirectory>, strategy: SnapshotStrategy) -> Self {
        ThreadSnapshot {
            state_dir,
            registry: TaskRegistry::new(),
            live: Arc::new(LiveOffsets::new()),
            snapshot: OffsetSumSnapshot::new(strategy),
        }
    }

    /// The live offsets, for the thread's state updater to report restoration progress to.
    pub(crate) fn live(&self) -> Arc<LiveOffsets> {
        self.live.clone()
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

    /// Copies the refresh counters into the thread's metrics.
    pub(crate) fn publish_metrics(&self, metrics: &ThreadMetrics) {
        let counts = self.snapshot.metrics();
        metrics
            .snapshot_unchanged
            .store(counts.unchanged_refreshes, Ordering::Relaxed);
        metrics
            .snapshot_full_rebuilds
            .store(counts.full_rebuilds, Ordering::Relaxed);
        metrics
            .snapshot_incremental_updates
            .store(counts.incremental_updates, Ordering::Relaxed);
    }

    /// A newly assigned task whose stores are open: CREATED → RESTORING.
    pub(crate) fn task_created(
        &mut self,
        id: TaskId,
        kind: TaskKind,
        changelogs: Vec<TopicPartition>,
    ) -> Result<()> {
        self.registry.add(id, kind, changelogs)?;
        self.registry.transition(id, TaskState::Restoring)?;
        Ok(())
    }

    /// A standby handed to the state updater: it follows its changelogs for good.
    pub(crate) fn standby_running(&mut self, id: TaskId) -> Result<()> {
        self.registry.transition(id, TaskState::Running)?;
        Ok(())
    }

    /// A standby becomes active: RUNNING standby → SUSPENDED → RESTORING active.
    pub(crate) fn standby_promoted(&mut self, id: TaskId) -> Result<()> {
        self.registry.transition(id, TaskState::Suspended)?;
        self.registry.set_kind(id, TaskKind::Active)?;
        self.registry.transition(id, TaskState::Restoring)?;
        Ok(())
    }

    /// The task finished restoring and processes records now.
    pub(crate) fn task_running(&mut self, id: TaskId) -> Result<()> {
        self.registry.transition(id, TaskState::Running)?;
        Ok(())
    }

    /// How far `id`'s stores are behind their changelogs' ends (`None`: not registered here).
    pub(crate) fn changelog_lag(&self, id: TaskId, backend: &dyn Backend) -> Result<Option<u64>> {
        let Some(task) = self.registry.get(id) else {
            return Ok(None);
        };
        let mut lag = 0u64;
        for p in &task.changelog_partitions {
            let end = backend.end_offset(p)?;
            let position = self.live.get(id, p).unwrap_or(0);
            lag = lag.saturating_add(end.saturating_sub(position));
        }
        Ok(Some(lag))
    }

    /// The changelog positions a commit reached.
    pub(crate) fn positions(&mut self, stores: &TaskStores) {
        for c in &stores.changelogs {
            self.live.set(stores.id, &c.partition, c.offset);
        }
    }

    /// The task was closed on this thread (revoked, failed or shut down).
    pub(crate) fn task_closed(&mut self, id: TaskId) -> Result<()> {
        if let Some(task) = self.registry.get(id) {
            match task.state {
                TaskState::Running | TaskState::Restoring => {
                    self.registry.transition(id, TaskState::Suspended)?;
                    self.registry.transition(id, TaskState::Closed)?;
                }
                TaskState::Suspended => {
                    self.registry.transition(id, TaskState::Closed)?;
                }
                _ => {}
            }
            self.registry.remove(id);
        }
        self.live.forget(id);
        Ok(())
    }
}
