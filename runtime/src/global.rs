//! Global tables (Kafka Streams' `GlobalKTable`): stores that every application instance holds
//! whole, every partition of their topic, outside task assignment.
//!
//! A global store is kept by one thread per instance, `<application_id>-GlobalStreamThread`:
//! [`StreamsApp::start`](crate::StreamsApp::start) starts it and waits until it has read every
//! partition of every global topic to the end offsets it found (the restore), then starts the
//! stream threads; it then follows the topics. The topic is the store's changelog: the store
//! holds the records' own key and value bytes (the value behind its 8-byte timestamp), a record
//! without a value deletes its key and one without a key is skipped. Stream threads read the
//! stores (a stream–global-table join) under a shared read lock, all at once; the global thread
//! writes a fetch's records under the write lock.
//!
//! [`GlobalState`] is the part without threads: the stores and where each partition was read
//! to, caught up from a backend by [`GlobalState::catch_up`]. The global thread and the test
//! driver both drive it; the thread loop only adds waiting. It never touches a partition the
//! backend did not name as changed, when the backend can name them (docs/design.md §3).

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock};

use riffle_log::TopicPartition;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::store::{
    InMemoryKeyValueStore, KeyValueStore, PersistentKeyValueStore, StoreDatabase, StoreError,
    StorePosition,
};
use crate::topology::Topology;
use riffle_state_dir::ChangelogPartition;

/// One global table's store, shared by the global thread (which writes it) and the stream
/// threads (which read it).
pub(crate) struct GlobalStore {
    pub(crate) name: String,
    pub(crate) topic: String,
    /// Read by every stream thread at once; written by the global thread a fetch at a time.
    store: RwLock<Box<dyn KeyValueStore + Sync>>,
}

impl std::fmt::Debug for GlobalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalStore")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .finish()
    }
}

impl GlobalStore {
    /// The value of `key` (into `out`) and its timestamp; `None` if the table has no row.
    pub(crate) fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<i64>, StoreError> {
        let store = self.store.read().unwrap_or_else(PoisonError::into_inner);
        if !store.get_into(key, out)? {
            return Ok(None);
        }
        let Some(stamp) = out.get(..8) else {
            return Err(StoreError::Corrupt {
                store: self.name.clone(),
                reason: format!(
                    "a value of {} bytes, fewer than its 8-byte timestamp",
                    out.len()
                ),
            });
        };
        let mut ts = [0u8; 8];
        ts.copy_from_slice(stamp);
        out.drain(..8);
        Ok(Some(i64::from_be_bytes(ts)))
    }
}

/// The global stores of an application instance and how far each partition of their topics was
/// read.
pub(crate) struct GlobalState {
    stores: Vec<Arc<GlobalStore>>,
    /// Every partition of every global topic: its store, and the next offset to read.
    partitions: Vec<(TopicPartition, usize, u64)>,
    /// Reused per fetch: the writes of one batch of records.
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Records without a key skipped so far.
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
    /// [`Error::MissingSourceTopic`].
    pub(crate) fn open(
        topology: &Topology,
        backend: &dyn Backend,
        db: Option<&Arc<StoreDatabase>>,
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
            let mut store: Box<dyn KeyValueStore + Sync> = match (global.persistent, db) {
                (true, Some(db)) => Box::new(PersistentKeyValueStore::open_global(
                    db,
                    "kv-ts",
                    global.store.clone(),
                )?),
                _ => Box::new(InMemoryKeyValueStore::new(global.store.clone())),
            };
            let starts = start_offsets(&mut *store, &global.topic, count, backend)?;
            for (p, start) in starts.into_iter().enumerate() {
                let tp = TopicPartition::new(global.topic.as_str(), p as u32);
                partitions.push((tp, i, start));
            }
            stores.push(Arc::new(GlobalStore {
                name: global.store.clone(),
                topic: global.topic.clone(),
                store: RwLock::new(store),
            }));
        }
        Ok(GlobalState {
            stores,
            partitions,
            writes: Vec::new(),
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

    /// Reads the partitions `changed` names (`None`: every partition) from where each was read
    /// to up to its end, into the stores. Returns the records read.
    pub(crate) fn catch_up(
        &mut self,
        backend: &dyn Backend,
        changed: Option<&[TopicPartition]>,
        max_bytes: usize,
    ) -> Result<u64> {
        let mut read = 0;
        for i in 0..self.partitions.len() {
            if let Some(changed) = changed
                && !changed.contains(&self.partitions[i].0)
            {
                continue;
            }
            loop {
                let n = self.fetch(i, backend, max_bytes)?;
                if n == 0 {
                    break;
                }
                read += n;
            }
        }
        Ok(read)
    }

    /// One fetch of partition `i` from its position, applied: the records it read.
    fn fetch(&mut self, i: usize, backend: &dyn Backend, max_bytes: usize) -> Result<u64> {
        let (tp, store, position) = &self.partitions[i];
        let batches = match backend.fetch(tp, *position, max_bytes) {
            Err(e) if e.is_offset_out_of_range() => {
                // Records below the partition's start were deleted: what is left is the table.
                let start = backend.start_offset(tp)?;
                if start <= *position {
                    return Err(e);
                }
                tracing::warn!(topic = %tp.topic, partition = tp.partition, from = *position, to = start, "a global table's records were deleted below its position: reading from the partition's start");
                self.partitions[i].2 = start;
                return self.fetch(i, backend, max_bytes);
            }
            fetched => fetched?,
        };
        let mut next = *position;
        self.writes.clear();
        for batch in &batches {
            for record in batch.records() {
                let record = record?;
                if record.offset() < next {
                    continue;
                }
                next = record.offset() + 1;
                let Some(key) = record.key() else {
                    self.skipped += 1;
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = record.offset(), "a global table's record without a key: skipping it");
                    continue;
                };
                let value = record.value().map(|v| {
                    let mut stamped = Vec::with_capacity(8 + v.len());
                    stamped.extend_from_slice(&record.timestamp().to_be_bytes());
                    stamped.extend_from_slice(v);
                    stamped
                });
                self.writes.push((key.to_vec(), value));
            }
        }
        let read = next - *position;
        if read > 0 {
            // With the position the records cover, in one batch (a persistent store reads on
            // from it after a restart).
            let at = StorePosition {
                changelog: ChangelogPartition::new(tp.topic.to_string(), tp.partition),
                offset: next,
            };
            let global = &self.stores[*store];
            let mut guard = global.store.write().unwrap_or_else(PoisonError::into_inner);
            let mut batch = self.writes.iter().map(|(k, v)| (&k[..], v.as_deref()));
            guard.write_batch_at_partition(&mut batch, &at)?;
        }
        self.partitions[i].2 = next;
        Ok(read)
    }
}

/// Where to read each of `topic`'s `count` partitions from into `store`: the positions it
/// recorded (none: from 0). Positions of another topic, or past a partition's end (the topic
/// was recreated), mean the store is not the topic's: it is wiped, with a warning, and read
/// again from 0.
fn start_offsets(
    store: &mut dyn KeyValueStore,
    topic: &str,
    count: u32,
    backend: &dyn Backend,
) -> Result<Vec<u64>> {
    let mut starts = vec![0u64; count as usize];
    let recorded = store.partition_positions()?;
    let mut wrong = None;
    for p in &recorded {
        let ours = p.changelog.partition < count && p.changelog.topic == topic;
        let end = match ours {
            true => backend.end_offset(&TopicPartition::new(topic, p.changelog.partition))?,
            false => 0,
        };
        if !ours || p.offset > end {
            wrong = Some((p.clone(), end));
            break;
        }
        starts[p.changelog.partition as usize] = p.offset;
    }
    if let Some((position, end)) = wrong {
        tracing::warn!(store = store.name(), recorded = %position, end, topic, "a global store's recorded position is not in its topic (recreated, or another topic's): wiping it and reading the topic again from the start");
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

/// The global thread's life: catch up with every global topic (the restore, reported on
/// `restored`), then follow them until the application stops, waiting for new data when there
/// is none.
pub(crate) fn run_global_thread(
    shared: Arc<crate::shared::AppShared>,
    mut state: GlobalState,
    restored: std::sync::mpsc::Sender<Result<()>>,
) -> Result<()> {
    let backend = shared.backend.clone();
    let max_bytes = shared.config.fetch_max_bytes;
    let started = std::time::Instant::now();
    let mut seen = backend.data_version();
    match state.catch_up(&*backend, None, max_bytes) {
        Ok(records) => {
            tracing::info!(records, elapsed = ?started.elapsed(), "restored the global stores");
            shared
                .global_records_restored
                .store(records, Ordering::Relaxed);
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
    let mut changed = Vec::new();
    while !shared.shutdown.load(Ordering::Acquire) {
        changed.clear();
        let version = backend.changed_partitions(seen, &mut changed);
        let which = version.map(|_| &changed[..]);
        let now = version.unwrap_or_else(|| backend.data_version());
        let read = state.catch_up(&*backend, which, max_bytes)?;
        seen = now;
        if read == 0 {
            shared.global_idle.store(now, Ordering::Release);
            backend.wait_for_data(now, shared.config.poll);
        } else {
            shared.global_idle.store(u64::MAX, Ordering::Release);
        }
    }
    state.flush()
}
