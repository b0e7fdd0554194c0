//! A stream task: one sub-topology instantiated for one partition, with its input queues and
//! stores.
//!
//! A task's stores ([`TaskStores`]) are plain owned data, so they can be lent to the state updater
//! while it restores them; the processor nodes are built on the stream thread once the task is
//! RUNNING. A task processes the records of its input partitions in timestamp order (the head with
//! the smallest timestamp first).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use riffle_record::{FetchedBatch, Record, RecordIter, TopicPartition};
use riffle_state_dir::{Checkpoint, StateDirectory, TaskId};

use crate::backend::Backend;
use crate::config::RecordingLevel;
use crate::config::{AutoOffsetReset, StreamsConfig};
use crate::engine::metrics::StoreMetrics;
use crate::engine::metrics::TaskMetrics;
use crate::processor::collector::{RecordCollector, TopicTable};
use crate::processor::node::{FlushRef, ProcessingContext, Scratch, SourceRef};
use crate::processor::{PunctuationType, Schedule, TaskSignals};
use crate::state::global::GlobalStore;
use crate::state::{
    BytesStore, CachedStore, InMemoryKeyValueStore, PersistentKeyValueStore, SegmentedKind,
    SegmentedStore, StoreDatabase, StorePosition,
};
use crate::topology::{LifecycleRef, StoreKind, SubtopologyDef, Topology, changelog_topic};
use crate::types::error::{Error, Result};
use crate::types::handlers::panic_message;
use crate::types::handlers::{ErrorHandlerContext, HandlerResponse, Handlers};
use crate::types::record::Headers;
use crate::types::timestamp::TimestampExtractorRef;

/// The shortest segment of a window or session store on disk: a segment is a fjall keyspace,
/// which costs milliseconds to create and to drop (files, directories, fsyncs), so on disk
/// segments are at least ten minutes (in memory, Kafka's `max(retention / 2, 60 s)`). Longer
/// segments only keep expired windows a little longer: aggregations read by their own stream
/// time, not by what a store still holds.
const PERSISTENT_MIN_SEGMENT_MS: i64 = 10 * 60_000;

/// A changelog partition a task writes, with the offset its store reflects.
pub(crate) struct ChangelogState {
    pub(crate) store: usize,
    pub(crate) topic: usize,
    pub(crate) partition: TopicPartition,
    /// The changelog end offset the store reflects (restored or written up to).
    pub(crate) offset: u64,
    /// The changelog is a table's source topic, read by this task: nothing is written to it,
    /// and the store's position is the input's consumed offset.
    pub(crate) source: bool,
}

/// The stores of one task and where their changelogs stand.
pub(crate) struct TaskStores {
    pub(crate) id: TaskId,
    pub(crate) stores: Vec<CachedStore>,
    pub(crate) changelogs: Vec<ChangelogState>,
    /// The changelog offset sum at the last checkpoint written.
    checkpointed_sum: Option<i64>,
    /// Changelog records restored into the stores and not yet counted in metrics.
    pub(crate) restored_records: u64,
}

impl TaskStores {
    /// Opens the stores of `sub` for task `id`. Persistent stores start from their checkpoint; a
    /// persistent store without a valid checkpoint is wiped and restored from the changelog start.
    /// Without a state directory (the test driver) every store is in memory.
    pub(crate) fn open(
        id: TaskId,
        topology: &Topology,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        state_dir: Option<&StateDirectory>,
        store_db: Option<&Arc<StoreDatabase>>,
    ) -> Result<TaskStores> {
        let has_persistent = sub.stores.iter().any(|&s| topology.stores[s].persistent);
        let checkpoint = if let Some(state_dir) = state_dir.filter(|_| has_persistent) {
            state_dir.task_dir(id)?;
            match state_dir.read_checkpoint(id) {
                Ok(cp) => cp,
                Err(e) => {
                    tracing::warn!(task = %id, error = %e, "unreadable checkpoint: restoring the task's stores from their changelogs");
                    None
                }
            }
        } else {
            None
        };
        // Exactly sized: a task usually has one store, and a `Vec` of it grown by a push would
        // hold room for four (a thread of 10,000 tasks spent 9 MiB on that room).
        let mut stores = Vec::with_capacity(sub.stores.len());
        let mut changelogs = Vec::with_capacity(sub.stores.len());
        // A persistent store's recorded position differs from the checkpoint's offset.
        let mut disagrees = false;
        for &s in &sub.stores {
            let def = &topology.stores[s];
            let changelog = match &def.source_topic {
                Some(source) => topics.index_of(source),
                None if def.logged => topics.index_of(&changelog_topic(application_id, &def.name)),
                None => None,
            };
            // Timestamped stores are a format of their own, so data of the format before them
            // is never read as theirs.
            let format = match (def.kind, def.timestamped) {
                (StoreKind::KeyValue, false) => "kv",
                (StoreKind::KeyValue, true) => "kv-ts",
                (StoreKind::Window { .. }, _) => "window",
                (StoreKind::Session { .. }, _) => "session",
            };
            let db = store_db.filter(|_| def.persistent);
            let mut inner: Box<dyn BytesStore> = match (def.kind, db) {
                (StoreKind::KeyValue, Some(db)) => {
                    Box::new(PersistentKeyValueStore::open(db, id, format, &def.name)?)
                }
                (StoreKind::KeyValue, None) => Box::new(InMemoryKeyValueStore::new(&def.name)),
                (
                    StoreKind::Window {
                        retention_ms,
                        segment_ms,
                        ..
                    }
                    | StoreKind::Session {
                        retention_ms,
                        segment_ms,
                    },
                    db,
                ) => {
                    let kind = if matches!(def.kind, StoreKind::Session { .. }) {
                        SegmentedKind::Session
                    } else {
                        SegmentedKind::Window
                    };
                    Box::new(match db {
                        Some(db) => SegmentedStore::persistent(
                            db,
                            id,
                            format,
                            &def.name,
                            kind,
                            retention_ms,
                            segment_ms.max(PERSISTENT_MIN_SEGMENT_MS),
                        )?,
                        None => {
                            SegmentedStore::in_memory(&def.name, kind, retention_ms, segment_ms)
                        }
                    })
                }
            };
            if let Some(topic) = changelog {
                let partition = TopicPartition::new(&**topics.name(topic), id.partition);
                let checkpointed = checkpoint.as_ref().and_then(|cp| cp.get(&partition));
                let offset = if inner.is_persistent() {
                    restore_start(id, &mut *inner, &partition, checkpointed)?
                } else {
                    0
                };
                disagrees |= inner.is_persistent() && checkpointed.unwrap_or(0) != offset;
                changelogs.push(ChangelogState {
                    store: stores.len(),
                    topic,
                    partition,
                    offset,
                    source: def.source_topic.is_some(),
                });
            }
            let ordered = match def.kind {
                StoreKind::KeyValue => def.ordered_cache,
                StoreKind::Window { ordered, .. } => ordered,
                StoreKind::Session { .. } => true,
            };
            stores.push(CachedStore::configured(
                inner,
                def.timestamped,
                def.caching,
                ordered,
            ));
        }
        let checkpointed_sum = checkpoint.map(|cp| cp.offset_sum());
        let mut opened = TaskStores {
            id,
            stores,
            changelogs,
            checkpointed_sum,
            restored_records: 0,
        };
        // The checkpoint (what heartbeats' offset sums come from) follows the stores.
        if let Some(state_dir) = state_dir.filter(|_| disagrees) {
            opened.maybe_checkpoint(state_dir, 0, true)?;
        }
        Ok(opened)
    }

    /// Stores assembled by hand, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(
        id: TaskId,
        stores: Vec<CachedStore>,
        changelogs: Vec<ChangelogState>,
    ) -> Self {
        TaskStores {
            id,
            stores,
            changelogs,
            checkpointed_sum: None,
            restored_records: 0,
        }
    }

    /// Whether any store keeps its data across restarts (then checkpoints are written).
    pub(crate) fn has_persistent_stores(&self) -> bool {
        self.changelogs
            .iter()
            .any(|c| self.stores[c.store].inner.is_persistent())
    }

    /// Writes a checkpoint of the changelog positions if they moved enough (or `force`), after
    /// making the stores durable. A store holding writes it has not written back is
    /// checkpointed at the position it wrote back with its data (behind the changelog's), unless
    /// `force` (closing) writes everything back first: the checkpoint never claims what the
    /// stores do not hold on disk.
    pub(crate) fn maybe_checkpoint(
        &mut self,
        state_dir: &StateDirectory,
        delta: u64,
        force: bool,
    ) -> Result<()> {
        if !self.has_persistent_stores() {
            return Ok(());
        }
        if force {
            for store in &mut self.stores {
                store.inner.persist()?;
            }
        }
        let mut checkpoint = Checkpoint::default();
        for c in &self.changelogs {
            let store = &self.stores[c.store].inner;
            if !store.is_persistent() {
                continue;
            }
            let offset = if store.has_unpersisted() {
                match store.position()? {
                    Some(p) if p.changelog == c.partition => p.offset,
                    // Nothing of this changelog is on disk yet.
                    _ => return Ok(()),
                }
            } else {
                c.offset
            };
            checkpoint.insert(c.partition.clone(), offset);
        }
        let sum = checkpoint.offset_sum();
        let moved = self
            .checkpointed_sum
            .map_or(i64::MAX, |last| sum.saturating_sub(last));
        if moved == 0 || (!force && moved < i64::try_from(delta).unwrap_or(i64::MAX)) {
            return Ok(());
        }
        for store in &mut self.stores {
            store.inner.flush()?;
        }
        state_dir.write_checkpoint(self.id, &checkpoint)?;
        self.checkpointed_sum = Some(sum);
        Ok(())
    }

    /// Applies `count` restored changelog records of `partition` to its store, given as the
    /// writes they amount to: ascending keys, each once.
    pub(crate) fn apply_restored(
        &mut self,
        partition: &TopicPartition,
        records: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>, i64)>,
        next_offset: u64,
        count: u64,
    ) -> Result<()> {
        if let Some(c) = self
            .changelogs
            .iter_mut()
            .find(|c| &c.partition == partition)
        {
            let store = &mut self.stores[c.store];
            store.restore(records)?;
            if store.inner.is_persistent() {
                // After the data: a crash in between only replays these records.
                store.inner.record_position(&StorePosition {
                    changelog: c.partition.clone(),
                    offset: next_offset,
                })?;
            }
            self.restored_records += count;
            c.offset = next_offset;
        }
        Ok(())
    }
}

/// Where a persistent store's restoration starts: the changelog position recorded in the
/// store with the data it covers (Kafka's KIP-1035), whatever the checkpoint says. A store
/// whose position belongs to another changelog partition (copied from another task), or that
/// holds data but records no position (written before stores recorded one, or damaged), is
/// wiped and restored from the changelog start. Each disagreement with the checkpoint is a
/// warning naming the task, the store and both offsets.
fn restore_start(
    task: TaskId,
    store: &mut dyn BytesStore,
    partition: &TopicPartition,
    checkpointed: Option<u64>,
) -> Result<u64> {
    let name = store.name().to_owned();
    let recorded = match store.position() {
        Ok(recorded) => recorded,
        Err(e) => {
            tracing::warn!(task = %task, store = %name, error = %e, "unreadable changelog position: wiping the store to restore it from the changelog start");
            store.wipe()?;
            return Ok(0);
        }
    };
    match recorded {
        Some(p) if p.changelog == *partition => {
            if let Some(c) = checkpointed.filter(|&c| c != p.offset) {
                let relation = if p.offset < c { "older" } else { "newer" };
                tracing::warn!(
                    task = %task,
                    store = %name,
                    changelog = %format!("{}-{}", partition.topic, partition.partition),
                    store_offset = p.offset,
                    checkpoint_offset = c,
                    "the store is {relation} than its checkpoint: restoring from the store's own offset"
                );
            }
            Ok(p.offset)
        }
        Some(p) => {
            tracing::warn!(
                task = %task,
                store = %name,
                changelog = %format!("{}-{}", partition.topic, partition.partition),
                recorded = %p,
                checkpoint_offset = ?checkpointed,
                "the store holds another changelog partition's data (copied from another task?): wiping it to restore from the changelog start"
            );
            store.wipe()?;
            Ok(0)
        }
        None if store.approximate_len() > 0 => {
            tracing::warn!(
                task = %task,
                store = %name,
                checkpoint_offset = ?checkpointed,
                "the store holds data but records no changelog position: wiping it to restore from the changelog start"
            );
            store.wipe()?;
            Ok(0)
        }
        None => {
            if let Some(c) = checkpointed.filter(|&c| c > 0) {
                tracing::warn!(
                    task = %task,
                    store = %name,
                    store_offset = 0,
                    checkpoint_offset = c,
                    "the store is missing or empty but its checkpoint is not: restoring it from the changelog start"
                );
            }
            Ok(0)
        }
    }
}

/// One input partition of a task.
struct PartitionQueue {
    tp: TopicPartition,
    source: SourceRef,
    /// The next offset to fetch.
    fetch_position: u64,
    batches: VecDeque<FetchedBatch>,
    current: Option<RecordIter>,
    head: Option<Record>,
    /// The head's extracted timestamp.
    head_timestamp: i64,
    /// The next offset to process: what a commit records.
    consumed: u64,
    extractor: TimestampExtractorRef,
    /// The largest timestamp extracted from this partition (-1 before the first).
    partition_time: i64,
    /// Where to go when the fetch position is out of the partition's range.
    reset: AutoOffsetReset,
    /// A repartition topic: purged up to the committed offset (the application is its only
    /// reader).
    purgeable: bool,
}

impl PartitionQueue {
    /// The fetch position is out of the partition's range (the records there were deleted, or
    /// the partition was recreated shorter): `auto_offset_reset` moves it to the partition's
    /// start or end, dropping what was buffered, with a warning naming the partition and both
    /// offsets; under `none` the task fails.
    fn reset_position(&mut self, backend: &dyn Backend) -> Result<()> {
        let start = backend.start_offset(&self.tp)?;
        let end = backend.end_offset(&self.tp)?;
        let from = self.fetch_position;
        let to = match self.reset {
            AutoOffsetReset::Earliest => start,
            AutoOffsetReset::Latest => end,
            _ => {
                return Err(Error::NoOffsetForPartition {
                    topic: self.tp.topic.to_string(),
                    partition: self.tp.partition,
                    reason: format!("offset {from} is out of its range {start}..{end}"),
                });
            }
        };
        tracing::warn!(topic_partition = %self.tp, offset = from, start, end, reset_to = to, policy = ?self.reset, "the offset to read is out of the partition's range; auto_offset_reset moves it");
        self.batches.clear();
        self.current = None;
        self.head = None;
        self.fetch_position = to;
        self.consumed = to;
        Ok(())
    }

    /// Loads the next record to process into `head`, if one is buffered, with its extracted
    /// timestamp. A record whose extracted timestamp is negative is skipped with a warning.
    fn fill_head(&mut self) -> Result<()> {
        while self.head.is_none() {
            if let Some(iter) = &mut self.current {
                match iter.next() {
                    Some(Ok(record)) => {
                        if record.offset() >= self.consumed {
                            let ts = self.extractor.extract(&record, self.partition_time)?;
                            if ts < 0 {
                                tracing::warn!(
                                    topic_partition = %self.tp,
                                    offset = record.offset(),
                                    timestamp = ts,
                                    "skipping a record: the timestamp extractor gave it a negative timestamp"
                                );
                                self.consumed = record.offset() + 1;
                                continue;
                            }
                            self.partition_time = self.partition_time.max(ts);
                            self.head_timestamp = ts;
                            self.head = Some(record);
                        }
                        continue;
                    }
                    Some(Err(e)) => return Err(e.into()),
                    None => self.current = None,
                }
            }
            match self.batches.pop_front() {
                Some(batch) => self.current = Some(batch.records()),
                None => return Ok(()),
            }
        }
        Ok(())
    }
}

/// One sub-topology × partition, RUNNING on a stream thread.
pub(crate) struct StreamTask {
    pub(crate) id: TaskId,
    inputs: Vec<PartitionQueue>,
    flushes: Vec<FlushRef>,
    /// Nodes with `init`/`close` (processors), parents first.
    lifecycles: Vec<LifecycleRef>,
    pub(crate) stores: TaskStores,
    /// Records processed since the last commit.
    pub(crate) uncommitted: u64,
    /// An input's position was reset (`auto_offset_reset`) since the last commit.
    pub(crate) offsets_moved: bool,
    /// The task's metrics, once it runs on a stream thread.
    pub(crate) metrics: Option<Arc<TaskMetrics>>,
    /// Each store's name and metrics, by store index.
    pub(crate) store_metrics: Vec<(String, Arc<StoreMetrics>)>,
    /// Stream time, wall-clock time, commit requests and new schedules.
    signals: TaskSignals,
    /// Stream-time and wall-clock punctuation schedules, each ordered by (deadline, seq).
    stream_schedules: Vec<Schedule>,
    wall_schedules: Vec<Schedule>,
}

impl StreamTask {
    /// Builds the task's nodes over its (restored) stores and positions its inputs at the
    /// committed offsets; its nodes read the application's global stores `globals`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        mut stores: TaskStores,
        topology: &Topology,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        backend: &dyn Backend,
        config: &StreamsConfig,
        globals: &[Arc<GlobalStore>],
    ) -> Result<StreamTask> {
        let id = stores.id;
        let timing = config.metrics_recording_level >= RecordingLevel::Debug;
        for store in &mut stores.stores {
            store.set_timing(timing);
        }
        let mut store_slots = vec![None; topology.stores.len()];
        for (slot, &s) in sub.stores.iter().enumerate() {
            store_slots[s] = Some(slot);
        }
        let instance = topology.instantiate(sub, topics, application_id, &store_slots, globals);
        let store_metrics = sub
            .stores
            .iter()
            .map(|&s| (topology.stores[s].name.clone(), Arc::default()))
            .collect();
        let mut inputs = Vec::with_capacity(instance.sources.len());
        for (topic, source, extractor, internal) in instance.sources {
            let tp = topics.topic_partition(topic, id.partition);
            // Repartition topics always start at their earliest offset, as in Kafka Streams.
            let reset = if internal {
                AutoOffsetReset::Earliest
            } else {
                config.auto_offset_reset
            };
            let committed = match backend.committed_offset(application_id, &tp)? {
                Some(offset) => offset,
                // A fetch below the partition's start resets to it.
                None if reset == AutoOffsetReset::Earliest => 0,
                None if reset == AutoOffsetReset::Latest => {
                    let end = backend.end_offset(&tp)?;
                    tracing::info!(topic_partition = %tp, offset = end, "no committed offset; auto_offset_reset=latest: reading from the end");
                    end
                }
                None => {
                    return Err(Error::NoOffsetForPartition {
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                        reason: "the application has no committed offset for it".into(),
                    });
                }
            };
            inputs.push(PartitionQueue {
                tp,
                source,
                fetch_position: committed,
                batches: VecDeque::new(),
                current: None,
                head: None,
                head_timestamp: 0,
                consumed: committed,
                extractor: extractor.unwrap_or_else(|| config.default_timestamp_extractor.clone()),
                partition_time: -1,
                reset,
                purgeable: internal,
            });
        }
        Ok(StreamTask {
            id,
            inputs,
            flushes: instance.flushes,
            lifecycles: instance.lifecycles,
            stores,
            uncommitted: 0,
            offsets_moved: false,
            metrics: None,
            store_metrics,
            signals: TaskSignals {
                outer_join_emit_interval_ms: i64::try_from(
                    config.outer_join_emit_interval.as_millis(),
                )
                .unwrap_or(i64::MAX),
                ..TaskSignals::new(Arc::from(application_id))
            },
            stream_schedules: Vec::new(),
            wall_schedules: Vec::new(),
        })
    }

    /// Calls every processor's `init`, parents first; then the task may process.
    pub(crate) fn init(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
        wall_clock_ms: i64,
    ) -> Result<()> {
        self.signals.wall_clock_ms = wall_clock_ms;
        let lifecycles = std::mem::take(&mut self.lifecycles);
        let mut result = Ok(());
        for node in &lifecycles {
            let mut ctx = self.context(collector, scratch, 0, None);
            result = node.borrow_mut().init(&mut ctx);
            if result.is_err() {
                break;
            }
        }
        self.lifecycles = lifecycles;
        self.collect_schedules();
        result
    }

    /// Calls every processor's `close`.
    fn close_nodes(&mut self) {
        for node in &self.lifecycles {
            node.borrow_mut().close();
        }
    }

    /// Sets the wall-clock time processors see until the next call.
    pub(crate) fn set_wall_clock(&mut self, wall_clock_ms: i64) {
        self.signals.wall_clock_ms = wall_clock_ms;
    }

    /// Records dropped (late for their windows) since the last call.
    pub(crate) fn take_dropped_records(&mut self) -> u64 {
        std::mem::take(&mut self.signals.dropped_records)
    }

    /// Whether a processor asked for a commit; clears the request.
    pub(crate) fn take_commit_request(&mut self) -> bool {
        std::mem::take(&mut self.signals.commit_requested)
    }

    /// When the next wall-clock punctuator is due (ms), if one is scheduled.
    pub(crate) fn next_wall_clock_punctuation(&self) -> Option<i64> {
        self.wall_schedules.first().map(|s| s.next)
    }

    /// Moves schedules made since the last call into their queues.
    fn collect_schedules(&mut self) {
        if self.signals.scheduled.is_empty() {
            return;
        }
        for schedule in self.signals.scheduled.drain(..) {
            match schedule.kind {
                PunctuationType::StreamTime => self.stream_schedules.push(schedule),
                _ => self.wall_schedules.push(schedule),
            }
        }
        self.stream_schedules.sort_by_key(|s| (s.next, s.seq));
        self.wall_schedules.sort_by_key(|s| (s.next, s.seq));
    }

    /// Fires the punctuators of `kind` due at `time`, earliest first, each once (Kafka
    /// Streams' `PunctuationQueue.mayPunctuate`); how many fired.
    fn punctuate(
        &mut self,
        kind: PunctuationType,
        time: i64,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        let mut fired = 0;
        loop {
            let queue = match kind {
                PunctuationType::StreamTime => &mut self.stream_schedules,
                _ => &mut self.wall_schedules,
            };
            let Some(first) = queue.first() else { break };
            if first.next > time {
                break;
            }
            let mut schedule = queue.remove(0);
            if schedule.cancelled.get() {
                continue;
            }
            let mut ctx = self.context(collector, scratch, time, None);
            (schedule.punctuator)(&mut ctx, time)?;
            fired += 1;
            if !schedule.cancelled.get() {
                schedule.reschedule(time);
                self.signals.scheduled.push(schedule);
            }
            self.collect_schedules();
        }
        Ok(fired)
    }

    /// Fires the stream-time punctuators that stream time reached; how many fired.
    pub(crate) fn punctuate_stream_time(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        match self.stream_schedules.first() {
            Some(s) if s.next <= self.signals.stream_time => {
                let time = self.signals.stream_time;
                self.punctuate(PunctuationType::StreamTime, time, collector, scratch)
            }
            _ => Ok(0),
        }
    }

    /// Fires the wall-clock punctuators due at `now_ms`; how many fired.
    pub(crate) fn punctuate_wall_clock(
        &mut self,
        now_ms: i64,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        self.signals.wall_clock_ms = now_ms;
        match self.wall_schedules.first() {
            Some(s) if s.next <= now_ms => {
                self.punctuate(PunctuationType::WallClockTime, now_ms, collector, scratch)
            }
            _ => Ok(0),
        }
    }

    /// The task's input partitions, in input order (an input's index is its position here).
    pub(crate) fn input_partitions(&self) -> Vec<TopicPartition> {
        self.inputs.iter().map(|i| i.tp.clone()).collect()
    }

    /// Fetches more records for input `index` unless it has enough buffered. Returns whether it
    /// has data to process (fetched now or buffered before); `false` means the fetch found
    /// nothing new.
    pub(crate) fn fetch_input(
        &mut self,
        index: usize,
        backend: &dyn Backend,
        max_bytes: usize,
    ) -> Result<bool> {
        let Some(input) = self.inputs.get_mut(index) else {
            return Ok(false);
        };
        if input.batches.len() >= 2 {
            return Ok(true);
        }
        let batches = match backend.fetch(&input.tp, input.fetch_position, max_bytes) {
            Err(e) if e.is_offset_out_of_range() => {
                input.reset_position(backend)?;
                self.offsets_moved = true;
                backend.fetch(&input.tp, input.fetch_position, max_bytes)?
            }
            fetched => fetched?,
        };
        let Some(last) = batches.last() else {
            return Ok(false);
        };
        input.fetch_position = last.last_offset() + 1;
        input.batches.extend(batches);
        Ok(true)
    }

    fn context<'a>(
        &'a mut self,
        collector: &'a mut RecordCollector,
        scratch: &'a mut Scratch,
        timestamp: i64,
        record: Option<&'a Record>,
    ) -> ProcessingContext<'a> {
        ProcessingContext {
            task: self.id,
            timestamp,
            headers: record.map(Headers::from_log).unwrap_or_default(),
            record,
            stores: &mut self.stores.stores,
            collector,
            scratch,
            signals: &mut self.signals,
        }
    }

    /// Processes up to `max` buffered records; returns how many it processed.
    pub(crate) fn process(
        &mut self,
        max: usize,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
        handlers: &Handlers,
    ) -> Result<usize> {
        let mut done = 0;
        while done < max {
            let mut next: Option<(usize, i64)> = None;
            for (i, input) in self.inputs.iter_mut().enumerate() {
                input.fill_head()?;
                if input.head.is_some() && next.is_none_or(|(_, ts)| input.head_timestamp < ts) {
                    next = Some((i, input.head_timestamp));
                }
            }
            let Some((i, timestamp)) = next else { break };
            let Some(record) = self.inputs[i].head.take() else {
                break;
            };
            self.signals.stream_time = self.signals.stream_time.max(timestamp);
            let source = self.inputs[i].source.clone();
            let mut ctx = self.context(collector, scratch, timestamp, Some(&record));
            // A panic in the application's code is one record's failure, for the processing
            // exception handler (the unwinding dropped every node's borrow).
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                source.borrow_mut().process(&mut ctx, &record)
            }));
            let failed = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(panic) => Some(Error::Panicked {
                    message: panic_message(&*panic),
                }),
            };
            if let Some(error) = failed {
                self.handle_failure(error, &record, timestamp, collector, handlers)?;
            }
            self.inputs[i].consumed = record.offset() + 1;
            done += 1;
            if !self.signals.scheduled.is_empty() {
                self.collect_schedules();
            }
            self.punctuate_stream_time(collector, scratch)?;
            if self.signals.commit_requested {
                break;
            }
        }
        self.uncommitted += done as u64;
        Ok(done)
    }

    /// A record's deserialization or processing failed: its handler fails the thread or skips
    /// the record (counted in `dropped-records`, and sent to the dead-letter queue if there is
    /// one). Any other error (a store, the log, a broker) fails the thread.
    fn handle_failure(
        &mut self,
        error: Error,
        record: &Record,
        timestamp: i64,
        collector: &mut RecordCollector,
        handlers: &Handlers,
    ) -> Result<()> {
        let tp = record.topic_partition();
        let (handler, what, processor) = match &error {
            Error::Deserialize { .. } => (&handlers.deserialization, "deserializing", None),
            Error::Processor { processor, .. } => {
                (&handlers.processing, "processing", Some(processor.clone()))
            }
            Error::User(_) | Error::Panicked { .. } => (&handlers.processing, "processing", None),
            _ => return Err(error),
        };
        let context = ErrorHandlerContext {
            topic: Some(&*tp.topic),
            partition: Some(tp.partition),
            offset: Some(record.offset()),
            timestamp,
            processor_node_id: processor.as_deref(),
            task_id: self.id,
            source_raw_key: record.key().map(|k| &k[..]),
            source_raw_value: record.value().map(|v| &v[..]),
        };
        if handler.handle(&context, &error) == HandlerResponse::Fail {
            tracing::error!(task = %self.id, topic = %tp.topic, partition = tp.partition, offset = record.offset(), error = %error, "{what} a record failed; the exception handler says fail");
            return Err(match error {
                Error::Deserialize { .. } => error,
                other => Error::RecordFailed {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    offset: record.offset(),
                    processor,
                    source: Box::new(other),
                },
            });
        }
        tracing::warn!(task = %self.id, topic = %tp.topic, partition = tp.partition, offset = record.offset(), error = %error, "{what} a record failed; the exception handler says continue: skipping it");
        self.signals.dropped_records += 1;
        collector.send_dead_letter(&error, Some(record), timestamp, self.id.partition)?;
        Ok(())
    }

    /// Publishes what one `process` call did into the task's metrics: records processed and
    /// dropped, and each input's position (once per call, never per record).
    pub(crate) fn publish_metrics(&mut self, processed: usize, dropped: u64) {
        // At the DEBUG recording level the stores' timed reads and writes, as they happen (not
        // at commit: the latencies' sample windows are 30 s).
        for (store, (_, metrics)) in self.stores.stores.iter_mut().zip(&self.store_metrics) {
            if store.timing() {
                let (puts, gets) = store.take_timings();
                metrics
                    .put
                    .record_many(puts.count, puts.nanos, puts.max_nanos);
                metrics
                    .get
                    .record_many(gets.count, gets.nanos, gets.max_nanos);
            }
        }
        let Some(metrics) = &self.metrics else {
            return;
        };
        metrics
            .processed
            .fetch_add(processed as u64, Ordering::Relaxed);
        if dropped > 0 {
            metrics.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        for (input, (_, consumed)) in self.inputs.iter().zip(&metrics.consumed) {
            consumed.store(input.consumed, Ordering::Relaxed);
        }
    }

    /// Whether records are fetched but not yet processed.
    pub(crate) fn has_buffered(&self) -> bool {
        self.inputs
            .iter()
            .any(|i| i.head.is_some() || i.current.is_some() || !i.batches.is_empty())
    }

    /// Bytes held by the task's store caches.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.stores
            .stores
            .iter()
            .map(CachedStore::cache_bytes)
            .sum()
    }

    /// Commit, phase 1a: stateful nodes forward their cached updates downstream.
    pub(crate) fn flush_nodes(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let flushes = std::mem::take(&mut self.flushes);
        let mut result = Ok(());
        for node in &flushes {
            let mut ctx = self.context(collector, scratch, 0, None);
            result = node.borrow_mut().flush(&mut ctx);
            if result.is_err() {
                break;
            }
        }
        self.flushes = flushes;
        result
    }

    /// Commit, phase 1b: every cached store entry goes to its changelog.
    pub(crate) fn write_changelogs(&mut self, collector: &mut RecordCollector) -> Result<()> {
        let partition = self.id.partition;
        for changelog in self.stores.changelogs.iter().filter(|c| !c.source) {
            let store = &self.stores.stores[changelog.store];
            for i in 0..store.dirty_len() {
                let (key, value, timestamp) = store.dirty(i);
                collector.send(
                    changelog.topic,
                    partition,
                    timestamp,
                    Some(key),
                    value,
                    &Headers::new(),
                )?;
            }
        }
        Ok(())
    }

    /// Commit, phase 1c: the input offsets to commit.
    pub(crate) fn committable_offsets(&self, out: &mut Vec<(TopicPartition, u64)>) {
        for input in &self.inputs {
            out.push((input.tp.clone(), input.consumed));
        }
    }

    /// The repartition partitions this task reads and the offsets to purge them up to: what it
    /// committed.
    pub(crate) fn purgeable_offsets(&self, out: &mut impl Extend<(TopicPartition, u64)>) {
        out.extend(
            self.inputs
                .iter()
                .filter(|i| i.purgeable)
                .map(|i| (i.tp.clone(), i.consumed)),
        );
    }

    /// Commit, phase 2 (after the commit is durable): the caches go to the stores, and the
    /// changelog positions move to what the collector appended.
    pub(crate) fn committed(&mut self, collector: &RecordCollector) -> Result<()> {
        let TaskStores {
            stores, changelogs, ..
        } = &mut self.stores;
        // A table's source topic is its changelog: the store reflects what the task consumed.
        for changelog in changelogs.iter_mut().filter(|c| c.source) {
            if let Some(input) = self.inputs.iter().find(|i| {
                *i.tp.topic == *changelog.partition.topic
                    && i.tp.partition == changelog.partition.partition
            }) {
                changelog.offset = changelog.offset.max(input.consumed);
            }
        }
        for (i, store) in stores.iter_mut().enumerate() {
            // A persistent store records where its changelog ends after this commit, with
            // the writes (in memory there is nothing to record it for).
            let position = changelogs
                .iter()
                .find(|c| c.store == i)
                .filter(|_| store.inner.is_persistent())
                .map(|c| StorePosition {
                    changelog: c.partition.clone(),
                    offset: match c.source {
                        true => c.offset,
                        false => collector
                            .end_offset(c.topic, self.id.partition)
                            .map_or(c.offset, |end| c.offset.max(end)),
                    },
                });
            let started = std::time::Instant::now();
            store.write_to_store(position.as_ref())?;
            if let Some((_, metrics)) = self.store_metrics.get(i) {
                metrics.flush.record(started.elapsed());
                let counts = store.take_counts();
                metrics.puts.fetch_add(counts.puts, Ordering::Relaxed);
                metrics.gets.fetch_add(counts.gets, Ordering::Relaxed);
                metrics.hits.fetch_add(counts.hits, Ordering::Relaxed);
            }
        }
        for changelog in changelogs.iter_mut().filter(|c| !c.source) {
            if let Some(end) = collector.end_offset(changelog.topic, self.id.partition) {
                changelog.offset = changelog.offset.max(end);
            }
        }
        self.uncommitted = 0;
        self.offsets_moved = false;
        Ok(())
    }

    /// Bytes the task's store caches hold allocated ([`CachedStore::kept_bytes`]).
    pub(crate) fn cache_kept_bytes(&self) -> usize {
        self.stores.stores.iter().map(CachedStore::kept_bytes).sum()
    }

    /// Frees the buffers of the task's (empty, just committed) store caches.
    pub(crate) fn release_cache_buffers(&mut self) {
        for store in &mut self.stores.stores {
            store.release_buffers();
        }
    }

    /// Drops what was processed since the last commit: the caches' writes never reach the
    /// stores (the stores stay at the last commit), and the inputs rewind to the committed
    /// offsets.
    pub(crate) fn into_stores(mut self) -> TaskStores {
        self.close_nodes();
        for store in &mut self.stores.stores {
            store.discard();
        }
        self.stores
    }
}
