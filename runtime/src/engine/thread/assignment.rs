//! A stream thread's tasks and their lifecycle: heartbeats to the coordinator (warm-ups caught
//! up reported first), a new assignment applied as [`AssignmentPlan`] decides, and each task
//! moved through its states — waiting for its directory, restoring with the state updater (or
//! kept there as a standby), running, released with or without a checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use riffle_state_dir::TaskId;
use riffle_task_manager::{
    StateUpdaterConfig, StateUpdaterThread, TaskKind, UpdaterEvent, UpdaterTask,
};

use crate::backend::group::{Assignment, Heartbeat};
use crate::engine::loop_core::{AssignmentPlan, Owned};
use crate::engine::restore::{BackendChangelogReader, StoreLease};
use crate::engine::task::{StreamTask, TaskStores};
use crate::engine::thread::StreamThread;
use crate::processor::system_time_ms;
use crate::types::error::{Error, Result};

/// How many changelog records the state updater applies to a store at once.
const RESTORE_BATCH_RECORDS: usize = 10_000;

impl StreamThread {
    /// Heartbeats to the coordinator; whether a new assignment was applied.
    pub(super) fn heartbeat(&mut self, now: Instant) -> Result<bool> {
        self.check_warmups()?;
        let (version, offsets) = self.snapshot.published();
        let offsets = self
            .send_policy
            .should_send(version, now)
            .then_some(offsets);
        let assignment = self.wiring.coordinator.heartbeat(Heartbeat {
            member: &self.name,
            task_offsets: offsets,
            owned: &self.assignment,
        })?;
        if let Some(intervals) = self.wiring.coordinator.intervals(&self.name) {
            self.core.set_heartbeat_interval(intervals.heartbeat);
            self.send_policy.set_interval(intervals.task_offsets);
            self.acceptable_recovery_lag = intervals.acceptable_recovery_lag;
        }
        // Read from every answer: tasks may stop being pending without a new epoch.
        self.tasks_pending = assignment.pending;
        if assignment.epoch == self.assignment.epoch {
            return Ok(false);
        }
        self.apply(assignment)?;
        self.send_policy.assignment_changed();
        Ok(true)
    }

    /// docs/design.md §4, "Sending": a warm-up task that came within the acceptable recovery lag of
    /// its changelogs' ends makes the next heartbeat carry the task offsets, so the assignor can
    /// promote it. Checked per heartbeat, only for warm-ups not reported yet.
    fn check_warmups(&mut self) -> Result<()> {
        if self.assignment.warmup.is_empty() {
            return Ok(());
        }
        let acceptable = self
            .acceptable_recovery_lag
            .unwrap_or(self.wiring.config.acceptable_recovery_lag);
        let warmup = self.assignment.warmup.clone();
        self.warmups_reported.retain(|id| warmup.contains(id));
        for &id in warmup.iter() {
            if self.warmups_reported.contains(&id) || !self.standbys.contains_key(&id) {
                continue;
            }
            let lag = self.snapshot.changelog_lag(id, &*self.wiring.backend)?;
            if lag.is_some_and(|lag| lag <= acceptable) {
                tracing::debug!(thread = %self.name, task = %id, ?lag, "warm-up task caught up");
                self.warmups_reported.insert(id);
                self.send_policy.warmup_caught_up();
            }
        }
        Ok(())
    }

    fn updater(&mut self) -> Result<&StateUpdaterThread> {
        if self.updater.is_none() {
            let reader = BackendChangelogReader::new(
                self.wiring.backend.clone(),
                self.wiring.config.fetch_max_bytes,
            );
            let config = StateUpdaterConfig {
                thread_name: format!("{}-StateUpdater", self.name),
                batch_size: RESTORE_BATCH_RECORDS,
                remaining_records: Some(self.metrics.threads[self.index].restore_remaining.clone()),
                ..StateUpdaterConfig::default()
            };
            self.updater = Some(StateUpdaterThread::spawn(
                config,
                Box::new(reader),
                self.snapshot.live(),
            )?);
        }
        self.updater
            .as_ref()
            .ok_or_else(|| Error::IllegalState("state updater missing".into()))
    }

    /// Closes the tasks no longer assigned and starts the new ones, as [`AssignmentPlan`]
    /// decides.
    fn apply(&mut self, assignment: Assignment) -> Result<()> {
        let _span = tracing::info_span!("rebalance", thread = %self.name, epoch = assignment.epoch)
            .entered();
        let running: BTreeSet<TaskId> = self.tasks.keys().copied().collect();
        let restoring: BTreeSet<TaskId> = self.restoring.keys().copied().collect();
        let standby: BTreeSet<TaskId> = self.standbys.keys().copied().collect();
        let owned = Owned {
            running: &running,
            restoring: &restoring,
            standby: &standby,
            waiting: &self.waiting,
        };
        let plan = AssignmentPlan::compute(owned, &assignment);
        if plan.commit_first {
            self.commit()?;
        }
        for id in plan.revoke_running {
            if let Some(task) = self.tasks.remove(&id) {
                self.metrics.registry.task_stopped(id);
                self.core.task_stopped(id, &task.input_partitions());
                self.release(task.into_stores(), true)?;
            }
        }
        for id in plan.revoke_restoring {
            if let Some(stores) = self.take_from_updater(id, false)? {
                self.release(stores, true)?;
            }
        }
        for id in plan.drop_standby {
            if let Some(stores) = self.take_from_updater(id, true)? {
                self.release(stores, true)?;
            }
        }
        for id in plan.promote_standby {
            // A standby promoted to active keeps its stores: restoring resumes from them.
            if let Some(stores) = self.take_from_updater(id, true)? {
                self.snapshot.standby_promoted(id)?;
                self.start_restoring(stores)?;
            }
        }
        for id in plan.stop_waiting {
            self.waiting.remove(&id);
        }
        self.waiting.extend(plan.start);
        self.assignment = assignment;
        self.start_waiting()
    }

    /// Starts the assigned tasks whose directories are free.
    pub(super) fn start_waiting(&mut self) -> Result<()> {
        let wiring = self.wiring.clone();
        let waiting = std::mem::take(&mut self.waiting);
        for (id, kind) in waiting {
            // Looked up before the directory is locked, so an unknown sub-topology never
            // leaves a task directory locked.
            let Some(sub) = wiring.topology.subtopologies.get(id.subtopology as usize) else {
                tracing::warn!(thread = %self.name, task = %id, "assigned a task of an unknown sub-topology; ignoring it");
                continue;
            };
            if !wiring.state_dir.try_lock_task(id, &self.name) {
                self.waiting.insert(id, kind);
                continue;
            }
            let stores = TaskStores::open(
                id,
                &wiring.topology,
                sub,
                &wiring.topics,
                &wiring.config.application_id,
                Some(&wiring.state_dir),
                wiring.store_db.as_ref(),
            )?;
            let changelogs: Vec<_> = stores
                .changelogs
                .iter()
                .map(|c| c.partition.clone())
                .collect();
            self.snapshot.task_created(id, kind, changelogs)?;
            match kind {
                TaskKind::Standby => {
                    let lease = StoreLease::new(stores, self.metrics.threads[self.index].clone());
                    let positions = Self::positions(&lease)?;
                    self.updater()?.add(UpdaterTask {
                        id,
                        kind,
                        positions,
                        limits: BTreeMap::new(),
                        target: Box::new(lease.clone()),
                    })?;
                    self.snapshot.standby_running(id)?;
                    self.standbys.insert(id, lease);
                }
                _ => self.start_restoring(stores)?,
            }
        }
        Ok(())
    }

    fn positions(lease: &StoreLease) -> Result<BTreeMap<riffle_record::TopicPartition, u64>> {
        let stores = lease
            .take()
            .ok_or_else(|| Error::IllegalState("store lease empty".into()))?;
        let positions = stores
            .changelogs
            .iter()
            .map(|c| (c.partition.clone(), c.offset))
            .collect();
        lease.put_back(stores);
        Ok(positions)
    }

    /// Lends an active task's stores to the state updater, or runs it at once if it has no
    /// changelog.
    fn start_restoring(&mut self, stores: TaskStores) -> Result<()> {
        let id = stores.id;
        if stores.changelogs.is_empty() {
            return self.run_task(stores);
        }
        // A table's source topic, its changelog, is restored up to the committed offset:
        // the task processes what follows (none committed: nothing to restore).
        let mut limits = BTreeMap::new();
        for c in stores.changelogs.iter().filter(|c| c.source) {
            let committed = self
                .wiring
                .backend
                .committed_offset(&self.wiring.config.application_id, &c.partition)?;
            limits.insert(c.partition.clone(), committed.unwrap_or(0));
        }
        let lease = StoreLease::new(stores, self.metrics.threads[self.index].clone());
        let positions = Self::positions(&lease)?;
        self.updater()?.add(UpdaterTask {
            id,
            kind: TaskKind::Active,
            positions,
            limits,
            target: Box::new(lease.clone()),
        })?;
        self.restoring.insert(id, lease);
        Ok(())
    }

    /// Builds a task's nodes over its restored stores: RESTORING → RUNNING.
    fn run_task(&mut self, mut stores: TaskStores) -> Result<()> {
        let id = stores.id;
        let restored = std::mem::take(&mut stores.restored_records);
        if restored > 0 {
            tracing::info!(thread = %self.name, task = %id, records = restored, "restored the task's stores from their changelogs");
        }
        let wiring = self.wiring.clone();
        let Some(sub) = wiring.topology.subtopologies.get(id.subtopology as usize) else {
            return Ok(());
        };
        let mut task = StreamTask::create(
            stores,
            &wiring.topology,
            sub,
            &wiring.topics,
            &wiring.config.application_id,
            &*wiring.backend,
            &wiring.config,
            &self.globals.stores,
        )?;
        let now_ms = system_time_ms();
        task.init(&mut self.collector, &mut self.scratch, now_ms)?;
        task.metrics = Some(self.metrics.registry.task_started(
            id,
            &self.name,
            task.input_partitions(),
            &task.store_metrics,
        ));
        self.snapshot.task_running(id)?;
        self.core.task_started(id, &task.input_partitions());
        Self::reschedule(&mut self.core, id, &task, Instant::now(), now_ms);
        self.tasks.insert(id, task);
        Ok(())
    }

    /// Moves tasks the updater finished restoring to RUNNING; whether there were any.
    pub(super) fn handle_restored(&mut self) -> Result<bool> {
        let Some(updater) = &self.updater else {
            return Ok(false);
        };
        updater.drain_events(&mut self.events)?;
        if self.events.is_empty() {
            return Ok(false);
        }
        let events = std::mem::take(&mut self.events);
        for event in events {
            match event {
                UpdaterEvent::Restored(done) => {
                    let Some(lease) = self.restoring.remove(&done.id) else {
                        continue;
                    };
                    let Some(mut stores) = lease.take() else {
                        continue;
                    };
                    for c in &mut stores.changelogs {
                        if let Some(&p) = done.positions.get(&c.partition) {
                            c.offset = p;
                        }
                    }
                    tracing::debug!(thread = %self.name, task = %done.id, "restored");
                    self.run_task(stores)?;
                }
                UpdaterEvent::Failed { task, error } => {
                    tracing::error!(thread = %self.name, task = %task.id, error = %error, "restoring failed");
                    return Err(error.into());
                }
                _ => {}
            }
        }
        Ok(true)
    }

    /// Takes a task's stores back from the state updater, with the positions it reached.
    fn take_from_updater(&mut self, id: TaskId, standby: bool) -> Result<Option<TaskStores>> {
        let lease = if standby {
            self.standbys.remove(&id)
        } else {
            self.restoring.remove(&id)
        };
        let Some(lease) = lease else { return Ok(None) };
        let held = match &self.updater {
            Some(updater) => updater.remove(id)?,
            None => None,
        };
        let Some(mut stores) = lease.take() else {
            return Ok(None);
        };
        if let Some(held) = held {
            for c in &mut stores.changelogs {
                if let Some(&p) = held.positions.get(&c.partition) {
                    c.offset = p;
                }
            }
        }
        Ok(Some(stores))
    }

    /// Closes a task's stores: a checkpoint if `clean`, then its directory is free.
    fn release(&mut self, mut stores: TaskStores, clean: bool) -> Result<()> {
        let id = stores.id;
        if clean {
            stores.maybe_checkpoint(&self.wiring.state_dir, 0, true)?;
        }
        drop(stores);
        self.snapshot.task_closed(id)?;
        self.wiring.state_dir.unlock_task(id, &self.name);
        Ok(())
    }

    /// Releases every task: with checkpoints after a clean run, as they are after a failure.
    pub(super) fn close(&mut self, clean: bool) -> Result<()> {
        let mut result = Ok(());
        let running: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in running {
            if let Some(task) = self.tasks.remove(&id) {
                self.metrics.registry.task_stopped(id);
                self.core.task_stopped(id, &task.input_partitions());
                result = result.and(self.release(task.into_stores(), clean));
            }
        }
        let lent: Vec<(TaskId, bool)> = self
            .restoring
            .keys()
            .map(|&id| (id, false))
            .chain(self.standbys.keys().map(|&id| (id, true)))
            .collect();
        for (id, standby) in lent {
            match self.take_from_updater(id, standby) {
                Ok(Some(stores)) => result = result.and(self.release(stores, clean)),
                Ok(None) => {}
                Err(e) => result = result.and(Err(e)),
            }
        }
        if let Some(updater) = self.updater.take() {
            result = result.and(updater.shutdown().map_err(Error::from));
        }
        result
    }
}
