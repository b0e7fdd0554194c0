//! A stream thread: the loop of docs/design.md §3 over the tasks the coordinator assigned to it.
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;
use riffle_task_manager::{
    StateUpdaterConfig, StateUpdaterThread, TaskKind, UpdaterEvent, UpdaterTask,
};

use crate::backend::coordinator::OffsetSendPolicy;
use crate::backend::group::{Assignment, Heartbeat};
use crate::config::ProcessingGuarantee;
use crate::engine::global::GlobalTables;
use crate::engine::instance::InstanceWiring;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::loop_core::{AssignmentPlan, Changes, InputRef, LoopCore, LoopSettings, Owned};
use crate::engine::metrics::InstanceMetrics;
use crate::engine::query::{QueryAnswer, QueryInbox, QueryOp};
use crate::engine::restore::{BackendChangelogReader, StoreLease};
use crate::engine::snapshot::ThreadSnapshot;
use crate::engine::task::{StreamTask, TaskStores};
use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::processor::system_time_ms;
use crate::types::error::{BackendErrorKind, Error, Result};
use crate::types::handlers::Handlers;

/// How many changelog records the state updater applies to a store at once.
const RESTORE_BATCH_RECORDS: usize = 10_000;

/// How many records a task processes per loop iteration before the thread moves on.
const MAX_RECORDS_PER_TASK_PER_LOOP: usize = 1_000;

/// What a stream thread is given of its application instance: the parts it uses, each shared
/// with the others that use it.
#[derive(Clone)]
pub(crate) struct ThreadParts {
    pub(crate) wiring: Arc<InstanceWiring>,
    pub(crate) lifecycle: Arc<Lifecycle>,
    pub(crate) metrics: Arc<InstanceMetrics>,
    pub(crate) queries: Arc<QueryInbox>,
    pub(crate) globals: Arc<GlobalTables>,
}

pub(crate) struct StreamThread {
    pub(crate) index: usize,
    pub(crate) name: String,
    /// Configuration, topology, backend, topics, state directory, coordinator.
    wiring: Arc<InstanceWiring>,
    /// The stop flag, and where this thread says it is idle.
    lifecycle: Arc<Lifecycle>,
    /// This thread's counters (slot `index`), the task registry, the records processed.
    metrics: Arc<InstanceMetrics>,
    /// The interactive queries waiting for this thread (slot `index`).
    queries: Arc<QueryInbox>,
    /// The global tables' stores, which this thread's tasks read.
    globals: Arc<GlobalTables>,
    /// Every decision about when to fetch, process, commit, heartbeat, clean up and wait.
    core: LoopCore,
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
    /// What a record that fails to deserialize or process does.
    handlers: Handlers,
    /// Reused per iteration: the partitions the backend named as changed, the inputs to fetch,
    /// the tasks to process or commit.
    changed: Vec<TopicPartition>,
    inputs: Vec<InputRef>,
    task_ids: Vec<TaskId>,
    /// The tasks the last commit committed, sorted: those idle since give their caches'
    /// buffers back (so a thread with thousands of tasks keeps buffers only for the tasks of
    /// its last commit, not for every task it ever ran).
    last_committed: Vec<TaskId>,
    /// Repartition partitions committed since the last purge, and the offset to purge each
    /// up to (only what commits touched: an idle thread purges nothing).
    purge: HashMap<TopicPartition, u64>,
    /// When this thread last purged.
    last_purge: Instant,
    /// The dirty tasks' cache bytes at the last look (a commit empties them).
    cache_bytes: usize,
    /// The coordinator's acceptable recovery lag, if it sent one.
    acceptable_recovery_lag: Option<u64>,
    /// Warm-up tasks already reported as caught up.
    warmups_reported: BTreeSet<TaskId>,
    assignment: Assignment,
    send_policy: OffsetSendPolicy,
    snapshot: ThreadSnapshot,
}

impl StreamThread {
    /// A stream thread in metrics slot `index`, named as Kafka Streams names them
    /// (`<application_id>-StreamThread-<n>`).
    pub(crate) fn new(index: usize, name: String, parts: ThreadParts) -> StreamThread {
        let ThreadParts {
            wiring,
            lifecycle,
            metrics,
            queries,
            globals,
        } = parts;
        let config = &wiring.config;
        let collector = RecordCollector::new(
            wiring.backend.clone(),
            wiring.topics.clone(),
            config.compression,
            config.batch_max_bytes,
            config.max_request_size,
            config.processing_guarantee == ProcessingGuarantee::ExactlyOnce,
            &Handlers::of(config),
        );
        let send_policy = OffsetSendPolicy::new(config.task_offset_interval);
        let snapshot = ThreadSnapshot::new(wiring.state_dir.clone(), config.snapshot_strategy);
        // The first thread deletes task directories nobody here owned for a while.
        let cleanup_interval = (index == 0).then_some(config.state_cleanup_delay);
        let settings = LoopSettings {
            poll: config.poll,
            commit_interval: config.commit_interval(),
            heartbeat_interval: config.heartbeat_interval,
            cleanup_interval,
            cache_max_bytes: config.thread_cache_max_bytes(),
            fetch_strategy: config.fetch_strategy,
            idle_wakeup: config.idle_wakeup,
        };
        StreamThread {
            index,
            name,
            core: LoopCore::new(settings, Instant::now()),
            tasks: BTreeMap::new(),
            restoring: BTreeMap::new(),
            standbys: BTreeMap::new(),
            waiting: BTreeMap::new(),
            updater: None,
            events: Vec::new(),
            collector,
            scratch: Scratch::default(),
            handlers: Handlers::of(&wiring.config),
            changed: Vec::new(),
            inputs: Vec::new(),
            task_ids: Vec::new(),
            last_committed: Vec::new(),
            purge: HashMap::new(),
            last_purge: Instant::now(),
            cache_bytes: 0,
            acceptable_recovery_lag: None,
            warmups_reported: BTreeSet::new(),
            assignment: Assignment::default(),
            send_policy,
            snapshot,
            wiring,
            lifecycle,
            metrics,
            queries,
            globals,
        }
    }

    /// Runs until the application shuts down or an error stops it.
    pub(crate) fn run(mut self) -> Result<()> {
        let metrics = self.metrics.threads[self.index].clone();
        metrics.set_os_thread_id();
        metrics.set_name(&self.name);
        let result = loop {
            match self.run_loop() {
                Err(e)
                    if e.backend_kind() == Some(BackendErrorKind::Fenced)
                        && !self.lifecycle.is_shutting_down() =>
                {
                    if let Err(e) = self.handle_fenced(&e) {
                        break Err(e);
                    }
                }
                result => break result,
            }
        };
        // Release the tasks whatever happened, then leave, so the others can take them.
        let closed = self.close(result.is_ok());
        self.wiring.coordinator.leave(&self.name);
        self.wiring.backend.wake_waiters();
        result.and(closed)
    }

    /// Another producer or member took this thread's place (a fenced transactional producer,
    /// a commit from a member that lost its tasks): what it processed since its last commit
    /// was aborted. As Kafka Streams does with a `TaskMigratedException`, it closes every task
    /// dirty — no checkpoint, the records of the aborted transaction dropped — and starts over
    /// from its assignment: the next heartbeat gives the tasks back, and they restore from
    /// their changelogs what their stores do not hold. A zombie never writes on.
    fn handle_fenced(&mut self, error: &Error) -> Result<()> {
        tracing::warn!(thread = %self.name, %error, "fenced: closing the tasks dirty and rejoining");
        self.collector.discard();
        self.close(false)?;
        self.waiting.clear();
        self.warmups_reported.clear();
        self.last_committed.clear();
        self.assignment = Assignment::default();
        self.core.heartbeat_now(Instant::now());
        self.metrics.threads[self.index]
            .fenced
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The loop: observe, then do what the core decides. Every `if` below asks the core.
    fn run_loop(&mut self) -> Result<()> {
        let metrics = self.metrics.threads[self.index].clone();
        let fetch_max_bytes = self.wiring.config.fetch_max_bytes;
        let backend = self.wiring.backend.clone();
        loop {
            // Read before the looks a wake-up asks for (the stop flag, queries, the group's
            // generation) and handed to the wait: a wake-up after this ends the wait at once,
            // one before it is seen by those looks.
            let woken = backend.wake_count();
            if self.lifecycle.is_shutting_down() {
                break;
            }
            metrics.loops.fetch_add(1, Ordering::Relaxed);
            // A plain load in the common case; the swap only when a query is waiting.
            if self.queries.take_pending(self.index) {
                self.answer_queries();
            }
            // Which partitions may have new data: one comparison when nothing moved.
            let version = backend.data_version();
            if self.core.version_moved(version) {
                self.changed.clear();
                let named = self
                    .core
                    .seen_version()
                    .and_then(|seen| backend.changed_partitions(seen, &mut self.changed));
                match named {
                    Some(v) => self.core.observe(v, Changes::Named(&self.changed)),
                    None => self.core.observe(version, Changes::Unknown),
                }
            }
            // Fetch the ready inputs.
            let poll_start = Instant::now();
            self.inputs.clear();
            self.inputs.extend(self.core.ready());
            for &(id, input) in &self.inputs {
                let got = match self.tasks.get_mut(&id) {
                    Some(task) => {
                        let got = task.fetch_input(input, &*backend, fetch_max_bytes)?;
                        if task.offsets_moved {
                            self.core.offsets_moved(id);
                        }
                        got
                    }
                    None => false,
                };
                self.core.fetched((id, input), got);
            }
            metrics.poll.record(poll_start.elapsed());
            // Process the tasks holding records.
            let mut processed = 0;
            self.task_ids.clear();
            self.task_ids.extend(self.core.busy());
            let loop_start = Instant::now();
            let wall_clock_ms = system_time_ms();
            // The caches' bytes as processing adds to them: once they reach the thread's
            // budget the pass stops and the commit below empties them, so a thread with
            // thousands of busy tasks never caches more than `statestore_cache_max_bytes`.
            let cache_max_bytes = self.core.cache_max_bytes();
            let mut cache_bytes = self.cache_bytes;
            for &id in &self.task_ids {
                let Some(task) = self.tasks.get_mut(&id) else {
                    self.core.processed(id, 0, false);
                    continue;
                };
                task.set_wall_clock(wall_clock_ms);
                let cached_before = task.cache_bytes();
                let n = task.process(
                    MAX_RECORDS_PER_TASK_PER_LOOP,
                    &mut self.collector,
                    &mut self.scratch,
                    &self.handlers,
                )?;
                self.core.processed(id, n, task.has_buffered());
                let dropped = task.take_dropped_records();
                task.publish_metrics(n, dropped);
                if dropped > 0 {
                    metrics
                        .dropped_records
                        .fetch_add(dropped, Ordering::Relaxed);
                }
                if task.take_commit_request() {
                    self.core.request_commit();
                }
                // Processing may have scheduled or cancelled wall-clock punctuators.
                Self::reschedule(&mut self.core, id, task, loop_start, wall_clock_ms);
                processed += n;
                cache_bytes += task.cache_bytes().saturating_sub(cached_before);
                // After a task, never before one: a pass always makes progress, even with
                // `statestore_cache_max_bytes = 0`.
                if cache_bytes >= cache_max_bytes {
                    self.core.stopped_after(id);
                    break;
                }
            }
            if processed > 0 {
                metrics.process_nanos.fetch_add(
                    loop_start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64,
                    Ordering::Relaxed,
                );
            }
            // Wall-clock punctuation: only the tasks whose deadline passed.
            self.task_ids.clear();
            self.task_ids.extend(self.core.punctuation_due(loop_start));
            for &id in &self.task_ids {
                let Some(task) = self.tasks.get_mut(&id) else {
                    self.core.set_punctuation_deadline(id, None);
                    continue;
                };
                let started = Instant::now();
                let fired = {
                    let _span = tracing::debug_span!("punctuate", task = %id).entered();
                    task.punctuate_wall_clock(
                        wall_clock_ms,
                        &mut self.collector,
                        &mut self.scratch,
                    )?
                };
                if fired > 0 {
                    metrics.punctuate.record(started.elapsed());
                    self.core.punctuated(id);
                }
                if task.take_commit_request() {
                    self.core.request_commit();
                }
                Self::reschedule(&mut self.core, id, task, loop_start, wall_clock_ms);
            }
            if processed > 0 {
                metrics
                    .records
                    .fetch_add(processed as u64, Ordering::Relaxed);
                self.metrics
                    .records_processed
                    .fetch_add(processed as u64, Ordering::Relaxed);
            }
            // Commit when due: only the dirty tasks hold cache bytes (a commit empties them).
            let cache_bytes: usize = self
                .core
                .dirty()
                .filter_map(|id| self.tasks.get(&id))
                .map(StreamTask::cache_bytes)
                .sum();
            self.cache_bytes = cache_bytes;
            let mut now = Instant::now();
            if self.core.commit_due(now, cache_bytes).is_some() {
                self.commit()?;
                now = Instant::now();
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
            self.snapshot.publish_metrics(&metrics);
            if self.core.cleanup_due(now) {
                self.clean_up();
            }
            // Heartbeat when due; apply a new assignment if it brought one.
            let generation = self.wiring.coordinator.generation();
            let mut reassigned = false;
            if self.core.heartbeat_due(now, generation) {
                reassigned = self.heartbeat(now)?;
                self.core.heartbeat_sent(now, generation);
                if self.wiring.coordinator.generation() != generation {
                    // This heartbeat moved the group: the other members must look now, not at
                    // their next deadline.
                    backend.wake_waiters();
                }
            }
            let settled =
                !reassigned && !restored && self.restoring.is_empty() && self.waiting.is_empty();
            match self.core.wait(now, settled) {
                Some(wait) => {
                    let seen = self.core.seen_version().unwrap_or(version);
                    if wait.settled && !self.core.is_dirty() && !self.collector.has_pending() {
                        self.lifecycle.set_idle(self.index, version);
                    }
                    let timeout = wait.until.saturating_duration_since(now);
                    if !timeout.is_zero() {
                        backend.wait_for_data(seen, woken, timeout);
                    }
                }
                None => self.lifecycle.set_busy(self.index),
            }
        }
        self.commit()
    }

    /// Answers the interactive queries waiting for this thread from its running tasks' stores
    /// (`query.rs`).
    fn answer_queries(&mut self) {
        let queries = self.queries.drain(self.index);
        for query in queries {
            let answer = self.answer_query(&query.store, &query.op);
            // The asker may have given up.
            let _ = query.reply.send(answer);
        }
    }

    fn answer_query(&self, store: &str, op: &QueryOp) -> Result<QueryAnswer> {
        let topology = &self.wiring.topology;
        let holds = |id: &TaskId| {
            topology
                .subtopologies
                .get(id.subtopology as usize)
                .is_some_and(|sub| sub.stores.iter().any(|&s| topology.stores[s].name == store))
        };
        let mut answer = QueryAnswer {
            restoring: self.restoring.keys().filter(|id| holds(id)).count()
                + self
                    .waiting
                    .iter()
                    .filter(|(id, kind)| **kind == TaskKind::Active && holds(id))
                    .count(),
            ..QueryAnswer::default()
        };
        let mut value = Vec::new();
        for task in self.tasks.values() {
            let Some(i) = task
                .store_metrics
                .iter()
                .position(|(name, _)| name == store)
            else {
                continue;
            };
            let Some(cached) = task.stores.stores.get(i) else {
                continue;
            };
            match op {
                QueryOp::Get(key) => {
                    if cached.get_with_timestamp(key, &mut value)?.is_some() {
                        answer.entries.push((key.clone(), value.clone()));
                    }
                }
                QueryOp::Range(from, to) => {
                    answer
                        .entries
                        .extend(cached.scan(from.as_deref(), to.as_deref())?);
                }
                QueryOp::Count => answer.count += cached.approximate_len() as u64,
                QueryOp::Segmented { lo, hi, from, to } => answer.entries.extend(
                    cached
                        .scan_window(lo, hi, *from, *to)?
                        .into_iter()
                        .map(|(entry, value, _)| (entry, value)),
                ),
            }
        }
        Ok(answer)
    }

    /// Tells the core when `task`'s next wall-clock punctuator is due.
    fn reschedule(core: &mut LoopCore, id: TaskId, task: &StreamTask, now: Instant, now_ms: i64) {
        let at = task.next_wall_clock_punctuation().map(|ms| {
            // At least 1 ms: the two clocks round differently, and a deadline that looks due to
            // the monotonic clock but not yet to the wall clock would spin.
            let wait = u64::try_from(ms.saturating_sub(now_ms)).unwrap_or(0).max(1);
            now + std::time::Duration::from_millis(wait)
        });
        core.set_punctuation_deadline(id, at);
    }

    /// Deletes task directories nobody in this process owned for `state_cleanup_delay_ms`.
    fn clean_up(&self) {
        let delay = self.wiring.config.state_cleanup_delay;
        // A task's stores in the shared database go first, while the task cannot be claimed: a
        // crash in between leaves a checkpoint over no store, which the next open restores.
        let store_db = self.wiring.store_db.clone();
        let mut before_delete = |task| match &store_db {
            None => true,
            Some(db) => match db.delete_task(task) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(%task, error = %e, "deleting an unowned task's stores failed; keeping its directory");
                    false
                }
            },
        };
        match self
            .wiring
            .state_dir
            .clean_unowned_task_dirs_with(delay, &mut before_delete)
        {
            Ok(deleted) if !deleted.is_empty() => {
                tracing::info!(?deleted, "cleaned up unowned task directories")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "state directory cleanup failed"),
        }
    }

    /// Heartbeats to the coordinator; whether a new assignment was applied.
    fn heartbeat(&mut self, now: Instant) -> Result<bool> {
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
    fn start_waiting(&mut self) -> Result<()> {
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
            stores.maybe_checkpoint(&self.wiring.state_dir, 0, true)?;
        }
        drop(stores);
        self.snapshot.task_closed(id)?;
        self.wiring.state_dir.unlock_task(id, &self.name);
        Ok(())
    }

    /// Commits the tasks that processed records since the last commit: flush caches and
    /// forward → write changelogs → append outputs → commit offsets → write caches to the
    /// stores → checkpoint. Touches only those tasks (the core's dirty set).
    fn commit(&mut self) -> Result<()> {
        let delta = self.wiring.config.checkpoint_offset_delta;
        self.task_ids.clear();
        self.task_ids.extend(self.core.dirty());
        if !self.task_ids.is_empty() || self.collector.has_pending() {
            let _span =
                tracing::debug_span!("commit", thread = %self.name, tasks = self.task_ids.len())
                    .entered();
            let started = Instant::now();
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get_mut(id) {
                    task.flush_nodes(&mut self.collector, &mut self.scratch)?;
                }
            }
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get_mut(id) {
                    task.write_changelogs(&mut self.collector)?;
                }
            }
            let mut offsets = Vec::new();
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get(id)
                    && (task.uncommitted > 0 || task.offsets_moved)
                {
                    task.committable_offsets(&mut offsets);
                }
            }
            let group = &self.wiring.config.application_id;
            if self.wiring.config.processing_guarantee == ProcessingGuarantee::ExactlyOnce {
                // Outputs, changelog writes and input offsets: one transaction.
                self.collector
                    .commit_transaction(group, &self.name, &offsets)?;
            } else {
                // The backend makes the appends durable before the offsets.
                self.collector.flush()?;
                self.wiring
                    .backend
                    .commit_offsets(group, &self.name, &offsets)?;
            }
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get_mut(id) {
                    task.purgeable_offsets(&mut self.purge);
                    task.committed(&self.collector)?;
                    task.stores
                        .maybe_checkpoint(&self.wiring.state_dir, delta, false)?;
                    self.snapshot.positions(&task.stores);
                }
            }
            let metrics = &self.metrics.threads[self.index];
            metrics.commits.fetch_add(1, Ordering::Relaxed);
            metrics.commit.record(started.elapsed());
        }
        self.task_ids.sort_unstable();
        for id in &self.last_committed {
            if self.task_ids.binary_search(id).is_err()
                && let Some(task) = self.tasks.get_mut(id)
            {
                task.release_cache_buffers();
            }
        }
        // The buffers kept for the next commit are bounded by twice the thread's cache budget
        // (a cache's buffers hold up to twice what it used): past that, the rest go back.
        // Half the budget ran 20,000 tasks in 300 MiB instead of 324 but made a large task
        // regrow its buffers at every commit (5 % slower at 1 M keys); twice does not bind
        // there (docs/BENCHMARKS.md, "The store budget counted").
        let limit = self.core.cache_max_bytes().saturating_mul(2);
        let mut kept = 0usize;
        for id in &self.task_ids {
            if let Some(task) = self.tasks.get_mut(id) {
                if kept >= limit {
                    task.release_cache_buffers();
                } else {
                    kept += task.cache_kept_bytes();
                }
            }
        }
        std::mem::swap(&mut self.last_committed, &mut self.task_ids);
        self.cache_bytes = 0;
        let now = Instant::now();
        self.core.committed(now);
        self.maybe_purge(now);
        Ok(())
    }

    /// After a commit, at most every `repartition_purge_interval`: deletes the records of the
    /// repartition partitions committed since the last purge below their committed offsets
    /// (Kafka Streams' `maybePurgeCommittedRecords`). A failure is logged, not fatal: the next
    /// purge tries again with newer offsets.
    fn maybe_purge(&mut self, now: Instant) {
        if self.purge.is_empty()
            || now.saturating_duration_since(self.last_purge)
                < self.wiring.config.repartition_purge_interval
        {
            return;
        }
        self.last_purge = now;
        for (tp, offset) in self.purge.drain() {
            if let Err(e) = self.wiring.backend.delete_records(&tp, offset) {
                tracing::warn!(thread = %self.name, topic_partition = %tp, offset, error = %e, "could not purge a repartition topic up to its committed offset; the next purge tries again");
            }
        }
    }

    /// Releases every task: with checkpoints after a clean run, as they are after a failure.
    fn close(&mut self, clean: bool) -> Result<()> {
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
