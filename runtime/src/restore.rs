//! Restoration glue: the state updater reads changelogs through the backend
//! ([`BackendChangelogReader`]) and writes them into a task's stores, which the stream thread
//! lends it for the time being ([`StoreLease`]).

use std::sync::{Arc, Mutex, PoisonError};

use riffle_log::TopicPartition;
use riffle_state_dir::ChangelogPartition;
use riffle_task_manager::{BoxError, ChangelogReader, ChangelogRecord, RestoreTarget};

use crate::backend::Backend;
use crate::task::TaskStores;

/// Reads changelogs from the backend for the state updater.
pub(crate) struct BackendChangelogReader {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) max_bytes: usize,
}

fn tp(partition: &ChangelogPartition) -> TopicPartition {
    TopicPartition::new(partition.topic.as_str(), partition.partition)
}

impl ChangelogReader for BackendChangelogReader {
    fn end_offset(&mut self, partition: &ChangelogPartition) -> Result<u64, BoxError> {
        Ok(self.backend.end_offset(&tp(partition))?)
    }

    fn read(
        &mut self,
        partition: &ChangelogPartition,
        from: u64,
        max_records: usize,
        out: &mut Vec<ChangelogRecord>,
    ) -> Result<(), BoxError> {
        let mut added = 0;
        for batch in self.backend.fetch(&tp(partition), from, self.max_bytes)? {
            for record in batch.records() {
                let record = record?;
                if record.offset() < from {
                    continue;
                }
                if added == max_records {
                    return Ok(());
                }
                out.push(ChangelogRecord {
                    offset: record.offset(),
                    key: record.key().map(|k| k.to_vec()).unwrap_or_default(),
                    value: record.value().map(|v| v.to_vec()),
                });
                added += 1;
            }
        }
        Ok(())
    }
}

/// A task's stores while the state updater holds them. The stream thread keeps the other handle
/// and takes the stores back when the updater hands the task back.
#[derive(Clone, Default)]
pub(crate) struct StoreLease(Arc<Mutex<Option<TaskStores>>>);

impl StoreLease {
    pub(crate) fn new(stores: TaskStores) -> Self {
        StoreLease(Arc::new(Mutex::new(Some(stores))))
    }

    /// Returns stores taken with [`StoreLease::take`].
    pub(crate) fn put_back(&self, stores: TaskStores) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(stores);
    }

    /// Takes the stores back; `None` if already taken.
    pub(crate) fn take(&self) -> Option<TaskStores> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl RestoreTarget for StoreLease {
    fn apply(
        &mut self,
        partition: &ChangelogPartition,
        records: &[ChangelogRecord],
    ) -> Result<(), BoxError> {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(stores) = guard.as_mut() else {
            return Err("the task's stores were taken back while restoring".into());
        };
        let Some(last) = records.last() else {
            return Ok(());
        };
        let mut batch = records
            .iter()
            .map(|r| (r.key.as_slice(), r.value.as_deref()));
        stores.apply_restored(partition, &mut batch, last.offset + 1)?;
        Ok(())
    }
}
