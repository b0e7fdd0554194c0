//! Global tables (Kafka Streams' `GlobalKTable`): stores that every application instance holds
//! whole, every partition of their topic, outside task assignment.
//!
//! A global store is kept by one thread per instance, `<application_id>-GlobalStreamThread`:
//! [`StreamsApp::start`](crate::StreamsApp::start) starts it and waits until it has read every
//! partition of every global topic to the end offsets it found (the restore), then starts the
//! stream threads; it then follows the topics. The topic is the store's changelog: the store
//! holds the records' own key and value bytes (the value behind its 8-byte timestamp), a record
//! without a value deletes its key and one without a key is skipped. Every record is checked
//! with the table's serdes first: one that does not decode goes to the deserialization
//! exception handler (skipped under `continue`; under `fail`, the default, the global thread
//! fails and the application stops), as Kafka's global thread does. Stream threads read the
//! stores (a stream–global-table join) under a shared read lock, all at once; the global thread
//! writes at most [`WRITE_CHUNK`] records at a time under the write lock.
//!
//! [`GlobalState`] is the part without threads: the stores and where each partition was read
//! to, restored to the end offsets found at start ([`GlobalState::restore`]) and caught up one
//! fetch per partition per round ([`GlobalState::catch_up`], so no partition waits on a busy
//! one). The global thread and the test driver both drive it; the thread loop only adds
//! waiting. A round touches only the partitions the backend named as changed and those whose
//! last fetch found records, when the backend can name them (docs/design.md §3).
//!
//! [`GlobalTables`] is what the rest of the instance sees of them: the stores, which the stream
//! threads' tasks read, and what the global thread reports (the data version it was last idle
//! at, the records it restored), which the application reads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;

use crate::backend::Backend;
use crate::engine::instance::InstanceWiring;
use crate::engine::lifecycle::Lifecycle;
pub(crate) use crate::state::global::{CheckFn, GlobalStore};
use crate::state::{
    BytesStore, InMemoryKeyValueStore, PersistentKeyValueStore, StoreDatabase, StorePosition,
};
use crate::topology::Topology;
use crate::types::error::{Error, Result};
use crate::types::handlers::{ErrorHandlerContext, ExceptionHandlerRef, HandlerResponse};

/// Records written to a global store under one hold of its write lock.
const WRITE_CHUNK: usize = 1_024;

/// The task id an exception handler is given for a global table's record (Kafka's `-1_-1`).
pub(crate) const GLOBAL_TASK: TaskId = TaskId::new(u32::MAX, u32::MAX);

/// An instance's global tables as the rest of it sees them: their stores, and what the global
/// thread reports.
#[derive(Debug)]
pub(crate) struct GlobalTables {
    /// The global tables' stores, by the topology's index.
    pub(crate) stores: Vec<Arc<GlobalStore>>,
    /// The global thread's idle version (as a stream thread's, [`Lifecycle::set_idle`];
    /// `u64::MAX` while busy).
    idle: AtomicU64,
    /// Records the global thread read restoring the global stores at start.
    records_restored: AtomicU64,
}

impl GlobalTables {
    /// `stores`, their thread not started yet.
    pub(crate) fn new(stores: Vec<Arc<GlobalStore>>) -> GlobalTables {
        GlobalTables {
            stores,
            idle: AtomicU64::new(u64::MAX),
            records_restored: AtomicU64::new(0),
        }
    }

    /// Whether there are no global tables, or the global thread was last idle at data version
    /// `version`.
    pub(crate) fn idle_at(&self, version: u64) -> bool {
        self.stores.is_empty() || self.idle.load(Ordering::Acquire) == version
    }

    /// Records the global thread read restoring the global stores.
    pub(crate) fn records_restored(&self) -> u64 {
        self.records_restored.load(Ordering::Relaxed)
    }
}

/// One partition of a global topic: its store, and the next offset to read.
struct Partition {
    tp: TopicPartition,
    store: usize,
    position: u64,
}

/// The global stores of an application instance and how far each partition of their topics was
/// read.
pub(crate) struct GlobalState {
    stores: Vec<Arc<GlobalStore>>,
    checks: Vec<CheckFn>,
    partitions: Vec<Partition>,
    /// Each partition's index in `partitions`.
    index: HashMap<TopicPartition, usize>,
    /// The partitions whose last fetch found records (they may have more), for the next round.
    pending: Vec<usize>,
    /// Reused per round: the partitions to fetch.
    round: Vec<usize>,
    /// Reused per fetch: each record's key and value (`None`: delete) and the offset after it.
    writes: Vec<(Vec<u8>, Option<Vec<u8>>, u64)>,
    deserialization: ExceptionHandlerRef,
    /// Records skipped: without a key, or not decoding under a `continue` handler.
    pub(crate) skipped: u64,
}

impl std::fmt::Debug for GlobalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalState")
            .field("stores", &self.stores)
            .finish_non_exhaustive()
    }
}

impl GlobalState {
    /// The stores of `topology`'s global tables over `backend`'s topics: an in-memory store
    /// empty, to be read from offset 0; a persistent one (in `db`) as it was, to be read on from
    /// the positions it recorded. A global topic that does not exist is
    /// [`Error::MissingSourceTopic`]. Records that do not decode go to `deserialization`.
    pub(crate) fn open(
        topology: &Topology,
        backend: &dyn Backend,
        db: Option<&Arc<StoreDatabase>>,
        deserialization: ExceptionHandlerRef,
    ) -> Result<GlobalState> {
        let mut stores = Vec::new();
        let mut partitions = Vec::new();
        for (i, global) in topology.globals.iter().enumerate() {
            let count =
                backend
                    .partitions(&global.topic)?
                    .ok_or_else(|| Error::MissingSourceTopic {
                        topic: global.topic.clone(),
                    })?;
            let mut store: Box<dyn BytesStore + Sync> = match (global.persistent, db) {
                (true, Some(db)) => Box::new(PersistentKeyValueStore::open_global(
                    db,
                    "kv-ts",
                    global.store.clone(),
                )?),
                _ => Box::new(InMemoryKeyValueStore::new(global.store.clone())),
            };
            let starts = start_offsets(&mut *store, &global.topic, count, backend)?;
            for (p, position) in starts.into_iter().enumerate() {
                let tp = TopicPartition::new(global.topic.as_str(), p as u32);
                partitions.push(Partition {
                    tp,
                    store: i,
                    position,
                });
            }
            stores.push(Arc::new(GlobalStore {
                name: global.store.clone(),
                topic: global.topic.clone(),
                store: RwLock::new(store),
            }));
        }
        let index = partitions
            .iter()
            .enumerate()
            .map(|(i, p)| (p.tp.clone(), i))
            .collect();
        Ok(GlobalState {
            stores,
            checks: topology.globals.iter().map(|g| g.check.clone()).collect(),
            partitions,
            index,
            pending: Vec::new(),
            round: Vec::new(),
            writes: Vec::new(),
            deserialization,
            skipped: 0,
        })
    }

    /// The stores, by the topology's global table index.
    pub(crate) fn stores(&self) -> &[Arc<GlobalStore>] {
        &self.stores
    }

    /// Makes what was written to the stores durable (a persistent store's data and positions).
    pub(crate) fn flush(&self) -> Result<()> {
        for global in &self.stores {
            let mut store = global.store.write().unwrap_or_else(PoisonError::into_inner);
            store.flush()?;
        }
        Ok(())
    }

    /// Whether the topology has global tables.
    pub(crate) fn is_empty(&self) -> bool {
        self.stores.is_empty()
    }

    /// Reads every partition up to the end offset it had when this began (records appended
    /// meanwhile are left to [`GlobalState::catch_up`]), a fetch per partition per round.
    /// Returns the records read. Stops early, with what it read, once `stop` is set.
    pub(crate) fn restore(
        &mut self,
        backend: &dyn Backend,
        max_bytes: usize,
        stop: &AtomicBool,
    ) -> Result<u64> {
        let mut ends = Vec::with_capacity(self.partitions.len());
        for p in &self.partitions {
            ends.push(backend.end_offset(&p.tp)?);
        }
        let mut read = 0;
        loop {
            let behind: Vec<usize> = (0..self.partitions.len())
                .filter(|&i| self.partitions[i].position < ends[i])
                .collect();
            if behind.is_empty() || stop.load(Ordering::Acquire) {
                return Ok(read);
            }
            for i in behind {
                read += self.fetch(i, backend, max_bytes)?;
            }
        }
    }

    /// One round: a fetch of each partition `changed` names (`None`: every partition) and of
    /// each whose last fetch found records. Returns the records read; 0 means caught up with
    /// what the backend named.
    pub(crate) fn catch_up(
        &mut self,
        backend: &dyn Backend,
        changed: Option<&[TopicPartition]>,
        max_bytes: usize,
    ) -> Result<u64> {
        let mut round = std::mem::take(&mut self.round);
        round.clear();
        round.append(&mut self.pending);
        match changed {
            Some(changed) => round.extend(changed.iter().filter_map(|tp| self.index.get(tp))),
            None => round.extend(0..self.partitions.len()),
        }
        round.sort_unstable();
        round.dedup();
        let mut read = 0;
        let mut result = Ok(());
        for &i in &round {
            match self.fetch(i, backend, max_bytes) {
                Ok(0) => {}
                Ok(n) => {
                    read += n;
                    self.pending.push(i);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.round = round;
        result.map(|()| read)
    }

    /// Reads every partition to its end, round after round (the test driver, between records).
    // Used by the test driver (the `embedded` feature).
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn catch_up_fully(&mut self, backend: &dyn Backend, max_bytes: usize) -> Result<()> {
        while self.catch_up(backend, None, max_bytes)? > 0 {}
        Ok(())
    }

    /// One fetch of partition `i` from its position, checked and applied: the records it read.
    fn fetch(&mut self, i: usize, backend: &dyn Backend, max_bytes: usize) -> Result<u64> {
        let Partition {
            tp,
            store,
            position,
        } = &self.partitions[i];
        let (store, position) = (*store, *position);
        let batches = match backend.fetch(tp, position, max_bytes) {
            Err(e) if e.is_offset_out_of_range() => {
                // Records below the partition's start were deleted: what is left is the table.
                let start = backend.start_offset(tp)?;
                if start <= position {
                    return Err(e);
                }
                tracing::warn!(topic = %tp.topic, partition = tp.partition, from = position, to = start, "a global table's records were deleted below its position: reading from the partition's start");
                self.partitions[i].position = start;
                return self.fetch(i, backend, max_bytes);
            }
            fetched => fetched?,
        };
        let mut next = position;
        let mut read = 0;
        self.writes.clear();
        for batch in &batches {
            for record in batch.records() {
                let record = record?;
                if record.offset() < next {
                    continue;
                }
                next = record.offset() + 1;
                read += 1;
                let Some(key) = record.key() else {
                    self.skipped += 1;
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = record.offset(), "a global table's record without a key: skipping it");
                    continue;
                };
                let value = record.value();
                if let Err((part, source)) = (self.checks[store])(key, value.map(|v| &v[..])) {
                    let error = Error::Deserialize {
                        part,
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                        offset: record.offset(),
                        source,
                    };
                    let context = ErrorHandlerContext {
                        topic: Some(&tp.topic),
                        partition: Some(tp.partition),
                        offset: Some(record.offset()),
                        timestamp: record.timestamp(),
                        processor_node_id: None,
                        task_id: GLOBAL_TASK,
                        source_raw_key: Some(key),
                        source_raw_value: value.map(|v| &v[..]),
                    };
                    if self.deserialization.handle(&context, &error) == HandlerResponse::Fail {
                        tracing::error!(error = %error, "a global table's record does not deserialize; the exception handler says fail");
                        return Err(error);
                    }
                    tracing::warn!(error = %error, "a global table's record does not deserialize; the exception handler says continue: skipping it");
                    self.skipped += 1;
                    continue;
                }
                let value = value.map(|v| {
                    let mut stamped = Vec::with_capacity(8 + v.len());
                    stamped.extend_from_slice(&record.timestamp().to_be_bytes());
                    stamped.extend_from_slice(v);
                    stamped
                });
                self.writes.push((key.to_vec(), value, next));
            }
            // A compacted batch's offsets after its last record hold nothing: go past them.
            next = next.max(batch.last_offset() + 1);
        }
        if next > position {
            self.apply(i, next)?;
        }
        self.partitions[i].position = next;
        Ok(read)
    }

    /// Writes the fetched records to partition `i`'s store, [`WRITE_CHUNK`] at a time, each
    /// chunk with the position it covers (`next`, after the last chunk: skipped records at the
    /// end are covered too).
    fn apply(&mut self, i: usize, next: u64) -> Result<()> {
        let tp = &self.partitions[i].tp;
        let global = &self.stores[self.partitions[i].store];
        let mut chunks = self.writes.chunks(WRITE_CHUNK).peekable();
        if chunks.peek().is_none() {
            // Only skipped records: their position still moves.
            let at = position_of(tp, next);
            let mut store = global.store.write().unwrap_or_else(PoisonError::into_inner);
            store.write_batch_at_partition(&mut std::iter::empty(), &at)?;
            return Ok(());
        }
        while let Some(chunk) = chunks.next() {
            let end = match chunks.peek() {
                Some(_) => chunk.last().map_or(next, |(_, _, after)| *after),
                None => next,
            };
            let at = position_of(tp, end);
            let mut batch = chunk.iter().map(|(k, v, _)| (&k[..], v.as_deref()));
            let mut store = global.store.write().unwrap_or_else(PoisonError::into_inner);
            store.write_batch_at_partition(&mut batch, &at)?;
        }
        Ok(())
    }
}

/// The position after offset `next - 1` of `tp`, as a global store records it.
fn position_of(tp: &TopicPartition, next: u64) -> StorePosition {
    StorePosition {
        changelog: tp.clone(),
        offset: next,
    }
}

/// Where to read each of `topic`'s `count` partitions from into `store`: the positions it
/// recorded (none: from 0). Positions of another topic, or past a partition's end (the topic
/// was recreated), mean the store is not the topic's; data without any position is what a wipe
/// a crash interrupted leaves. Either way the store is wiped, with a warning, and the topic read
/// again from 0.
fn start_offsets(
    store: &mut dyn BytesStore,
    topic: &str,
    count: u32,
    backend: &dyn Backend,
) -> Result<Vec<u64>> {
    let mut starts = vec![0u64; count as usize];
    let recorded = store.partition_positions()?;
    let mut wrong = None;
    for p in &recorded {
        let ours = p.changelog.partition < count && &*p.changelog.topic == topic;
        let end = match ours {
            true => backend.end_offset(&TopicPartition::new(topic, p.changelog.partition))?,
            false => 0,
        };
        if !ours || p.offset > end {
            wrong = Some(format!(
                "its position {p} is not within {topic} (ending at {end})"
            ));
            break;
        }
        starts[p.changelog.partition as usize] = p.offset;
    }
    if recorded.is_empty() && !store.is_empty()? {
        wrong = Some("it holds data without a position".into());
    }
    if let Some(why) = wrong {
        tracing::warn!(
            store = store.name(),
            topic,
            "a global store is not its topic's: {why}; wiping it and reading the topic again from the start"
        );
        store.wipe()?;
        starts.iter_mut().for_each(|s| *s = 0);
    } else if !recorded.is_empty() {
        tracing::info!(
            store = store.name(),
            topic,
            "reading a global store on from its recorded positions"
        );
    }
    Ok(starts)
}

/// The global thread's life: restore every global store (reported on `restored`), then follow
/// the topics until the application stops, waiting for new data when a round read nothing.
pub(crate) fn run_global_thread(
    wiring: &InstanceWiring,
    lifecycle: &Lifecycle,
    tables: &GlobalTables,
    mut state: GlobalState,
    restored: std::sync::mpsc::Sender<Result<()>>,
) -> Result<()> {
    let backend = wiring.backend.clone();
    let max_bytes = wiring.config.fetch_max_bytes;
    let started = std::time::Instant::now();
    let mut seen = backend.data_version();
    match state.restore(&*backend, max_bytes, lifecycle.stop_flag()) {
        Ok(records) => {
            tracing::info!(records, elapsed = ?started.elapsed(), "restored the global stores");
            tables.records_restored.store(records, Ordering::Relaxed);
            let _ = restored.send(Ok(()));
        }
        Err(e) => {
            let message = e.to_string();
            let _ = restored.send(Err(e));
            return Err(Error::IllegalState(format!(
                "the global thread could not restore its stores: {message}"
            )));
        }
    }
    // What was appended since the restore began: everything, once.
    let mut changed = Vec::new();
    let mut everything = true;
    loop {
        // Read before the stop flag, as a stream thread does (thread/mod.rs).
        let woken = backend.wake_count();
        if lifecycle.is_shutting_down() {
            break;
        }
        changed.clear();
        let version = backend.changed_partitions(seen, &mut changed);
        let which = match (everything, version) {
            (false, Some(_)) => Some(&changed[..]),
            _ => None,
        };
        everything = false;
        let now = version.unwrap_or_else(|| backend.data_version());
        let read = state.catch_up(&*backend, which, max_bytes)?;
        seen = now;
        if read == 0 {
            tables.idle.store(now, Ordering::Release);
            backend.wait_for_data(now, woken, wiring.config.poll);
        } else {
            tables.idle.store(u64::MAX, Ordering::Release);
        }
    }
    state.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::EmbeddedBackend;
    use crate::state::MemoryBudget;

    /// A persistent global store reads on from the positions it recorded with its data; one
    /// holding data without any position (a wipe a crash interrupted: positions go first) is
    /// wiped and read again from the start, so no row of another life survives.
    #[test]
    fn a_global_store_with_data_but_no_position_is_wiped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = riffle_log::Log::in_memory();
        log.create_topic("t", 2).expect("topic");
        let mut batch = riffle_record::BatchBuilder::new(riffle_record::Compression::None);
        for i in 0..5u8 {
            batch.push(0, Some(&[i]), Some(&[i]));
        }
        log.append(&TopicPartition::new("t", 1), &mut batch)
            .expect("append");
        let backend = EmbeddedBackend::new(log);
        let db = StoreDatabase::open(dir.path(), MemoryBudget::split(0, 0)).expect("db");
        let mut store = PersistentKeyValueStore::open_global(&db, "kv-ts", "g").expect("open");
        let at = position_of(&TopicPartition::new("t", 1), 3);
        store
            .write_batch_at_partition(&mut std::iter::once((&b"k"[..], Some(&b"v"[..]))), &at)
            .expect("write");
        let starts = start_offsets(&mut store, "t", 2, &backend).expect("starts");
        assert_eq!(starts, vec![0, 3], "read on from the recorded position");
        assert!(!store.is_empty().expect("empty?"), "kept");
        // Past the partition's end (5): another topic's store.
        let past = position_of(&TopicPartition::new("t", 1), 9);
        store
            .write_batch_at_partition(&mut std::iter::empty(), &past)
            .expect("write");
        assert_eq!(
            start_offsets(&mut store, "t", 2, &backend).expect("starts"),
            vec![0, 0]
        );
        assert!(store.is_empty().expect("empty?"), "wiped");
        // Data without a position.
        store
            .write_batch(&mut std::iter::once((&b"stale"[..], Some(&b"v"[..]))))
            .expect("write");
        assert_eq!(
            start_offsets(&mut store, "t", 2, &backend).expect("starts"),
            vec![0, 0]
        );
        assert!(store.is_empty().expect("empty?"), "wiped");
    }
}
