//! [`KafkaBackend`]: the runtime's [`Backend`] on an Apache Kafka cluster.
//!
//! Blocking calls behind the runtime's synchronous trait: each stream thread's fetch, produce
//! or commit is one request on the leader's (or coordinator's) connection. A thread pool or an
//! async runtime would add a second scheduler under the stream threads for no gain — the
//! stream thread already is the unit of concurrency, and the requests it makes are in order.
//!
//! Fetches do not wait at the broker (`max_wait_ms` 0). An idle stream thread sleeps in
//! [`Backend::wait_for_data`]; the data version moves on every local append, whenever the fetch
//! watcher (`watch`) sees a partition that a fetch found empty grow, and, as a fallback, every
//! [`KafkaConfig::fetch_poll_interval`]. Each move is journaled with its partition (the
//! fallback as "unknown"), which [`Backend::changed_partitions`] reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use riffle::backend::{Backend, GroupCoordinator, GroupInfo, TopicKind};
use riffle_record::{BatchBuilder, FetchedBatch, TopicPartition};

use crate::batch::encode_batch;
use crate::cluster::{Cluster, KafkaConfig, is_coordinator_error};
use crate::error::{Error, ErrorCode, Result};
use crate::group::{MemberInfo, StreamsGroup};
use crate::retry::{self, Failure};
use crate::streams::{self, StreamsGroupDescription};
use crate::txn::{TxnMember, TxnProducer, transactional_id};
use crate::watch::{self, Watch};

#[derive(Debug)]
struct Inner {
    cluster: Arc<Cluster>,
    groups: Mutex<HashMap<String, Arc<StreamsGroup>>>,
    watch: Arc<Watch>,
    /// Exactly-once: each stream thread's transactional producer, by thread name.
    producers: Mutex<HashMap<String, Arc<Mutex<TxnProducer>>>>,
}

/// A Kafka cluster as a riffle backend. Cheap to clone (clones share connections and groups).
///
/// One backend runs at most one instance of an application (its stream threads are the
/// group's members from this backend); run a second instance on a second backend.
#[derive(Clone, Debug)]
pub struct KafkaBackend {
    inner: Arc<Inner>,
}

impl KafkaBackend {
    /// Connects to the cluster: bootstrap, API versions (StreamsGroupHeartbeat must be
    /// there: Kafka 4.2 or later), brokers.
    pub fn connect(config: KafkaConfig) -> Result<KafkaBackend> {
        if config.fetch_poll_interval.is_zero() {
            return Err(Error::Config("fetch_poll_interval must not be zero".into()));
        }
        let cluster = Arc::new(Cluster::connect(config)?);
        let watch = Arc::new(Watch::new(cluster.config().fetch_poll_interval));
        watch::spawn(cluster.clone(), &watch).map_err(|source| Error::Io {
            broker: cluster.config().bootstrap_servers.clone(),
            what: "spawning the fetch watcher thread".into(),
            source,
        })?;
        Ok(KafkaBackend {
            inner: Arc::new(Inner {
                cluster,
                groups: Mutex::default(),
                watch,
                producers: Mutex::default(),
            }),
        })
    }

    /// This backend behind the trait object the runtime uses.
    pub fn shared(&self) -> Arc<dyn Backend> {
        Arc::new(self.clone())
    }

    /// Every topic of the cluster and its partition count, sorted by name.
    pub fn topics(&self) -> Result<Vec<(String, u32)>> {
        self.inner.cluster.list_topics()
    }

    /// Deletes `topics` (a missing one is not an error).
    pub fn delete_topics(&self, topics: &[String]) -> Result<()> {
        self.inner.cluster.delete_topics(topics)
    }

    /// Waits until no partition of `topic` has an open transaction (each one's last stable
    /// offset is its end offset), or `timeout` passes. A transaction's records become
    /// readable read_committed once the broker has written its markers, shortly after the
    /// commit returned: a reader that wants everything committed so far waits for this first.
    pub fn wait_until_stable(&self, topic: &str, timeout: Duration) -> Result<()> {
        let Some(n) = self.inner.cluster.partitions(topic)? else {
            return Ok(());
        };
        // The partitions before `next` have no open transaction.
        let mut next = 0;
        retry::until(timeout, || {
            while next < n {
                let tp = TopicPartition::new(topic, next);
                if !self.inner.cluster.is_stable(&tp)? {
                    return Err(Failure::retriable(Error::Timeout {
                        what: format!("{tp} to have no open transaction"),
                        millis: timeout.as_millis() as u64,
                    }));
                }
                next += 1;
            }
            Ok(())
        })
    }

    /// Every offset `group` committed, sorted.
    pub fn group_offsets(&self, group: &str) -> Result<Vec<(TopicPartition, u64)>> {
        self.inner.cluster.group_offsets(group)
    }

    /// Replaces `group`'s committed offsets of `offsets`' partitions, as Kafka's admin client
    /// does (member epoch -1): the broker accepts it only while the group has no members.
    pub fn alter_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        match self.inner.cluster.commit_offsets(group, "", -1, offsets)? {
            None => Ok(()),
            Some((tp, code)) => Err(Error::Broker {
                api: "OffsetCommit",
                context: format!("group {group}, {tp}"),
                code: ErrorCode(code),
                message: None,
            }),
        }
    }

    /// Describes a streams group as the broker sees it (StreamsGroupDescribe).
    pub fn describe_streams_group(&self, group: &str) -> Result<StreamsGroupDescription> {
        let mut body = Vec::new();
        streams::encode_describe(&mut body, &[group]);
        let cluster = &self.inner.cluster;
        let response = cluster.send_to_coordinator(
            group,
            "StreamsGroupDescribe",
            &cluster.config().client_id,
            streams::DESCRIBE_KEY,
            crate::cluster::versions::STREAMS_GROUP_DESCRIBE,
            &body,
        )?;
        let mut groups = streams::decode_describe(&response)?;
        match groups.pop() {
            Some(Ok(g)) => Ok(g),
            Some(Err((id, code, message))) => Err(Error::Broker {
                api: "StreamsGroupDescribe",
                context: format!("group {id}"),
                code: ErrorCode(code),
                message,
            }),
            None => Err(Error::Decode {
                api: "StreamsGroupDescribe",
                reason: format!("no group in the answer for {group}"),
            }),
        }
    }

    /// What the broker last told each member of `group` in this process, by stream thread.
    pub fn members(&self, group: &str) -> Vec<(String, MemberInfo)> {
        let groups = self.groups();
        groups.get(group).map(|g| g.members()).unwrap_or_default()
    }

    /// The end offset of every partition of `topic` (empty if it does not exist).
    pub fn end_offsets(&self, topic: &str) -> Result<Vec<u64>> {
        let Some(n) = self.inner.cluster.partitions(topic)? else {
            return Ok(Vec::new());
        };
        let tps: Vec<_> = (0..n).map(|p| TopicPartition::new(topic, p)).collect();
        self.inner.cluster.end_offsets(&tps)
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<StreamsGroup>>> {
        self.inner
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Exactly-once: `batches` and `offsets` in one transaction of `member`'s producer.
    fn commit_in_transaction(
        &self,
        group: &str,
        member: &str,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        let streams_group = self.groups().get(group).cloned().ok_or_else(|| {
            Error::Config(format!(
                "exactly_once: application {group} has no streams group on this backend"
            ))
        })?;
        let (member_id, member_epoch) = streams_group
            .member_identity(member)
            .unwrap_or_else(|| (String::new(), -1));
        let producer = self
            .inner
            .producers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(member.to_owned())
            .or_insert_with(|| {
                let id = transactional_id(group, streams_group.process_id(), member);
                Arc::new(Mutex::new(TxnProducer::new(id)))
            })
            .clone();
        let mut producer = producer.lock().unwrap_or_else(PoisonError::into_inner);
        let txn_member = TxnMember {
            group,
            member_id: &member_id,
            member_epoch,
        };
        let bases = producer.commit(&self.inner.cluster, &txn_member, batches, offsets)?;
        self.inner
            .watch
            .signal(batches.iter().map(|(tp, _)| tp.clone()));
        Ok(bases)
    }

    fn commit(&self, group: &str, member: &str, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let identity = self
            .groups()
            .get(group)
            .and_then(|g| g.member_identity(member));
        // Outside a member (tools): the broker accepts epoch -1 only for a group without members.
        let (member_id, epoch) = identity.unwrap_or_else(|| (String::new(), -1));
        let cluster = &self.inner.cluster;
        // Set when the coordinator moved: look it up again before the next attempt.
        let mut moved = false;
        retry::until(cluster.config().request_timeout, || {
            if std::mem::take(&mut moved) {
                cluster.forget_coordinator(group);
            }
            let (tp, code) = match cluster.commit_offsets(group, &member_id, epoch, offsets) {
                Ok(None) => return Ok(()),
                Ok(Some(failed)) => failed,
                Err(e @ Error::Io { .. }) => return Err(Failure::retriable(e)),
                Err(e) => return Err(e.into()),
            };
            let error = || {
                let offset = offsets
                    .iter()
                    .find(|(t, _)| *t == tp)
                    .map_or(-1, |(_, o)| *o as i64);
                Error::Broker {
                    api: "OffsetCommit",
                    context: format!(
                        "group {group} member {member_id} epoch {epoch}, {tp} offset {offset}"
                    ),
                    code: ErrorCode(code),
                    message: None,
                }
            };
            if is_coordinator_error(code) || ErrorCode(code).is_retriable() {
                moved = true;
                return Err(Failure::retriable(error()));
            }
            // The member lost its tasks. Nothing is lost but progress: the next owner resumes
            // from the last accepted commit (at-least-once), and the next heartbeat rejoins.
            if matches!(
                ResponseError::try_from_code(code),
                Some(
                    ResponseError::UnknownMemberId
                        | ResponseError::FencedMemberEpoch
                        | ResponseError::StaleMemberEpoch
                        | ResponseError::GroupIdNotFound
                )
            ) {
                tracing::warn!(
                    group,
                    member = %member_id,
                    epoch,
                    error = %ErrorCode(code),
                    topic_partition = %tp,
                    "offset commit rejected: the member was fenced; its records since the last commit will be processed again"
                );
                return Ok(());
            }
            Err(error().into())
        })
    }
}

impl Backend for KafkaBackend {
    fn create_topic(&self, topic: &str, partitions: u32, kind: TopicKind) -> riffle::Result<()> {
        let configs = kind.configs();
        let configs: Vec<(&str, &str)> = configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Ok(self
            .inner
            .cluster
            .create_topic(topic, partitions, &configs)?)
    }

    fn partitions(&self, topic: &str) -> riffle::Result<Option<u32>> {
        Ok(self.inner.cluster.partitions(topic)?)
    }

    fn fetch(
        &self,
        tp: &TopicPartition,
        offset: u64,
        max_bytes: usize,
    ) -> riffle::Result<Vec<FetchedBatch>> {
        let batches = self.inner.cluster.fetch(tp, offset, max_bytes)?;
        // Only skipped batches (transaction markers, aborted transactions): watch for what
        // comes after them.
        let next = batches.last().map_or(offset, |b| b.last_offset() + 1);
        let readable = batches.iter().any(|b| b.record_count() > 0);
        self.inner.watch.fetched(tp, next, !readable);
        Ok(batches)
    }

    fn append(&self, tp: &TopicPartition, batch: &mut BatchBuilder) -> riffle::Result<u64> {
        if batch.is_empty() {
            return self.end_offset(tp);
        }
        let encoded = encode_batch(tp, batch)?;
        let base = self.inner.cluster.produce(tp, encoded)?;
        batch.clear();
        self.inner.watch.signal([tp.clone()]);
        Ok(base)
    }

    fn end_offset(&self, tp: &TopicPartition) -> riffle::Result<u64> {
        let ends = self.inner.cluster.end_offsets(std::slice::from_ref(tp))?;
        Ok(ends.first().copied().unwrap_or_default())
    }

    fn start_offset(&self, tp: &TopicPartition) -> riffle::Result<u64> {
        Ok(self.inner.cluster.start_offset(tp)?)
    }

    fn delete_records(&self, tp: &TopicPartition, offset: u64) -> riffle::Result<()> {
        Ok(self.inner.cluster.delete_records(tp, offset)?)
    }

    fn offset_for_timestamp(&self, tp: &TopicPartition, timestamp: i64) -> riffle::Result<u64> {
        Ok(self.inner.cluster.offset_for_timestamp(tp, timestamp)?)
    }

    fn commit_offsets(
        &self,
        group: &str,
        member: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> riffle::Result<()> {
        Ok(self.commit(group, member, offsets)?)
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
    ) -> riffle::Result<Vec<u64>> {
        Ok(self.commit_in_transaction(group, member, batches, offsets)?)
    }

    fn committed_offset(&self, group: &str, tp: &TopicPartition) -> riffle::Result<Option<u64>> {
        Ok(self.inner.cluster.committed_offset(group, tp)?)
    }

    fn data_version(&self) -> u64 {
        self.inner.watch.version()
    }

    fn wait_for_data(&self, seen: u64, woken: u64, timeout: Duration) -> u64 {
        self.inner.watch.wait(seen, woken, timeout)
    }

    fn changed_partitions(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        self.inner.watch.changed_since(seen, out)
    }

    fn wake_waiters(&self) {
        self.inner.watch.wake();
    }

    fn wake_count(&self) -> u64 {
        self.inner.watch.wake_count()
    }

    fn group_coordinator(&self, group: &GroupInfo) -> riffle::Result<Arc<dyn GroupCoordinator>> {
        if group.processing_guarantee == riffle::ProcessingGuarantee::ExactlyOnce {
            self.inner.cluster.check_transaction_versions()?;
            // Inputs, repartition topics and changelogs (restores too) read committed data.
            self.inner.cluster.set_read_committed();
        }
        let coordinator = Arc::new(StreamsGroup::new(self.inner.cluster.clone(), group)?);
        let mut groups = self.groups();
        // Commits find their member by (application id, stream thread name), and two
        // instances of one application have the same thread names.
        if groups.contains_key(&group.application_id) {
            return Err(Error::Config(format!(
                "this KafkaBackend already runs an instance of {}: connect one KafkaBackend per application instance",
                group.application_id
            ))
            .into());
        }
        groups.insert(group.application_id.clone(), coordinator.clone());
        Ok(coordinator)
    }
}
