//! The embedded log as a backend ([`EmbeddedBackend`]): records in a riffle-log directory (or in
//! memory). Behind the `embedded` feature (on by default).
//!
//! The instances of an application on one log directory form one group, whatever process they
//! run in (`group.rs`: the group on the log, with the log's fencing of commits); on an
//! in-memory log, which one process owns, the in-process coordinator
//! (runtime/src/backend/coordinator.rs) groups the threads.

pub(crate) mod group;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use riffle_log::{Log, TopicConfig};
use riffle_record::{BatchBuilder, FetchedBatch, TopicPartition};

use crate::backend::coordinator::Coordinator;
use crate::backend::embedded::group::SharedCoordinator;
use crate::backend::{Backend, GroupCoordinator, GroupInfo, TopicKind};
use crate::types::error::Result;

/// The embedded log as a backend. Applications with the same id on one log directory form one
/// group, in one process or many; on an in-memory log, those on one backend do.
#[derive(Clone)]
pub struct EmbeddedBackend {
    log: Log,
    coordinators: Arc<Mutex<HashMap<String, Coordinators>>>,
}

/// An application's coordinator: on the log directory, or in this process (in-memory logs).
#[derive(Clone)]
enum Coordinators {
    Shared(Arc<SharedCoordinator>),
    InProcess(Arc<Coordinator>),
}

impl EmbeddedBackend {
    /// The group on the log of application `group`, if this backend runs one (an in-memory log
    /// groups its threads in process).
    fn shared_coordinator(&self, group: &str) -> Option<Arc<SharedCoordinator>> {
        let coordinators = self
            .coordinators
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match coordinators.get(group)? {
            Coordinators::Shared(c) => Some(c.clone()),
            Coordinators::InProcess(_) => None,
        }
    }

    /// A commit of stream thread `thread` of application `group`: `commit` is given the
    /// thread's membership of the group on the log, to be fenced by, or `None` for a writer
    /// outside any group (the producer, the test driver) and on an in-memory log. A fenced
    /// thread joins again as a new member.
    fn commit_as<T>(
        &self,
        group: &str,
        thread: &str,
        commit: impl FnOnce(Option<&riffle_log::GroupMember>) -> riffle_log::Result<T>,
    ) -> Result<T> {
        let coordinator = self.shared_coordinator(group);
        let Some((coordinator, membership)) =
            coordinator.and_then(|c| c.membership(thread).map(|m| (c, m)))
        else {
            return Ok(commit(None)?);
        };
        let result = commit(Some(
            &membership.lock().unwrap_or_else(PoisonError::into_inner),
        ));
        if let Err(riffle_log::Error::Fenced { .. }) = &result {
            coordinator.forget(thread);
        }
        Ok(result?)
    }
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
        member: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        self.commit_as(group, member, |membership| match membership {
            Some(m) => self.log.commit_offsets_as(group, m, offsets),
            None => self.log.commit_offsets(group, offsets),
        })
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
        member: &str,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        self.commit_as(group, member, |membership| match membership {
            Some(m) => self.log.commit_transaction_as(group, m, batches, offsets),
            None => self.log.commit_transaction(group, batches, offsets),
        })
    }
    fn group_coordinator(&self, group: &GroupInfo) -> Result<Arc<dyn GroupCoordinator>> {
        let mut coordinators = self
            .coordinators
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = coordinators.get(&group.application_id) {
            return Ok(match c {
                Coordinators::Shared(c) => c.clone(),
                Coordinators::InProcess(c) => c.clone(),
            });
        }
        let (entry, coordinator): (Coordinators, Arc<dyn GroupCoordinator>) =
            if self.log.dir().is_some() {
                let c = Arc::new(SharedCoordinator::new(self.log.clone(), group)?);
                (Coordinators::Shared(c.clone()), c)
            } else {
                let c = Arc::new(Coordinator::new(group.tasks()));
                (Coordinators::InProcess(c.clone()), c)
            };
        coordinators.insert(group.application_id.clone(), entry);
        Ok(coordinator)
    }
}
