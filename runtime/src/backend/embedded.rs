//! The embedded log as a backend ([`EmbeddedBackend`]): records in a riffle-log directory (or in
//! memory), groups coordinated in process. Behind the `embedded` feature (on by default).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use riffle_log::{Log, TopicConfig};
use riffle_record::{BatchBuilder, FetchedBatch, TopicPartition};

use crate::backend::coordinator::Coordinator;
use crate::backend::{Backend, GroupCoordinator, GroupInfo, TopicKind};
use crate::types::error::Result;

/// The embedded log as a backend. Applications with the same id on one backend share a
/// coordinator, so several instances in one process form one group.
#[derive(Clone)]
pub struct EmbeddedBackend {
    log: Log,
    coordinators: Arc<Mutex<HashMap<String, Arc<Coordinator>>>>,
}

impl EmbeddedBackend {
    /// A backend over `log`.
    pub fn new(log: Log) -> Self {
        EmbeddedBackend {
            log,
            coordinators: Arc::default(),
        }
    }

    /// The underlying log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// This backend behind the trait object the runtime uses.
    pub fn shared(self) -> Arc<dyn Backend> {
        Arc::new(self)
    }
}

impl Backend for EmbeddedBackend {
    fn create_topic(&self, topic: &str, partitions: u32, kind: TopicKind) -> Result<()> {
        let configs = kind.configs();
        let config = TopicConfig::from_pairs(configs.iter().map(|(k, v)| (*k, v.as_str())))
            .map_err(|(key, reason)| riffle_log::Error::InvalidTopicConfig {
                topic: topic.to_owned(),
                key,
                reason,
            })?;
        Ok(self.log.create_topic_with(topic, partitions, &config)?)
    }
    fn partitions(&self, topic: &str) -> Result<Option<u32>> {
        Ok(self.log.partitions(topic))
    }
    fn fetch(
        &self,
        tp: &TopicPartition,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Vec<FetchedBatch>> {
        Ok(self.log.fetch(tp, offset, max_bytes)?)
    }
    fn append(&self, tp: &TopicPartition, batch: &mut BatchBuilder) -> Result<u64> {
        Ok(self.log.append(tp, batch)?)
    }
    fn end_offset(&self, tp: &TopicPartition) -> Result<u64> {
        Ok(self.log.end_offset(tp)?)
    }
    fn start_offset(&self, tp: &TopicPartition) -> Result<u64> {
        Ok(self.log.start_offset(tp)?)
    }
    fn delete_records(&self, tp: &TopicPartition, offset: u64) -> Result<()> {
        self.log.delete_records(tp, offset)?;
        Ok(())
    }
    fn offset_for_timestamp(&self, tp: &TopicPartition, timestamp: i64) -> Result<u64> {
        let end = self.log.end_offset(tp)?;
        let mut position = self.log.start_offset(tp)?;
        while position < end {
            let batches = self.log.fetch(tp, position, 1 << 20)?;
            let Some(last) = batches.last().map(FetchedBatch::last_offset) else {
                break;
            };
            for batch in batches
                .iter()
                .filter(|b| b.meta().max_timestamp >= timestamp)
            {
                for record in batch.records() {
                    let record = record?;
                    if record.offset() >= position && record.timestamp() >= timestamp {
                        return Ok(record.offset());
                    }
                }
            }
            position = last + 1;
        }
        Ok(end)
    }
    fn commit_offsets(
        &self,
        group: &str,
        _member: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        Ok(self.log.commit_offsets(group, offsets)?)
    }
    fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        Ok(self.log.committed_offset(group, tp)?)
    }
    fn data_version(&self) -> u64 {
        self.log.append_version()
    }
    fn wait_for_data(&self, seen: u64, woken: u64, timeout: Duration) -> u64 {
        self.log.wait_for_append_or_wake(seen, woken, timeout)
    }
    fn changed_partitions(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        self.log.appended_since(seen, out)
    }
    fn wake_waiters(&self) {
        self.log.wake_waiters()
    }
    fn wake_count(&self) -> u64 {
        self.log.wake_count()
    }
    fn position_past_end_is_lost_data(&self) -> bool {
        true
    }
    fn supports_exactly_once(&self) -> bool {
        true
    }
    fn commit_transaction(
        &self,
        group: &str,
        _member: &str,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        Ok(self.log.commit_transaction(group, batches, offsets)?)
    }
    fn group_coordinator(&self, group: &GroupInfo) -> Result<Arc<dyn GroupCoordinator>> {
        let mut coordinators = self
            .coordinators
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let coordinator = coordinators
            .entry(group.application_id.clone())
            .or_insert_with(|| Arc::new(Coordinator::new(group.tasks())))
            .clone();
        Ok(coordinator)
    }
}
