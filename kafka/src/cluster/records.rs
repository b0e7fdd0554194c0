//! The record APIs: CreateTopics, Produce, Fetch and ListOffsets, each routed to the
//! partition's leader and retried there while the error says the leader moved.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteRecordsRequest, FetchRequest, ListOffsetsRequest,
    ProduceRequest, TopicName, create_topics_request, delete_records_request, fetch_request,
    list_offsets_request, produce_request,
};
use riffle_record::{FetchedBatch, TopicPartition};

use super::{Cluster, name, versions};
use crate::batch::AbortedTxn;
use crate::error::{Error, ErrorCode, Result};
use crate::retry::{self, Failure};

impl Cluster {
    /// Creates `topic` unless it exists; fails if it exists with fewer partitions.
    pub(crate) fn create_topic(
        &self,
        topic: &str,
        partitions: u32,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let mut creatable = create_topics_request::CreatableTopic::default();
        creatable.name = TopicName(name(topic));
        creatable.num_partitions = partitions as i32;
        creatable.replication_factor = self.config.replication_factor;
        creatable.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = create_topics_request::CreatableTopicConfig::default();
                c.name = name(k);
                c.value = Some(name(v));
                c
            })
            .collect();
        let mut request = CreateTopicsRequest::default();
        request.topics = vec![creatable];
        request.timeout_ms = self.config.request_timeout.as_millis() as i32;
        let client_id = self.config.client_id.clone();
        let response = self.with_any_broker(|c| {
            c.send(
                "CreateTopics",
                &client_id,
                &request,
                versions::CREATE_TOPICS,
            )
        })?;
        for t in &response.topics {
            match t.error_code {
                0 => tracing::info!(topic, partitions, "created topic"),
                36 => {} // TOPIC_ALREADY_EXISTS
                code => {
                    return Err(Error::Broker {
                        api: "CreateTopics",
                        context: format!("topic {topic} ({partitions} partitions)"),
                        code: ErrorCode(code),
                        message: t.error_message.as_ref().map(|m| m.to_string()),
                    });
                }
            }
        }
        // Wait until every partition has a leader, so the first produce or fetch finds one.
        let timeout = self.config.request_timeout;
        retry::until(timeout, || {
            let (count, led) = self
                .refresh_metadata(&[topic])?
                .first()
                .copied()
                .unwrap_or((None, false));
            match count {
                Some(n) if n < partitions => Err(Error::Config(format!(
                    "topic {topic} exists with {n} partitions, riffle needs {partitions}"
                ))
                .into()),
                Some(_) if led => Ok(()),
                _ => Err(Failure::retriable(Error::Timeout {
                    what: format!("leaders for the partitions of the new topic {topic}"),
                    millis: timeout.as_millis() as u64,
                })),
            }
        })
    }

    /// Appends one encoded batch to `tp` (acks=all); returns its base offset.
    pub(crate) fn produce(&self, tp: &TopicPartition, batch: Bytes) -> Result<u64> {
        let size = batch.len();
        let mut data = produce_request::PartitionProduceData::default();
        data.index = tp.partition as i32;
        data.records = Some(batch);
        let mut topic = produce_request::TopicProduceData::default();
        topic.name = TopicName(name(&tp.topic));
        topic.partition_data = vec![data];
        let mut request = ProduceRequest::default();
        request.acks = -1;
        request.timeout_ms = self.config.request_timeout.as_millis() as i32;
        request.topic_data = vec![topic];
        let client_id = self.config.client_id.clone();
        self.on_leader(tp, |c| {
            let response = c.send("Produce", &client_id, &request, versions::PRODUCE)?;
            let p = response
                .responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .ok_or_else(|| Error::Decode {
                    api: "Produce",
                    reason: format!("no result for {tp}"),
                })?;
            if p.error_code != 0 {
                let hint = if p.error_code == 10 {
                    " (larger than the broker's message.max.bytes: append smaller batches)"
                } else {
                    ""
                };
                return Err(Error::Broker {
                    api: "Produce",
                    context: format!("batch of {size} bytes to {tp} via {}{hint}", c.broker()),
                    code: ErrorCode(p.error_code),
                    message: p.error_message.as_ref().map(|m| m.to_string()),
                });
            }
            u64::try_from(p.base_offset).map_err(|_| Error::Decode {
                api: "Produce",
                reason: format!("negative base offset {} for {tp}", p.base_offset),
            })
        })
    }

    /// Fetches `tp` from `offset` without waiting (at most `max_bytes`, at least one batch).
    pub(crate) fn fetch(
        &self,
        tp: &TopicPartition,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Vec<FetchedBatch>> {
        let max_bytes = i32::try_from(max_bytes).unwrap_or(i32::MAX).max(1);
        let mut partition = fetch_request::FetchPartition::default();
        partition.partition = tp.partition as i32;
        partition.fetch_offset = offset as i64;
        partition.partition_max_bytes = max_bytes;
        partition.current_leader_epoch = -1;
        partition.last_fetched_epoch = -1;
        partition.log_start_offset = -1;
        let mut topic = fetch_request::FetchTopic::default();
        topic.topic = TopicName(name(&tp.topic));
        topic.partitions = vec![partition];
        let mut request = FetchRequest::default();
        request.replica_id = BrokerId(-1);
        request.max_wait_ms = 0;
        request.min_bytes = 1;
        request.max_bytes = max_bytes;
        let read_committed = self.read_committed();
        request.isolation_level = i8::from(read_committed);
        request.session_id = 0;
        request.session_epoch = -1;
        request.topics = vec![topic];
        let client_id = self.config.client_id.clone();
        self.on_leader(tp, |c| {
            let response = c.send("Fetch", &client_id, &request, versions::FETCH)?;
            let context = || format!("{tp} at offset {offset} via {}", c.broker());
            if response.error_code != 0 {
                return Err(Error::Broker {
                    api: "Fetch",
                    context: context(),
                    code: ErrorCode(response.error_code),
                    message: None,
                });
            }
            let mut out = Vec::new();
            for t in &response.responses {
                for p in &t.partitions {
                    if p.error_code != 0 {
                        return Err(Error::Broker {
                            api: "Fetch",
                            context: context(),
                            code: ErrorCode(p.error_code),
                            message: None,
                        });
                    }
                    if let Some(records) = &p.records {
                        let aborted: Vec<AbortedTxn> = p
                            .aborted_transactions
                            .iter()
                            .flatten()
                            .map(|a| AbortedTxn {
                                producer_id: a.producer_id.0,
                                first_offset: a.first_offset,
                            })
                            .collect();
                        let aborted = read_committed.then_some(&aborted[..]);
                        crate::batch::decode_batches(tp, records, offset, aborted, &mut out)?;
                    }
                }
            }
            Ok(out)
        })
    }

    /// The end offsets (high watermarks) of `tps`, in order: one ListOffsets request per
    /// leader; partitions that fail there (a leader moved) are retried one by one.
    pub(crate) fn end_offsets(&self, tps: &[TopicPartition]) -> Result<Vec<u64>> {
        let mut out: Vec<Option<u64>> = vec![None; tps.len()];
        if tps.len() > 1 {
            let mut by_leader: HashMap<String, Vec<usize>> = HashMap::new();
            for (i, tp) in tps.iter().enumerate() {
                by_leader.entry(self.leader(tp)?).or_default().push(i);
            }
            for (broker, indexes) in by_leader {
                let request = list_offsets_request_for(
                    indexes.iter().map(|&i| &tps[i]),
                    LATEST,
                    self.read_committed(),
                );
                let client_id = self.config.client_id.clone();
                let Ok(response) = self.with_connection(&broker, |c| {
                    c.send("ListOffsets", &client_id, &request, versions::LIST_OFFSETS)
                }) else {
                    continue; // retried one by one below
                };
                for t in &response.topics {
                    for p in t.partitions.iter().filter(|p| p.error_code == 0) {
                        let found = indexes.iter().find(|&&i| {
                            *tps[i].topic == *t.name.0.as_str()
                                && tps[i].partition as i32 == p.partition_index
                        });
                        if let Some(&i) = found {
                            out[i] = Some(p.offset.max(0) as u64);
                        }
                    }
                }
            }
        }
        tps.iter()
            .zip(out)
            .map(|(tp, end)| match end {
                Some(end) => Ok(end),
                None => self.end_offset(tp),
            })
            .collect()
    }

    /// The end offset of one partition, retried on its leader.
    fn end_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.list_offset(tp, LATEST)
            .map(|offset| offset.unwrap_or_default())
    }

    /// The log start offset of one partition (ListOffsets' earliest).
    pub(crate) fn start_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.list_offset(tp, EARLIEST)
            .map(|offset| offset.unwrap_or_default())
    }

    /// The offset of the first record of `tp` at or after `timestamp`, or its end offset when
    /// there is none (ListOffsets by timestamp answers -1 then).
    pub(crate) fn offset_for_timestamp(&self, tp: &TopicPartition, timestamp: i64) -> Result<u64> {
        match self.list_offset(tp, timestamp.max(0))? {
            Some(offset) => Ok(offset),
            None => self.end_offset(tp),
        }
    }

    /// One partition's ListOffsets answer for `timestamp` (or [`LATEST`], [`EARLIEST`]),
    /// retried on its leader; `None` when the broker answers -1 (no such record).
    fn list_offset(&self, tp: &TopicPartition, timestamp: i64) -> Result<Option<u64>> {
        self.list_offset_as(tp, timestamp, self.read_committed())
    }

    /// Deletes the records of `tp` below `offset` on its leader (DeleteRecords, what
    /// `Admin.deleteRecords` sends): the partition's log start offset moves there.
    pub(crate) fn delete_records(&self, tp: &TopicPartition, offset: u64) -> Result<()> {
        let mut partition = delete_records_request::DeleteRecordsPartition::default();
        partition.partition_index = tp.partition as i32;
        partition.offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let mut topic = delete_records_request::DeleteRecordsTopic::default();
        topic.name = TopicName(name(&tp.topic));
        topic.partitions = vec![partition];
        let mut request = DeleteRecordsRequest::default();
        request.topics = vec![topic];
        request.timeout_ms = self.config.request_timeout.as_millis() as i32;
        let client_id = self.config.client_id.clone();
        self.on_leader(tp, |c| {
            let response = c.send(
                "DeleteRecords",
                &client_id,
                &request,
                versions::DELETE_RECORDS,
            )?;
            let p = response
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .ok_or_else(|| Error::Decode {
                    api: "DeleteRecords",
                    reason: format!("no result for {tp}"),
                })?;
            if p.error_code != 0 {
                return Err(Error::Broker {
                    api: "DeleteRecords",
                    context: format!("records of {tp} below {offset} via {}", c.broker()),
                    code: ErrorCode(p.error_code),
                    message: None,
                });
            }
            Ok(())
        })
    }

    /// Whether `tp` has no open transaction: its last stable offset is its high watermark.
    pub(crate) fn is_stable(&self, tp: &TopicPartition) -> Result<bool> {
        let stable = self.list_offset_as(tp, LATEST, true)?;
        let end = self.list_offset_as(tp, LATEST, false)?;
        Ok(stable == end)
    }

    /// [`Cluster::list_offset`] at the given isolation level.
    fn list_offset_as(
        &self,
        tp: &TopicPartition,
        timestamp: i64,
        read_committed: bool,
    ) -> Result<Option<u64>> {
        let request = list_offsets_request_for(std::iter::once(tp), timestamp, read_committed);
        let client_id = self.config.client_id.clone();
        self.on_leader(tp, |c| {
            let response = c.send("ListOffsets", &client_id, &request, versions::LIST_OFFSETS)?;
            let p = response
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .ok_or_else(|| Error::Decode {
                    api: "ListOffsets",
                    reason: format!("no result for {tp}"),
                })?;
            if p.error_code != 0 {
                return Err(Error::Broker {
                    api: "ListOffsets",
                    context: format!("offset at {timestamp} of {tp} via {}", c.broker()),
                    code: ErrorCode(p.error_code),
                    message: None,
                });
            }
            Ok(u64::try_from(p.offset).ok())
        })
    }
}

/// ListOffsets' timestamp for a partition's end (high watermark).
const LATEST: i64 = -1;
/// ListOffsets' timestamp for a partition's log start offset.
const EARLIEST: i64 = -2;

/// A ListOffsets request for the offsets of `tps` at `timestamp` ([`LATEST`], [`EARLIEST`] or
/// a time), grouped by topic. Read committed, [`LATEST`] is the last stable offset.
fn list_offsets_request_for<'a>(
    tps: impl Iterator<Item = &'a TopicPartition>,
    timestamp: i64,
    read_committed: bool,
) -> ListOffsetsRequest {
    let mut topics: Vec<list_offsets_request::ListOffsetsTopic> = Vec::new();
    for tp in tps {
        let mut partition = list_offsets_request::ListOffsetsPartition::default();
        partition.partition_index = tp.partition as i32;
        partition.current_leader_epoch = -1;
        partition.timestamp = timestamp;
        match topics.iter_mut().find(|t| t.name.0.as_str() == &*tp.topic) {
            Some(t) => t.partitions.push(partition),
            None => {
                let mut topic = list_offsets_request::ListOffsetsTopic::default();
                topic.name = TopicName(name(&tp.topic));
                topic.partitions = vec![partition];
                topics.push(topic);
            }
        }
    }
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.isolation_level = i8::from(read_committed);
    request.topics = topics;
    request
}
