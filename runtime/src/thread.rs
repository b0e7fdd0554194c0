//! A stream thread: the loop of design.md §2 over the tasks the coordinator assigned to it.
//!
//! The loop never does work proportional to the number of tasks when nothing changed: an idle
//! iteration compares the backend's data version, refreshes the offset-sum snapshot (O(1) when
//! no version moved) and waits for data.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use riffle_state_dir::TaskId;

use crate::app::AppShared;
use crate::collector::RecordCollector;
use crate::coordinator::OffsetSendPolicy;
use crate::error::Result;
use crate::group::{Assignment, Heartbeat};
use crate::node::Scratch;
use crate::snapshot::ThreadSnapshot;
use crate::task::StreamTask;

/// How many records a task processes per loop iteration before the thread moves on.
const MAX_RECORDS_PER_TASK_PER_LOOP: usize = 1_000;

pub(crate) struct StreamThread {
    pub(crate) index: usize,
    pub(crate) name: String,
    shared: Arc<AppShared>,
    tasks: BTreeMap<TaskId, StreamTask>,
    collector: RecordCollector,
    scratch: Scratch,
    /// The data version at which the last fetch round found nothing new.
    caught_up_at: Option<u64>,
    /// Whether some task still had fetched records left after the last processing pass.
    backlog: bool,
    uncommitted: u64,
    last_commit: Instant,
    next_heartbeat: Instant,
    assignment: Assignment,
    send_policy: OffsetSendPolicy,
    snapshot: ThreadSnapshot,
}

impl StreamThread {
    /// The thread's name, as Kafka Streams forms it: `<application_id>-StreamThread-<n>`.
    pub(crate) fn name_of(shared: &AppShared, index: usize) -> String {
        format!(
            "{}-StreamThread-{}",
            shared.config.application_id,
            index + 1
        )
    }

    pub(crate) fn new(index: usize, shared: Arc<AppShared>) -> StreamThread {
        let name = Self::name_of(&shared, index);
        let collector = RecordCollector::new(
            shared.backend.clone(),
            shared.topics.clone(),
            shared.config.compression,
            shared.config.batch_max_bytes,
        );
        let send_policy =
            OffsetSendPolicy::new(Duration::from_millis(shared.config.task_offset_interval_ms));
        let snapshot = ThreadSnapshot::new(&shared);
        StreamThread {
            index,
            name,
            shared,
            tasks: BTreeMap::new(),
            collector,
            scratch: Scratch::default(),
            caught_up_at: None,
            backlog: false,
            uncommitted: 0,
            last_commit: Instant::now(),
            next_heartbeat: Instant::now(),
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
        // Leave the group whatever happened, so the others can take the tasks.
        self.shared.coordinator.leave(&self.name);
        let closed = self.close();
        result.and(closed)
    }

    fn run_loop(&mut self) -> Result<()> {
        let metrics = self.shared.thread_metrics[self.index].clone();
        let poll = Duration::from_millis(self.shared.config.poll_ms);
        let commit_interval = Duration::from_millis(self.shared.config.commit_interval_ms);
        let heartbeat_interval = Duration::from_millis(self.shared.config.heartbeat_interval_ms);
        let backend = self.shared.backend.clone();
        while !self.shared.shutdown.load(Ordering::Acquire) {
            metrics.loops.fetch_add(1, Ordering::Relaxed);
            // Poll: only when new data may have arrived since a round that found nothing.
            let version = backend.data_version();
            let mut fetched = false;
            if self.caught_up_at != Some(version) {
                for task in self.tasks.values_mut() {
                    fetched |= task.fetch(&*backend, self.shared.config.fetch_max_bytes)?;
                }
                if !fetched {
                    self.caught_up_at = Some(version);
                }
            }
            // Process.
            let mut processed = 0;
            if fetched || self.backlog {
                for task in self.tasks.values_mut() {
                    processed += task.process(
                        MAX_RECORDS_PER_TASK_PER_LOOP,
                        &mut self.collector,
                        &mut self.scratch,
                    )?;
                }
                self.backlog = self.tasks.values().any(StreamTask::has_buffered);
                self.uncommitted += processed as u64;
                metrics
                    .records
                    .fetch_add(processed as u64, Ordering::Relaxed);
                self.shared
                    .records_processed
                    .fetch_add(processed as u64, Ordering::Relaxed);
            }
            // Commit: on the interval, or as soon as the thread is caught up.
            let idle = processed == 0 && !fetched && !self.backlog;
            if self.uncommitted > 0 && (idle || self.last_commit.elapsed() >= commit_interval) {
                self.commit()?;
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
            if now >= self.next_heartbeat {
                reassigned = self.heartbeat(now)?;
                self.next_heartbeat = now + heartbeat_interval;
            }
            if idle && !reassigned {
                self.shared.idle_versions[self.index].store(version, Ordering::Release);
                backend.wait_for_data(version, poll);
            } else {
                self.shared.idle_versions[self.index].store(u64::MAX, Ordering::Release);
            }
        }
        self.commit()
    }

    /// Heartbeats to the coordinator; whether a new assignment was applied.
    fn heartbeat(&mut self, now: Instant) -> Result<bool> {
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
        if assignment.epoch == self.assignment.epoch {
            return Ok(false);
        }
        self.apply(assignment)?;
        self.send_policy.assignment_changed();
        Ok(true)
    }

    /// Closes the tasks no longer assigned and creates the new ones.
    fn apply(&mut self, assignment: Assignment) -> Result<()> {
        let revoked: Vec<TaskId> = self
            .tasks
            .keys()
            .filter(|id| !assignment.active.contains(id))
            .copied()
            .collect();
        if !revoked.is_empty() {
            self.commit()?;
            for id in revoked {
                self.tasks.remove(&id);
                self.snapshot.task_closed(id)?;
            }
        }
        let shared = self.shared.clone();
        for &id in assignment.active.iter() {
            if self.tasks.contains_key(&id) {
                continue;
            }
            let Some(sub) = shared.topology.subtopologies.get(id.subtopology as usize) else {
                continue;
            };
            let mut task = StreamTask::create(
                id,
                &shared.topology,
                sub,
                &shared.topics,
                &shared.config.application_id,
                &*shared.backend,
            )?;
            let changelogs = task.changelog_partitions(&shared.topics);
            self.snapshot.task_created(id, &changelogs)?;
            let restored = task.restore(
                &*shared.backend,
                &shared.topics,
                shared.config.fetch_max_bytes,
            )?;
            for (tp, offset) in task.changelog_positions(&shared.topics) {
                self.snapshot.restored(id, &tp, offset);
            }
            if restored > 0 {
                tracing::info!(thread = %self.name, task = %id, records = restored, "restored task state from its changelog");
            }
            self.snapshot.task_running(id)?;
            self.tasks.insert(id, task);
        }
        self.caught_up_at = None;
        self.assignment = assignment;
        Ok(())
    }

    /// Flush stores → write changelogs → append outputs → commit offsets → checkpoint.
    fn commit(&mut self) -> Result<()> {
        if self.uncommitted == 0 && !self.collector.has_pending() {
            return Ok(());
        }
        for task in self.tasks.values_mut().filter(|t| t.uncommitted > 0) {
            task.write_changelogs(&mut self.collector, &mut self.scratch)?;
        }
        self.collector.flush()?;
        let mut offsets = Vec::new();
        for task in self.tasks.values().filter(|t| t.uncommitted > 0) {
            task.committable_offsets(&mut offsets);
        }
        self.shared.backend.commit_offsets(
            &self.shared.config.application_id,
            &self.name,
            &offsets,
        )?;
        for task in self.tasks.values_mut().filter(|t| t.uncommitted > 0) {
            let changelog_offsets = task.changelog_offsets(&self.collector, &self.shared.topics);
            self.snapshot
                .committed(task.id, &changelog_offsets, task.has_persistent_stores())?;
        }
        self.uncommitted = 0;
        self.last_commit = Instant::now();
        let metrics = &self.shared.thread_metrics[self.index];
        metrics.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        let ids: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in ids {
            self.tasks.remove(&id);
            self.snapshot.task_closed(id)?;
        }
        Ok(())
    }
}
