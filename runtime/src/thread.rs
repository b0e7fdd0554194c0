//! A stream thread: the loop of design.md §2 over the tasks the coordinator assigned to it.
//!
//! The loop never does work proportional to the number of tasks when nothing changed: an idle
//! iteration compares the backend's data version, refreshes the offset-sum snapshot (O(1) when
//! no version moved), drains the state updater's events (no allocation when there are none) and
//! waits for data.
//!
//! Task lifecycle on a thread: a newly assigned active task opens its stores and lends them to the
//! thread's state updater (RESTORING); once they caught up with their changelogs the updater hands
//! them back and the thread builds the task's processor nodes (RUNNING). Standby tasks stay with
//! the updater, which keeps their stores up to date.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use riffle_state_dir::TaskId;
use riffle_task_manager::{
    StateUpdaterConfig, StateUpdaterThread, TaskKind, UpdaterEvent, UpdaterTask,
};

use crate::app::AppShared;
use crate::collector::RecordCollector;
use crate::config::ProcessingGuarantee;
use crate::coordinator::OffsetSendPolicy;
use crate::error::{Error, Result};
use crate::group::{Assignment, Heartbeat};
use crate::node::Scratch;
use crate::restore::{BackendChangelogReader, StoreLease};
use crate::snapshot::ThreadSnapshot;
use crate::task::{StreamTask, TaskStores};

/// How many changelog records the state updater applies to a store at once.
const RESTORE_BATCH_RECORDS: usize = 10_000;

/// How many records a task processes per loop iteration before the thread moves on.
const MAX_RECORDS_PER_TASK_PER_LOOP: usize = 1_000;

pub(crate) struct StreamThread {
    pub(crate) index: usize,
    pub(crate) name: String,
    shared: Arc<AppShared>,
    /// RUNNING active tasks.
    tasks: BTreeMap<TaskId, StreamTask>,
    /// Active tasks whose stores the state updater is restoring.
    restoring: BTreeMap<TaskId, StoreLease>,
    /// Standby tasks, kept up to date by the state updater.
    standbys: BTreeMap<TaskId, StoreLease>,
    /// Assigned tasks whose directory another thread of this process still owns.
    waiting: BTreeMap<TaskId, TaskKind>,
    updater: Option<StateUpdaterThread>,
    events: Vec<UpdaterEvent>,
    collector: RecordCollector,
    scratch: Scratch,
    /// The data version at which the last fetch round found nothing new.
    caught_up_at: Option<u64>,
    /// Whether some task still had fetched records left after the last processing pass.
    backlog: bool,
    dirty: bool,
    last_commit: Instant,
    next_heartbeat: Instant,
    /// The configured heartbeat interval, or the coordinator's if it asked for less.
    heartbeat_interval: Duration,
    /// The coordinator's acceptable recovery lag, if it sent one.
    acceptable_recovery_lag: Option<u64>,
    /// Warm-up tasks already reported as caught up.
    warmups_reported: BTreeSet<TaskId>,
    /// The coordinator's generation at the last heartbeat.
    seen_generation: u64,
    next_cleanup: Instant,
    assignment: Assignment,
    send_policy: OffsetSendPolicy,
    snapshot: ThreadSnapshot,
}

impl StreamThread {
    /// A stream thread in metrics slot `index`, named as Kafka Streams names them
    /// (`<application_id>-StreamThread-<n>`).
    pub(crate) fn new(index: usize, name: String, shared: Arc<AppShared>) -> StreamThread {
        let collector = RecordCollector::new(
            shared.backend.clone(),
            shared.topics.clone(),
            shared.config.compression,
            shared.config.batch_max_bytes,
            shared.config.processing_guarantee == ProcessingGuarantee::ExactlyOnce,
        );
        let send_policy =
            OffsetSendPolicy::new(Duration::from_millis(shared.config.task_offset_interval_ms));
        let snapshot = ThreadSnapshot::new(&shared);
        let cleanup_delay = Duration::from_millis(shared.config.state_cleanup_delay_ms);
        let heartbeat_interval = Duration::from_millis(shared.config.heartbeat_interval_ms);
        StreamThread {
            index,
            name,
            shared,
            tasks: BTreeMap::new(),
            restoring: BTreeMap::new(),
            standbys: BTreeMap::new(),
            waiting: BTreeMap::new(),
            updater: None,
            events: Vec::new(),
            collector,
            scratch: Scratch::default(),
            caught_up_at: None,
            backlog: false,
            dirty: false,
            last_commit: Instant::now(),
            next_heartbeat: Instant::now(),
            heartbeat_interval,
            acceptable_recovery_lag: None,
            warmups_reported: BTreeSet::new(),
            seen_generation: 0,
            next_cleanup: Instant::now() + cleanup_delay,
            assignment: Assignment::default(),
            send_policy,
            snapshot,
        }
    }

    /// Runs until the application shuts down or an error stops it.
    pub(crate) fn run(mut self) -> Result<()> {
        let metrics = self.shared.thread_metrics[self.index].clone();
        metrics.set_os_thread_id();
        let result = self.run_loop();
        // Release the tasks whatever happened, then leave, so the others can take them.
        let closed = self.close(result.is_ok());
        self.shared.coordinator.leave(&self.name);
        result.and(closed)
    }

    fn run_loop(&mut self) -> Result<()> {
        let metrics = self.shared.thread_metrics[self.index].clone();
        let config = &self.shared.config;
        let poll = Duration::from_millis(config.poll_ms);
        let commit_interval = Duration::from_millis(config.commit_interval_ms);
        let fetch_max_bytes = config.fetch_max_bytes;
        let cache_max_bytes = config.statestore_cache_max_bytes;
        let backend = self.shared.backend.clone();
        while !self.shared.shutdown.load(Ordering::Acquire) {
            metrics.loops.fetch_add(1, Ordering::Relaxed);
            // Poll: only when new data may have arrived since a round that found nothing.
            let version = backend.data_version();
            let mut fetched = false;
            if self.caught_up_at != Some(version) {
                for task in self.tasks.values_mut() {
                    fetched |= task.fetch(&*backend, fetch_max_bytes)?;
                }
                if !fetched {
                    self.caught_up_at = Some(version);
                }
            }
            // Process.
            let mut processed = 0;
            let mut cache_full = false;
            if fetched || self.backlog {
                let mut cached = 0;
                for task in self.tasks.values_mut() {
                    processed += task.process(
                        MAX_RECORDS_PER_TASK_PER_LOOP,
                        &mut self.collector,
                        &mut self.scratch,
                    )?;
                    cached += task.cache_bytes();
                }
                cache_full = cached >= cache_max_bytes;
                self.backlog = self.tasks.values().any(StreamTask::has_buffered);
                self.dirty |= processed > 0;
                metrics
                    .records
                    .fetch_add(processed as u64, Ordering::Relaxed);
                self.shared
                    .records_processed
                    .fetch_add(processed as u64, Ordering::Relaxed);
            }
            // Commit: on the interval, when the caches are full, or as soon as the thread is
            // caught up.
            let caught_up = processed == 0 && !fetched && !self.backlog;
            if self.dirty
                && (caught_up || cache_full || self.last_commit.elapsed() >= commit_interval)
            {
                self.commit(false)?;
            }
            // Tasks the state updater finished restoring: RESTORING → RUNNING.
            let restored = self.handle_restored()?;
            if !self.waiting.is_empty() {
                self.start_waiting()?;
            }
            // Refresh the offset-sum snapshot: O(1) when nothing changed.
            if self.snapshot.refresh() {
                metrics.snapshot_changes.fetch_add(1, Ordering::Relaxed);
            }
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
            // Heartbeat when due; apply a new assignment if it brought one.
            let now = Instant::now();
            let mut reassigned = false;
            // The first thread deletes task directories nobody here owned for a while.
            if self.index == 0 && now >= self.next_cleanup {
                let delay = Duration::from_millis(self.shared.config.state_cleanup_delay_ms);
                self.next_cleanup = now + delay;
                match self
                    .shared
                    .state_dir
                    .clean_unowned_task_dirs_older_than(delay)
                {
                    Ok(deleted) if !deleted.is_empty() => {
                        tracing::info!(?deleted, "cleaned up unowned task directories")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "state directory cleanup failed"),
                }
            }
            let generation = self.shared.coordinator.generation();
            if now >= self.next_heartbeat || generation != self.seen_generation {
                self.seen_generation = generation;
                reassigned = self.heartbeat(now)?;
                self.next_heartbeat = now + self.heartbeat_interval;
            }
            if caught_up && !restored {
                let settled = !reassigned && self.restoring.is_empty() && self.waiting.is_empty();
                if settled {
                    self.shared.idle_versions[self.index].store(version, Ordering::Release);
                }
                let wait = if settled {
                    poll
                } else {
                    poll.min(Duration::from_millis(5))
                };
                backend.wait_for_data(version, wait);
            } else {
                self.shared.idle_versions[self.index].store(u64::MAX, Ordering::Release);
            }
        }
        self.commit(true)
    }

    /// Heartbeats to the coordinator; whether a new assignment was applied.
    fn heartbeat(&mut self, now: Instant) -> Result<bool> {
        self.check_warmups()?;
        let (version, offsets) = self.snapshot.published();
        let offsets = self
            .send_policy
            .should_send(version, now)
            .then_some(offsets);
        let assignment = self.shared.coordinator.heartbeat(Heartbeat {
            member: &self.name,
            task_offsets: offsets,
            owned: &self.assignment,
        })?;
        if let Some(intervals) = self.shared.coordinator.intervals(&self.name) {
            let configured = Duration::from_millis(self.shared.config.heartbeat_interval_ms);
            self.heartbeat_interval = configured.min(intervals.heartbeat);
            self.send_policy.set_interval(intervals.task_offsets);
            self.acceptable_recovery_lag = intervals.acceptable_recovery_lag;
        }
        if assignment.epoch == self.assignment.epoch {
            return Ok(false);
        }
        self.apply(assignment)?;
        self.send_policy.assignment_changed();
        Ok(true)
    }

    /// Design.md §3, "Sending": a warm-up task that came within the acceptable recovery lag of
    /// its changelogs' ends makes the next heartbeat carry the task offsets, so the assignor can
    /// promote it. Checked per heartbeat, only for warm-ups not reported yet.
    fn check_warmups(&mut self) -> Result<()> {
        if self.assignment.warmup.is_empty() {
            return Ok(());
        }
        let acceptable = self
            .acceptable_recovery_lag
            .unwrap_or(self.shared.config.acceptable_recovery_lag);
        let warmup = self.assignment.warmup.clone();
        self.warmups_reported.retain(|id| warmup.contains(id));
        for &id in warmup.iter() {
            if self.warmups_reported.contains(&id) || !self.standbys.contains_key(&id) {
                continue;
            }
            let lag = self.snapshot.changelog_lag(id, &*self.shared.backend)?;
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
                self.shared.backend.clone(),
                self.shared.config.fetch_max_bytes,
            );
            let config = StateUpdaterConfig {
                thread_name: format!("{}-StateUpdater", self.name),
                batch_size: RESTORE_BATCH_RECORDS,
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

    /// Closes the tasks no longer assigned and starts the new ones.
    fn apply(&mut self, assignment: Assignment) -> Result<()> {
        let active = assignment.active.clone();
        let standby: BTreeSet<TaskId> = assignment
            .standby
            .iter()
            .chain(assignment.warmup.iter())
            .filter(|t| !active.contains(t))
            .copied()
            .collect();
        let revoked: Vec<TaskId> = self
            .tasks
            .keys()
            .filter(|id| !active.contains(id))
            .copied()
            .collect();
        if !revoked.is_empty() {
            self.commit(false)?;
        }
        for id in revoked {
            if let Some(task) = self.tasks.remove(&id) {
                self.release(task.into_stores(), true)?;
            }
        }
        let unrestored: Vec<TaskId> = self
            .restoring
            .keys()
            .filter(|id| !active.contains(id))
            .copied()
            .collect();
        for id in unrestored {
            if let Some(stores) = self.take_from_updater(id, false)? {
                self.release(stores, true)?;
            }
        }
        let dropped: Vec<TaskId> = self
            .standbys
            .keys()
            .filter(|id| !standby.contains(id))
            .copied()
            .collect();
        for id in dropped {
            if let Some(stores) = self.take_from_updater(id, true)? {
                // A standby promoted to active keeps its stores: restoring resumes from them.
                if active.contains(&id) {
                    self.snapshot.standby_promoted(id)?;
                    self.start_restoring(stores)?;
                } else {
                    self.release(stores, true)?;
                }
            }
        }
        self.waiting
            .retain(|id, _| active.contains(id) || standby.contains(id));
        for &id in active.iter() {
            if !self.tasks.contains_key(&id) && !self.restoring.contains_key(&id) {
                self.waiting.insert(id, TaskKind::Active);
            }
        }
        for &id in &standby {
            if !self.standbys.contains_key(&id) {
                self.waiting.insert(id, TaskKind::Standby);
            }
        }
        self.assignment = assignment;
        self.caught_up_at = None;
        self.start_waiting()
    }

    /// Starts the assigned tasks whose directories are free.
    fn start_waiting(&mut self) -> Result<()> {
        let shared = self.shared.clone();
        let waiting = std::mem::take(&mut self.waiting);
        for (id, kind) in waiting {
            if !shared.state_dir.try_lock_task(id, &self.name) {
                self.waiting.insert(id, kind);
                continue;
            }
            let Some(sub) = shared.topology.subtopologies.get(id.subtopology as usize) else {
                continue;
            };
            let stores = TaskStores::open(
                id,
                &shared.topology,
                sub,
                &shared.topics,
                &shared.config.application_id,
                &shared.state_dir,
            )?;
            let changelogs: Vec<_> = stores
                .changelogs
                .iter()
                .map(|c| c.partition.clone())
                .collect();
            self.snapshot.task_created(id, kind, changelogs)?;
            match kind {
                TaskKind::Standby => {
                    let lease =
                        StoreLease::new(stores, self.shared.thread_metrics[self.index].clone());
                    let positions = Self::positions(&lease)?;
                    self.updater()?.add(UpdaterTask {
                        id,
                        kind,
                        positions,
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

    fn positions(
        lease: &StoreLease,
    ) -> Result<BTreeMap<riffle_state_dir::ChangelogPartition, u64>> {
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
        let lease = StoreLease::new(stores, self.shared.thread_metrics[self.index].clone());
        let positions = Self::positions(&lease)?;
        self.updater()?.add(UpdaterTask {
            id,
            kind: TaskKind::Active,
            positions,
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
        let shared = self.shared.clone();
        let Some(sub) = shared.topology.subtopologies.get(id.subtopology as usize) else {
            return Ok(());
        };
        let task = StreamTask::create(
            stores,
            &shared.topology,
            sub,
            &shared.topics,
            &shared.config.application_id,
            &*shared.backend,
        )?;
        self.snapshot.task_running(id)?;
        self.tasks.insert(id, task);
        self.caught_up_at = None;
        Ok(())
    }

    /// Moves tasks the updater finished restoring to RUNNING; whether there were any.
    fn handle_restored(&mut self) -> Result<bool> {
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
            stores.maybe_checkpoint(&self.shared.state_dir, 0, true)?;
        }
        drop(stores);
        self.snapshot.task_closed(id)?;
        self.shared.state_dir.unlock_task(id, &self.name);
        Ok(())
    }

    /// Flush caches and forward → write changelogs → append outputs → commit offsets → write
    /// caches to the stores → checkpoint.
    fn commit(&mut self, closing: bool) -> Result<()> {
        let delta = self.shared.config.checkpoint_offset_delta;
        if self.dirty
            || self.collector.has_pending()
            || self.tasks.values().any(StreamTask::needs_commit)
        {
            for task in self.tasks.values_mut() {
                task.flush_nodes(&mut self.collector, &mut self.scratch)?;
            }
            for task in self.tasks.values_mut() {
                task.write_changelogs(&mut self.collector)?;
            }
            let mut offsets = Vec::new();
            for task in self.tasks.values().filter(|t| t.uncommitted > 0) {
                task.committable_offsets(&mut offsets);
            }
            let group = &self.shared.config.application_id;
            if self.shared.config.processing_guarantee == ProcessingGuarantee::ExactlyOnce {
                // Outputs, changelog writes and input offsets: one transaction.
                self.collector
                    .commit_transaction(group, &self.name, &offsets)?;
            } else {
                // The backend makes the appends durable before the offsets.
                self.collector.flush()?;
                self.shared
                    .backend
                    .commit_offsets(group, &self.name, &offsets)?;
            }
            for task in self.tasks.values_mut() {
                task.committed(&self.collector)?;
                task.stores
                    .maybe_checkpoint(&self.shared.state_dir, delta, closing)?;
                self.snapshot.positions(&task.stores);
            }
            self.dirty = false;
            self.shared.thread_metrics[self.index]
                .commits
                .fetch_add(1, Ordering::Relaxed);
        }
        self.last_commit = Instant::now();
        Ok(())
    }

    /// Releases every task: with checkpoints after a clean run, as they are after a failure.
    fn close(&mut self, clean: bool) -> Result<()> {
        let mut result = Ok(());
        let running: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in running {
            if let Some(task) = self.tasks.remove(&id) {
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
