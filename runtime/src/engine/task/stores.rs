//! A task's stores: opened for a task from their checkpoints (or wiped and restored from the
//! changelog start when their position disagrees), where their changelogs stand, and the
//! checkpoint written after commits. Plain owned data, lent to the state updater while it
//! restores them: nothing here may hold a processor node.

use std::sync::Arc;

use riffle_record::TopicPartition;
use riffle_state_dir::{Checkpoint, StateDirectory, TaskId};

use crate::processor::collector::TopicTable;
use crate::state::{
    BytesStore, CachedStore, InMemoryKeyValueStore, PersistentKeyValueStore, SegmentedKind,
    SegmentedStore, StoreDatabase, StorePosition,
};
use crate::topology::{StoreKind, SubtopologyDef, Topology, changelog_topic};
use crate::types::error::Result;

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
