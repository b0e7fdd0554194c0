//! Exactly-once on Kafka: Kafka Streams' `exactly_once_v2` (KIP-447). Each stream thread has
//! one transactional producer, and each of its commits is one transaction:
//!
//! 1. `InitProducerId` once (and again after any failure): the broker returns the producer id
//!    and a new epoch, fences older producers of the same `transactional.id` and aborts what
//!    they left open. The id is `<application id>-<process id>-<thread number>`, and the
//!    process id is kept in the state directory, so an instance restarted after a crash
//!    aborts its predecessor's open transaction at once instead of after its timeout;
//! 2. `AddPartitionsToTxn` for the partitions the commit writes, `AddOffsetsToTxn` for the
//!    group's offsets;
//! 3. `Produce`: the outputs and changelog writes, one request per leader, each batch
//!    transactional with the producer's id, epoch and per-partition sequence;
//! 4. `TxnOffsetCommit` of the input offsets, carrying the streams-group member id and epoch,
//!    so a member that lost its tasks cannot commit (KIP-447's zombie fencing);
//! 5. `EndTxn` (commit).
//!
//! The records of a commit are held by the stream thread until then, so a transaction lasts
//! one round of requests. Readers see them only once committed: under exactly_once riffle
//! reads with `isolation_level=read_committed` (`batch::decode_batches`).
//!
//! A failure aborts the transaction (`EndTxn` abort, and a new `InitProducerId` before the
//! next one, which aborts it anyway if that did not get through). A fenced producer or member
//! ([`riffle::errors::BackendErrorKind::Fenced`]) makes the stream thread close its tasks dirty and
//! restore them; nothing it wrote in the aborted transaction is visible.

use bytes::Bytes;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest, add_partitions_to_txn_request, produce_request,
    txn_offset_commit_request,
};
use kafka_protocol::protocol::StrBytes;
use riffle_record::{BatchBuilder, TopicPartition};
use std::collections::HashMap;

use crate::batch::{ProducerFields, encode_batch_as};
use crate::cluster::{Cluster, by_topic, is_coordinator_error, versions};
use crate::error::{Error, ErrorCode, Result};
use crate::retry::{self, Failure};

/// Kafka Streams' `transaction.timeout.ms` under exactly_once: a transaction left open by a
/// producer that vanished is aborted by the broker after this long.
pub(crate) const TRANSACTION_TIMEOUT_MS: i32 = 10_000;

/// CONCURRENT_TRANSACTIONS: the previous transaction is still being completed; retry.
const CONCURRENT_TRANSACTIONS: i16 = 51;

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// The `transactional.id` of a stream thread: `<application id>-<process id>-<n>` for the
/// thread named `<application id>-StreamThread-<n>`, as Kafka Streams names it.
pub(crate) fn transactional_id(application_id: &str, process_id: &str, thread: &str) -> String {
    let n = thread
        .rsplit_once("-StreamThread-")
        .map_or(thread, |(_, n)| n);
    format!("{application_id}-{process_id}-{n}")
}

/// The member a transaction's offsets are committed as.
#[derive(Clone, Debug)]
pub(crate) struct TxnMember<'a> {
    pub(crate) group: &'a str,
    pub(crate) member_id: &'a str,
    pub(crate) member_epoch: i32,
}

/// One stream thread's transactional producer.
#[derive(Debug)]
pub(crate) struct TxnProducer {
    transactional_id: String,
    /// -1 until `InitProducerId`, and again after a failure.
    producer_id: i64,
    epoch: i16,
    /// The next sequence number of each partition written since `InitProducerId`.
    sequences: HashMap<TopicPartition, i32>,
}

impl TxnProducer {
    pub(crate) fn new(transactional_id: String) -> Self {
        TxnProducer {
            transactional_id,
            producer_id: -1,
            epoch: -1,
            sequences: HashMap::new(),
        }
    }

    /// Writes `batches` and commits `offsets` as `member` in one transaction; returns each
    /// batch's base offset and clears the builders. On failure nothing of it is visible, the
    /// builders keep their records, and the next call starts over with `InitProducerId`.
    pub(crate) fn commit(
        &mut self,
        cluster: &Cluster,
        member: &TxnMember<'_>,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        let mut began = false;
        let result = self.try_commit(cluster, member, batches, offsets, &mut began);
        match &result {
            Ok(_) => {
                for (_, builder) in batches.iter_mut() {
                    builder.clear();
                }
            }
            Err(e) => {
                tracing::warn!(
                    transactional_id = %self.transactional_id,
                    producer_id = self.producer_id,
                    epoch = self.epoch,
                    error = %e,
                    "transaction failed; aborting it"
                );
                if began && !matches!(e.kind(), riffle::errors::BackendErrorKind::Fenced) {
                    // Best effort: a producer that cannot abort is re-initialized by the next
                    // commit, which aborts the transaction too.
                    let _ = self.end(cluster, false);
                }
                self.producer_id = -1;
                self.epoch = -1;
                self.sequences.clear();
            }
        }
        result
    }

    fn try_commit(
        &mut self,
        cluster: &Cluster,
        member: &TxnMember<'_>,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
        began: &mut bool,
    ) -> Result<Vec<u64>> {
        let written: Vec<usize> = (0..batches.len())
            .filter(|&i| !batches[i].1.is_empty())
            .collect();
        if written.is_empty() && offsets.is_empty() {
            return Ok(vec![0; batches.len()]);
        }
        if self.producer_id < 0 {
            self.init(cluster)?;
        }
        *began = true;
        if !written.is_empty() {
            self.add_partitions(cluster, written.iter().map(|&i| &batches[i].0))?;
        }
        if !offsets.is_empty() {
            self.add_offsets(cluster, member.group)?;
        }
        let mut bases = vec![0; batches.len()];
        self.produce(cluster, batches, &written, &mut bases)?;
        if !offsets.is_empty() {
            self.commit_offsets(cluster, member, offsets)?;
        }
        self.end(cluster, true)?;
        Ok(bases)
    }

    /// Sends `request` to the transaction coordinator, retrying while it moves, loads or is
    /// still completing the previous transaction; `code` reads the answer's error.
    fn coordinated<R: crate::conn::KafkaRequest>(
        &self,
        cluster: &Cluster,
        api: &'static str,
        request: &R,
        version: i16,
        code: impl Fn(&R::Response) -> i16,
    ) -> Result<R::Response> {
        let id = &self.transactional_id;
        let context = || {
            format!(
                "transactional id {id}, producer id {} epoch {}",
                self.producer_id, self.epoch
            )
        };
        retry_coordinated(cluster, (id, 1), api, request, version, code, &context)
    }

    fn init(&mut self, cluster: &Cluster) -> Result<()> {
        let mut request = InitProducerIdRequest::default();
        request.transactional_id = Some(TransactionalId(name(&self.transactional_id)));
        request.transaction_timeout_ms = TRANSACTION_TIMEOUT_MS;
        request.producer_id = ProducerId(-1);
        request.producer_epoch = -1;
        let response = self.coordinated(
            cluster,
            "InitProducerId",
            &request,
            versions::INIT_PRODUCER_ID,
            |r| r.error_code,
        )?;
        self.producer_id = response.producer_id.0;
        self.epoch = response.producer_epoch;
        self.sequences.clear();
        tracing::debug!(
            transactional_id = %self.transactional_id,
            producer_id = self.producer_id,
            epoch = self.epoch,
            "transactional producer initialized"
        );
        Ok(())
    }

    fn add_partitions<'a>(
        &self,
        cluster: &Cluster,
        tps: impl Iterator<Item = &'a TopicPartition>,
    ) -> Result<()> {
        let topics = by_topic(tps.map(|tp| (tp, tp.partition as i32)))
            .into_iter()
            .map(|(topic, partitions)| {
                let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = TopicName(name(topic));
                t.partitions = partitions;
                t
            })
            .collect();
        let mut request = AddPartitionsToTxnRequest::default();
        request.v3_and_below_transactional_id = TransactionalId(name(&self.transactional_id));
        request.v3_and_below_producer_id = ProducerId(self.producer_id);
        request.v3_and_below_producer_epoch = self.epoch;
        request.v3_and_below_topics = topics;
        self.coordinated(
            cluster,
            "AddPartitionsToTxn",
            &request,
            versions::ADD_PARTITIONS_TO_TXN,
            |r| {
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| &t.results_by_partition)
                    .map(|p| p.partition_error_code)
                    // OPERATION_NOT_ATTEMPTED: another partition's error stopped it.
                    .filter(|&c| c != 55)
                    .find(|&c| c != 0)
                    .unwrap_or(0)
            },
        )?;
        Ok(())
    }

    fn add_offsets(&self, cluster: &Cluster, group: &str) -> Result<()> {
        let mut request = AddOffsetsToTxnRequest::default();
        request.transactional_id = TransactionalId(name(&self.transactional_id));
        request.producer_id = ProducerId(self.producer_id);
        request.producer_epoch = self.epoch;
        request.group_id = GroupId(name(group));
        self.coordinated(
            cluster,
            "AddOffsetsToTxn",
            &request,
            versions::ADD_OFFSETS_TO_TXN,
            |r| r.error_code,
        )?;
        Ok(())
    }

    fn end(&self, cluster: &Cluster, commit: bool) -> Result<()> {
        let mut request = EndTxnRequest::default();
        request.transactional_id = TransactionalId(name(&self.transactional_id));
        request.producer_id = ProducerId(self.producer_id);
        request.producer_epoch = self.epoch;
        request.committed = commit;
        self.coordinated(cluster, "EndTxn", &request, versions::END_TXN, |r| {
            r.error_code
        })?;
        Ok(())
    }

    /// Appends the `written` batches, one Produce request per leader, retrying the partitions
    /// whose leader moved (with the same sequence numbers: the broker drops duplicates).
    fn produce(
        &mut self,
        cluster: &Cluster,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        written: &[usize],
        bases: &mut [u64],
    ) -> Result<()> {
        let mut encoded: Vec<(usize, Bytes)> = Vec::with_capacity(written.len());
        for &i in written {
            let (tp, builder) = &mut batches[i];
            let base_sequence = self.sequences.get(tp).copied().unwrap_or(0);
            let fields = ProducerFields {
                producer_id: self.producer_id,
                epoch: self.epoch,
                base_sequence,
            };
            encoded.push((i, encode_batch_as(tp, builder, Some(fields))?));
        }
        let mut pending = encoded;
        let mut retrying = false;
        retry::until(cluster.config().request_timeout, || {
            if retrying {
                let mut topics: Vec<&str> =
                    pending.iter().map(|(i, _)| &*batches[*i].0.topic).collect();
                topics.sort_unstable();
                topics.dedup();
                let _ = cluster.refresh_metadata(&topics);
            }
            retrying = true;
            let mut by_leader: HashMap<String, Vec<(usize, Bytes)>> = HashMap::new();
            let mut failed: Option<Error> = None;
            let mut leaderless = Vec::new();
            for (i, bytes) in pending.drain(..) {
                // A partition whose leader is being elected has none for a moment: retried.
                match cluster.leader(&batches[i].0) {
                    Ok(leader) => by_leader.entry(leader).or_default().push((i, bytes)),
                    Err(e) => {
                        failed.get_or_insert(e);
                        leaderless.push((i, bytes));
                    }
                }
            }
            pending.append(&mut leaderless);
            for (broker, group) in by_leader {
                match self.produce_to(cluster, &broker, batches, &group) {
                    Ok(results) => {
                        for ((i, bytes), result) in group.into_iter().zip(results) {
                            match result {
                                Ok(base) => bases[i] = base,
                                Err(e) => {
                                    failed.get_or_insert(e);
                                    pending.push((i, bytes));
                                }
                            }
                        }
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                        pending.extend(group);
                    }
                }
            }
            failed.map_or(Ok(()), |error| Err(Failure::of_request(error)))
        })?;
        for &i in written {
            let (tp, builder) = &mut batches[i];
            let next = self.sequences.entry(tp.clone()).or_insert(0);
            *next = increment_sequence(*next, builder.len() as i32);
        }
        Ok(())
    }

    /// One Produce request to `broker`; each batch's base offset or error, in order.
    fn produce_to(
        &self,
        cluster: &Cluster,
        broker: &str,
        batches: &[(TopicPartition, &mut BatchBuilder)],
        group: &[(usize, Bytes)],
    ) -> Result<Vec<Result<u64>>> {
        let topics = by_topic(group.iter().map(|(i, bytes)| {
            let tp = &batches[*i].0;
            let mut data = produce_request::PartitionProduceData::default();
            data.index = tp.partition as i32;
            data.records = Some(bytes.clone());
            (tp, data)
        }))
        .into_iter()
        .map(|(topic, partition_data)| {
            let mut t = produce_request::TopicProduceData::default();
            t.name = TopicName(name(topic));
            t.partition_data = partition_data;
            t
        })
        .collect();
        let mut request = ProduceRequest::default();
        request.transactional_id = Some(TransactionalId(name(&self.transactional_id)));
        request.acks = -1;
        request.timeout_ms = cluster.config().request_timeout.as_millis() as i32;
        request.topic_data = topics;
        let client_id = cluster.config().client_id.clone();
        let response = cluster.with_connection(broker, |c| {
            c.send("Produce", &client_id, &request, versions::PRODUCE)
        })?;
        Ok(group
            .iter()
            .map(|(i, bytes)| {
                let tp = &batches[*i].0;
                let p = response
                    .responses
                    .iter()
                    .filter(|t| t.name.0.as_str() == &*tp.topic)
                    .flat_map(|t| &t.partition_responses)
                    .find(|p| p.index == tp.partition as i32)
                    .ok_or_else(|| Error::Decode {
                        api: "Produce",
                        reason: format!("no result for {tp}"),
                    })?;
                if p.error_code != 0 {
                    return Err(Error::Broker {
                        api: "Produce",
                        context: format!(
                            "transactional batch of {} bytes to {tp} via {broker} (transactional id {}, producer id {} epoch {})",
                            bytes.len(),
                            self.transactional_id,
                            self.producer_id,
                            self.epoch
                        ),
                        code: ErrorCode(p.error_code),
                        message: p.error_message.as_ref().map(|m| m.to_string()),
                    });
                }
                u64::try_from(p.base_offset).map_err(|_| Error::Decode {
                    api: "Produce",
                    reason: format!("negative base offset {} for {tp}", p.base_offset),
                })
            })
            .collect())
    }

    /// `TxnOffsetCommit` to the group coordinator, as the streams-group member.
    fn commit_offsets(
        &self,
        cluster: &Cluster,
        member: &TxnMember<'_>,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        let topics = by_topic(offsets.iter().map(|(tp, offset)| {
            let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
            p.partition_index = tp.partition as i32;
            p.committed_offset = *offset as i64;
            p.committed_leader_epoch = -1;
            p.committed_metadata = Some(StrBytes::from_static_str(""));
            (tp, p)
        }))
        .into_iter()
        .map(|(topic, partitions)| {
            let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
            t.name = TopicName(name(topic));
            t.partitions = partitions;
            t
        })
        .collect();
        let mut request = TxnOffsetCommitRequest::default();
        request.transactional_id = TransactionalId(name(&self.transactional_id));
        request.group_id = GroupId(name(member.group));
        request.producer_id = ProducerId(self.producer_id);
        request.producer_epoch = self.epoch;
        request.generation_id = member.member_epoch;
        request.member_id = name(member.member_id);
        request.group_instance_id = None;
        request.topics = topics;
        let context = || {
            format!(
                "group {} member {} epoch {}, transactional id {}",
                member.group, member.member_id, member.member_epoch, self.transactional_id
            )
        };
        retry_coordinated(
            cluster,
            (member.group, 0),
            "TxnOffsetCommit",
            &request,
            versions::TXN_OFFSET_COMMIT,
            |r| {
                r.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.error_code)
                    .find(|&c| c != 0)
                    .unwrap_or(0)
            },
            &context,
        )?;
        Ok(())
    }
}

/// Sends `request` to the coordinator of `key` (`key_type` 0: a group, 1: a transactional
/// id), retrying while the coordinator moves or loads, or the previous transaction is still
/// being completed, until the request timeout.
fn retry_coordinated<R: crate::conn::KafkaRequest>(
    cluster: &Cluster,
    (key, key_type): (&str, i8),
    api: &'static str,
    request: &R,
    version: i16,
    code: impl Fn(&R::Response) -> i16,
    context: &dyn Fn() -> String,
) -> Result<R::Response> {
    let client_id = cluster.config().client_id.clone();
    retry::until(cluster.config().request_timeout, || {
        let result = cluster.find_coordinator(key, key_type).and_then(|broker| {
            cluster.with_connection(&broker, |c| c.send(api, &client_id, request, version))
        });
        match result {
            Ok(response) => match code(&response) {
                0 => Ok(response),
                c => {
                    if is_coordinator_error(c) {
                        cluster.forget_coordinator_of(key, key_type);
                    }
                    let retriable = is_coordinator_error(c)
                        || c == CONCURRENT_TRANSACTIONS
                        || ErrorCode(c).is_retriable();
                    let error = Error::Broker {
                        api,
                        context: context(),
                        code: ErrorCode(c),
                        message: None,
                    };
                    Err(Failure::new(error, retriable))
                }
            },
            Err(e @ Error::Io { .. }) => {
                cluster.forget_coordinator_of(key, key_type);
                Err(Failure::retriable(e))
            }
            Err(e) => Err(e.into()),
        }
    })
}

/// Kafka's sequence arithmetic: sequences wrap to 0 after `i32::MAX`.
fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactional_ids_follow_kafka_streams() {
        assert_eq!(
            transactional_id("wc", "0b7c-p", "wc-StreamThread-3"),
            "wc-0b7c-p-3"
        );
        assert_eq!(transactional_id("wc", "p", "custom"), "wc-p-custom");
    }

    #[test]
    fn sequences_wrap_as_kafka_s() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX - 1, 1), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    }
}
