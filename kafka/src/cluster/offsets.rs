//! The group-offset APIs: OffsetCommit (v9, as a streams-group member) and OffsetFetch.

use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName, offset_commit_request,
    offset_fetch_request,
};
use kafka_protocol::protocol::StrBytes;
use riffle_record::TopicPartition;

use super::{Cluster, by_topic, is_coordinator_error, name, versions};
use crate::error::{Error, ErrorCode, Result};
use crate::retry::{self, Failure};

impl Cluster {
    /// Commits `offsets` for `group` as member `member_id` at `member_epoch`. Returns the first
    /// failing partition's error code, if any, with its topic-partition.
    pub(crate) fn commit_offsets(
        &self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Option<(TopicPartition, i16)>> {
        let topics = by_topic(offsets.iter().map(|(tp, offset)| {
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
            p.partition_index = tp.partition as i32;
            p.committed_offset = *offset as i64;
            p.committed_leader_epoch = -1;
            p.committed_metadata = Some(StrBytes::from_static_str(""));
            (tp, p)
        }))
        .into_iter()
        .map(|(topic, partitions)| {
            let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
            t.name = TopicName(name(topic));
            t.partitions = partitions;
            t
        })
        .collect();
        let mut request = OffsetCommitRequest::default();
        request.group_id = GroupId(name(group));
        request.generation_id_or_member_epoch = member_epoch;
        request.member_id = name(member_id);
        request.retention_time_ms = -1;
        request.topics = topics;
        let broker = self.coordinator(group)?;
        let client_id = self.config.client_id.clone();
        let response = self
            .with_connection(&broker, |c| {
                c.send(
                    "OffsetCommit",
                    &client_id,
                    &request,
                    versions::OFFSET_COMMIT,
                )
            })
            .inspect_err(|_| self.forget_coordinator(group))?;
        for t in &response.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index as u32);
                    return Ok(Some((tp, p.error_code)));
                }
            }
        }
        Ok(None)
    }

    /// The committed offset of `group` for `tp` (read without member checks).
    pub(crate) fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        let mut topic = offset_fetch_request::OffsetFetchRequestTopics::default();
        topic.name = TopicName(name(&tp.topic));
        topic.partition_indexes = vec![tp.partition as i32];
        let fetched =
            self.fetch_offsets(group, Some(vec![topic]), &format!("group {group}, {tp}"))?;
        Ok(fetched.into_iter().next().and_then(|(_, offset)| offset))
    }

    /// OffsetFetch of `group` for `topics` (`None`: every topic it committed), without member
    /// checks, retried while the offsets are unstable, the coordinator moves or cannot be
    /// reached (until the request timeout): each partition and its committed offset (`None`:
    /// none).
    pub(crate) fn fetch_offsets(
        &self,
        group: &str,
        topics: Option<Vec<offset_fetch_request::OffsetFetchRequestTopics>>,
        context: &str,
    ) -> Result<Vec<(TopicPartition, Option<u64>)>> {
        let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
        g.group_id = GroupId(name(group));
        g.member_id = None;
        g.member_epoch = -1;
        g.topics = topics;
        let mut request = OffsetFetchRequest::default();
        request.groups = vec![g];
        request.require_stable = true;
        // Set when the coordinator moved: look it up again before the next attempt.
        let mut moved = false;
        retry::until(self.config.request_timeout, || {
            if std::mem::take(&mut moved) {
                self.forget_coordinator(group);
            }
            let broker = self.coordinator(group)?;
            let client_id = self.config.client_id.clone();
            let response = self
                .with_connection(&broker, |c| {
                    c.send("OffsetFetch", &client_id, &request, versions::OFFSET_FETCH)
                })
                .map_err(|e| {
                    // The coordinator died or is unreachable: look it up again (another broker
                    // takes its groups over) until the request timeout, as commits do.
                    self.forget_coordinator(group);
                    let retriable = matches!(e, Error::Io { .. });
                    Failure::new(e, retriable)
                })?;
            let g = response.groups.first().ok_or_else(|| Error::Decode {
                api: "OffsetFetch",
                reason: format!("no result for group {group}"),
            })?;
            let code = if g.error_code != 0 {
                g.error_code
            } else {
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.error_code)
                    .find(|&c| c != 0)
                    .unwrap_or(0)
            };
            if code == 0 {
                return Ok(g
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(|p| {
                            (
                                TopicPartition::new(t.name.0.as_str(), p.partition_index as u32),
                                u64::try_from(p.committed_offset).ok(),
                            )
                        })
                    })
                    .collect());
            }
            // UNSTABLE_OFFSET_COMMIT (88) and coordinator moves: retry.
            moved = is_coordinator_error(code);
            let error = Error::Broker {
                api: "OffsetFetch",
                context: context.to_owned(),
                code: ErrorCode(code),
                message: None,
            };
            Err(Failure::new(error, code == 88 || moved))
        })
    }
}
