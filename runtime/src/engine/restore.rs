//! Restoration glue: the state updater reads changelogs through the backend
//! ([`BackendChangelogReader`]) and writes them into a task's stores, which the stream thread
//! lends it for the time being ([`StoreLease`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use riffle_record::{FetchedBatch, RecordIter, TopicPartition};
use riffle_task_manager::{BoxError, ChangelogReader, ChangelogRecord, RestoreTarget};

use crate::backend::Backend;
use crate::engine::metrics::ThreadMetrics;
use crate::engine::task::TaskStores;

/// Reads changelogs from the backend for the state updater. Each partition's fetched batches
/// are kept between calls, so reading a few thousand records at a time does not fetch (and
/// decode) the same megabyte again and again.
pub(crate) struct BackendChangelogReader {
    backend: Arc<dyn Backend>,
    max_bytes: usize,
    cursors: HashMap<TopicPartition, Cursor>,
}

/// Where reading a partition stands: the next offset, and what was fetched beyond it.
struct Cursor {
    /// The next offset to read: past the last record returned, and past the end of every batch
    /// read whole (a compacted batch's offsets after its last record hold nothing).
    next: u64,
    /// The offset after the last record returned: where the updater asks to go on from.
    resume: u64,
    batches: VecDeque<FetchedBatch>,
    /// The batch being read, and the offset after it.
    current: Option<(RecordIter, u64)>,
}

impl BackendChangelogReader {
    pub(crate) fn new(backend: Arc<dyn Backend>, max_bytes: usize) -> Self {
        BackendChangelogReader {
            backend,
            max_bytes,
            cursors: HashMap::new(),
        }
    }
}

impl ChangelogReader for BackendChangelogReader {
    fn end_offset(&mut self, partition: &TopicPartition) -> Result<u64, BoxError> {
        Ok(self.backend.end_offset(partition)?)
    }

    fn read(
        &mut self,
        partition: &TopicPartition,
        from: u64,
        max_records: usize,
        out: &mut Vec<ChangelogRecord>,
    ) -> Result<(), BoxError> {
        let cursor = match self.cursors.get_mut(partition) {
            Some(c) if c.next == from || c.resume == from => c,
            _ => {
                // A new partition, or a position the updater moved: start over from `from`.
                let fresh = Cursor {
                    next: from,
                    resume: from,
                    batches: VecDeque::new(),
                    current: None,
                };
                self.cursors.insert(partition.clone(), fresh);
                self.cursors.get_mut(partition).ok_or("cursor vanished")?
            }
        };
        // Fetch once per call, so a caught-up reader returns at once; again only while what
        // was fetched held no record from `next` on (compacted batches): returning nothing
        // tells the updater the rest of the range is gone.
        let mut may_fetch = true;
        let mut added = 0;
        while added < max_records {
            let record = match cursor.current.as_mut().and_then(|(it, _)| it.next()) {
                Some(record) => record?,
                None => {
                    if let Some((_, end)) = cursor.current.take() {
                        cursor.next = cursor.next.max(end);
                    }
                    match cursor.batches.pop_front() {
                        Some(batch) => {
                            let end = batch.last_offset() + 1;
                            cursor.current = Some((batch.records(), end));
                            continue;
                        }
                        None if may_fetch => {
                            let batches =
                                self.backend.fetch(partition, cursor.next, self.max_bytes)?;
                            if batches.is_empty() {
                                break;
                            }
                            may_fetch = false;
                            cursor.batches.extend(batches);
                            continue;
                        }
                        None if added == 0 => {
                            may_fetch = true;
                            continue;
                        }
                        None => break,
                    }
                }
            };
            if record.offset() < cursor.next {
                continue;
            }
            cursor.next = record.offset() + 1;
            cursor.resume = cursor.next;
            out.push(ChangelogRecord {
                offset: record.offset(),
                key: record.key().map(|k| k.to_vec()),
                value: record.value().map(|v| v.to_vec()),
                timestamp: record.timestamp(),
            });
            added += 1;
        }
        Ok(())
    }
}

/// A task's stores while the state updater holds them. The stream thread keeps the other handle
/// and takes the stores back when the updater hands the task back.
#[derive(Clone)]
pub(crate) struct StoreLease {
    stores: Arc<Mutex<Option<TaskStores>>>,
    /// Counts restored records as they are applied (the thread's metrics), for progress.
    progress: Arc<ThreadMetrics>,
}

impl StoreLease {
    pub(crate) fn new(stores: TaskStores, progress: Arc<ThreadMetrics>) -> Self {
        StoreLease {
            stores: Arc::new(Mutex::new(Some(stores))),
            progress,
        }
    }

    /// Returns stores taken with [`StoreLease::take`].
    pub(crate) fn put_back(&self, stores: TaskStores) {
        *self.stores.lock().unwrap_or_else(PoisonError::into_inner) = Some(stores);
    }

    /// Takes the stores back; `None` if already taken.
    pub(crate) fn take(&self) -> Option<TaskStores> {
        self.stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl RestoreTarget for StoreLease {
    fn apply(
        &mut self,
        partition: &TopicPartition,
        records: &[ChangelogRecord],
    ) -> Result<(), BoxError> {
        let mut guard = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(stores) = guard.as_mut() else {
            return Err("the task's stores were taken back while restoring".into());
        };
        let Some(last) = records.last() else {
            return Ok(());
        };
        // A changelog has compacted semantics: only each key's last record in the batch matters.
        // Writing those in key order also suits an LSM's memtable (fewer writes, better locality).
        // Records without a key (a table's source topic may hold some) are skipped, as the
        // table's source skips them when it processes them.
        let mut order: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].key.is_some())
            .collect();
        order.sort_by(|&a, &b| records[a].key.cmp(&records[b].key).then(b.cmp(&a)));
        order.dedup_by(|later, earlier| records[*later].key == records[*earlier].key);
        let mut batch = order.iter().filter_map(|&i| {
            let r = &records[i];
            Some((r.key.as_deref()?, r.value.as_deref(), r.timestamp))
        });
        stores.apply_restored(partition, &mut batch, last.offset + 1, records.len() as u64)?;
        self.progress
            .records_restored
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use riffle_state_dir::TaskId;

    use super::*;
    use crate::engine::task::ChangelogState;
    use crate::state::{CachedStore, InMemoryKeyValueStore};

    fn lease() -> (StoreLease, TopicPartition) {
        let partition = TopicPartition::new("app-s-changelog", 0);
        let stores = TaskStores::for_tests(
            TaskId {
                subtopology: 0,
                partition: 0,
            },
            vec![CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")))],
            vec![ChangelogState {
                store: 0,
                topic: 0,
                partition: partition.clone(),
                offset: 0,
                source: false,
            }],
        );
        (StoreLease::new(stores, Arc::default()), partition)
    }

    proptest! {
        /// Restoring batches (deduplicated and sorted per batch) leaves the store exactly as
        /// replaying every record in order would (a BTreeMap model); records without a key
        /// are skipped but counted.
        #[test]
        fn restored_store_equals_an_in_order_replay(
            batches in prop::collection::vec(prop::collection::vec((prop::option::weighted(0.9, 0u8..12), prop::option::of(0u8..5)), 0..40), 1..6)
        ) {
            let (mut lease, partition) = lease();
            let mut model = BTreeMap::new();
            let mut offset = 0;
            for batch in &batches {
                let records: Vec<ChangelogRecord> = batch.iter().map(|(k, v)| {
                    offset += 1;
                    ChangelogRecord { offset: offset - 1, key: k.map(|k| vec![k]), value: v.map(|v| vec![v]), timestamp: 0 }
                }).collect();
                for r in &records {
                    // A record without a key (on a table's source topic) changes nothing.
                    let Some(key) = &r.key else { continue };
                    match &r.value {
                        Some(v) => { model.insert(key.clone(), v.clone()); }
                        None => { model.remove(key); }
                    }
                }
                lease.apply(&partition, &records).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            let stores = lease.take().ok_or_else(|| TestCaseError::fail("stores gone"))?;
            let mut got = BTreeMap::new();
            stores.stores[0].inner.for_each(&mut |k, v| { got.insert(k.to_vec(), v.to_vec()); })
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got, model);
            prop_assert_eq!(stores.restored_records, offset);
            prop_assert_eq!(stores.changelogs[0].offset, if offset == 0 { 0 } else { offset });
        }
    }
}
