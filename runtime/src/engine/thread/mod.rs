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
//!
//! The loop is here; what it calls is beside it, by concern: heartbeats, applying an assignment
//! and moving tasks through their lifecycle (`assignment`), committing and purging (`commit`),
//! answering interactive queries (`queries`).

mod assignment;
mod commit;
mod queries;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;
use riffle_task_manager::{StateUpdaterThread, TaskKind, UpdaterEvent};

use crate::backend::coordinator::OffsetSendPolicy;
use crate::backend::group::Assignment;
use crate::config::ProcessingGuarantee;
use crate::engine::global::GlobalTables;
use crate::engine::instance::InstanceWiring;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::loop_core::{Changes, InputRef, LoopCore, LoopSettings};
use crate::engine::metrics::InstanceMetrics;
use crate::engine::query::QueryInbox;
use crate::engine::restore::StoreLease;
use crate::engine::snapshot::ThreadSnapshot;
use crate::engine::task::StreamTask;
use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::processor::system_time_ms;
use crate::types::error::{BackendErrorKind, Error, Result};
use crate::types::handlers::Handlers;

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
    /// The coordinator holds more active tasks for this thread, not yet revoked by their
    /// owners: the thread is not idle.
    tasks_pending: bool,
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
            tasks_pending: false,
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
            if self
                .core
                .session_lapsed(poll_start, self.wiring.config.group_session_timeout)
            {
                // Silent past its session (a stopped process): its tasks may be elsewhere by
                // now. It hears from the group before it reads or writes anything, and a
                // fenced member stops here.
                let generation = self.wiring.coordinator.generation();
                self.heartbeat(poll_start)?;
                self.core.heartbeat_sent(poll_start, generation);
            }
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
            let settled = !reassigned
                && !restored
                && self.restoring.is_empty()
                && self.waiting.is_empty()
                && !self.tasks_pending;
            match self.core.wait(now, settled) {
                Some(wait) => {
                    // What the core took changes up to: newer than `version` when an append
                    // landed between reading it and asking which partitions changed. Idle at
                    // that version (not `version`, which the thread would never report again
                    // before its next heartbeat: the wait below does not end for it).
                    let seen = self.core.seen_version().unwrap_or(version);
                    if wait.settled && !self.core.is_dirty() && !self.collector.has_pending() {
                        self.lifecycle.set_idle(self.index, seen);
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
}
